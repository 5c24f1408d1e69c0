package driver

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/hetgpu/hetgpu/driver/telemetry"
	"github.com/hetgpu/hetgpu/plugin"
	"github.com/hetgpu/hetgpu/plugin/proto/hclspec"
)

// PluginConfig is the agent's `plugin "nomad-driver-hetgpu" { config { ... } }` block.
type PluginConfig struct {
	// SidecarAddr is the hetgpu sidecar's base URL; empty keeps run records in the spool.
	SidecarAddr string `msgpack:"sidecar_addr"`
	// SidecarToken is sent as a bearer token: the sidecar's write_token (least privilege: it
	// can post run records and read nothing), or its admin token.
	SidecarToken string `msgpack:"sidecar_token"`
	// The sidecar through Nomad service discovery and over TLS (discovery.go).
	SidecarService  string `msgpack:"sidecar_service"`
	NomadAddress    string `msgpack:"nomad_address"`
	NomadToken      string `msgpack:"nomad_token"`
	NomadNamespace  string `msgpack:"nomad_namespace"`
	SidecarCAFile   string `msgpack:"sidecar_ca_file"`
	SidecarCertFile string `msgpack:"sidecar_cert_file"`
	SidecarKeyFile  string `msgpack:"sidecar_key_file"`
	// SpoolDir holds run records until the sidecar took them (default <state_dir>/spool).
	SpoolDir string `msgpack:"spool_dir"`
	// StateDir holds each task's shim files and telemetry checkpoints (default: one directory
	// per Nomad client, see clientStateDir).
	StateDir string `msgpack:"state_dir"`
	// NVML is "auto" (use it when the library loads), "required" (unhealthy without it),
	// "fake" (the device plugin's fake GPUs, see Fake) or "off".
	NVML string `msgpack:"nvml"`
	// Fake lists the GPU mix the fake backend poses as, in the device plugin's syntax, and
	// FakeSeed its UUID seed: both must match the device plugin's fake block so the UUIDs
	// Nomad hands the task are found (the device plugin's seed defaults to the host name).
	Fake     []string `msgpack:"fake_gpus"`
	FakeSeed string   `msgpack:"fake_seed"`
	// FakeMIG puts fake GPUs in MIG mode as the device plugin's mig blocks do:
	// "<gpu index>=<profile>,<profile>" (e.g. "0=3g.20gb,3g.20gb").
	FakeMIG        []string      `msgpack:"fake_mig"`
	SampleInterval time.Duration `msgpack:"sample_interval"`
	CgroupParent   string        `msgpack:"cgroup_parent"`
	MPSPipeDir     string        `msgpack:"mps_pipe_dir"`
	MPSLogDir      string        `msgpack:"mps_log_dir"`
	StartTimeout   time.Duration `msgpack:"start_timeout"`
}

// NVML modes.
const (
	nvmlAuto     = "auto"
	nvmlRequired = "required"
	nvmlFake     = "fake"
	nvmlOff      = "off"
)

// defaultPluginConfig mirrors the schema's defaults, for SetConfig with empty bytes.
func defaultPluginConfig() PluginConfig {
	return PluginConfig{
		NomadAddress:   defaultNomadAddress,
		NomadNamespace: "default",
		NVML:           nvmlAuto,
		SampleInterval: telemetry.DefaultInterval,
		CgroupParent:   "hetgpu.slice",
		MPSPipeDir:     "/tmp/nvidia-mps",
		MPSLogDir:      "/tmp/nvidia-log",
		StartTimeout:   30 * time.Second,
	}
}

// pluginConfigSpec is the ConfigSchema answer.
func pluginConfigSpec() *hclspec.Spec {
	return plugin.Object(map[string]*hclspec.Spec{
		"sidecar_addr":      plugin.AttrDefault("sidecar_addr", "string", `""`),
		"sidecar_token":     plugin.AttrDefault("sidecar_token", "string", `""`),
		"sidecar_service":   plugin.AttrDefault("sidecar_service", "string", `""`),
		"nomad_address":     plugin.AttrDefault("nomad_address", "string", strconv.Quote(defaultNomadAddress)),
		"nomad_token":       plugin.AttrDefault("nomad_token", "string", `""`),
		"nomad_namespace":   plugin.AttrDefault("nomad_namespace", "string", `"default"`),
		"sidecar_ca_file":   plugin.AttrDefault("sidecar_ca_file", "string", `""`),
		"sidecar_cert_file": plugin.AttrDefault("sidecar_cert_file", "string", `""`),
		"sidecar_key_file":  plugin.AttrDefault("sidecar_key_file", "string", `""`),
		"spool_dir":         plugin.AttrDefault("spool_dir", "string", `""`),
		"state_dir":         plugin.AttrDefault("state_dir", "string", `""`),
		"nvml":              plugin.AttrDefault("nvml", "string", `"auto"`),
		"fake_gpus":         plugin.AttrDefault("fake_gpus", "list(string)", `[]`),
		"fake_mig":          plugin.AttrDefault("fake_mig", "list(string)", `[]`),
		"fake_seed":         plugin.AttrDefault("fake_seed", "string", `""`),
		"sample_interval":   plugin.AttrDefault("sample_interval", "string", `"1s"`),
		"cgroup_parent":     plugin.AttrDefault("cgroup_parent", "string", `"hetgpu.slice"`),
		"mps_pipe_dir":      plugin.AttrDefault("mps_pipe_dir", "string", `"/tmp/nvidia-mps"`),
		"mps_log_dir":       plugin.AttrDefault("mps_log_dir", "string", `"/tmp/nvidia-log"`),
		"start_timeout":     plugin.AttrDefault("start_timeout", "string", `"30s"`),
	})
}

// decodePluginConfig decodes and checks SetConfig's bytes; errors name the field. stateDir is
// the default state_dir (the client's, see clientStateDir).
func decodePluginConfig(data []byte, stateDir string) (PluginConfig, error) {
	c := defaultPluginConfig()
	if err := plugin.DecodeConfig(data, &c); err != nil {
		return c, err
	}
	switch c.NVML {
	case nvmlAuto, nvmlRequired, nvmlFake, nvmlOff:
	default:
		return c, fmt.Errorf(`config field "nvml": got %q, want "auto", "required", "fake" or "off"`, c.NVML)
	}
	if c.NVML == nvmlFake && len(c.Fake) == 0 {
		return c, fmt.Errorf(`config field "fake_gpus": empty, but nvml = "fake" needs a GPU mix such as ["2x a100", "1x t4"]`)
	}
	if _, err := ParseFakeMIG(c.FakeMIG); err != nil {
		return c, err
	}
	if c.SampleInterval < 100*time.Millisecond || c.SampleInterval > time.Minute {
		return c, fmt.Errorf(`config field "sample_interval": got %v, want between 100ms and 1m`, c.SampleInterval)
	}
	if c.StartTimeout < time.Second {
		return c, fmt.Errorf(`config field "start_timeout": got %v, want at least 1s`, c.StartTimeout)
	}
	if c.SidecarAddr != "" && !strings.HasPrefix(c.SidecarAddr, "http://") && !strings.HasPrefix(c.SidecarAddr, "https://") {
		return c, fmt.Errorf(`config field "sidecar_addr": got %q, want a URL such as "http://127.0.0.1:4656"`, c.SidecarAddr)
	}
	if err := checkSidecarConfig(c); err != nil {
		return c, err
	}
	if strings.Contains(c.CgroupParent, "..") || filepath.IsAbs(c.CgroupParent) || c.CgroupParent == "" {
		return c, fmt.Errorf(`config field "cgroup_parent": got %q, want a relative cgroup name such as "hetgpu.slice"`, c.CgroupParent)
	}
	for _, f := range []struct{ name, v string }{{"state_dir", c.StateDir}, {"spool_dir", c.SpoolDir}, {"mps_pipe_dir", c.MPSPipeDir}, {"mps_log_dir", c.MPSLogDir}} {
		if f.v != "" && !filepath.IsAbs(f.v) {
			return c, fmt.Errorf("config field %q: got %q, want an absolute path", f.name, f.v)
		}
	}
	if c.StateDir == "" {
		c.StateDir = stateDir
	}
	if c.StateDir == "" {
		c.StateDir = defaultStateDir()
	}
	if c.FakeSeed == "" {
		c.FakeSeed, _ = os.Hostname()
	}
	if c.SpoolDir == "" {
		c.SpoolDir = filepath.Join(c.StateDir, "spool")
	}
	return c, nil
}

// clientStateDir is the default state_dir of the Nomad client that ran the plugin from
// pluginPath: base/client-<12 hex digits of SHA-256 of the plugin's directory>. Several
// clients on one host each run their own driver process, and Nomad gives a driver nothing
// that names its client (SetConfig's agent config has only the client's port range and CPU
// topology); what differs is the plugin_dir Nomad runs the binary from, <data_dir>/plugins by
// default. A shared default let one client's driver retry another client's spooled run
// records. Clients that share a plugin_dir must set state_dir each.
func clientStateDir(base, pluginPath string) string {
	if pluginPath == "" {
		return base
	}
	sum := sha256.Sum256([]byte(filepath.Clean(filepath.Dir(pluginPath))))
	return filepath.Join(base, "client-"+hex.EncodeToString(sum[:6]))
}

// defaultPluginPath is os.Args[0] made absolute, or "" when there is none.
func defaultPluginPath() string {
	if len(os.Args) == 0 || os.Args[0] == "" {
		return ""
	}
	p, err := filepath.Abs(os.Args[0])
	if err != nil {
		return ""
	}
	return p
}

// defaultStateDir is the per-machine parent of the clients' state directories; it survives
// driver restarts (tasks do not survive a reboot, so a tmpfs is fine when not root).
func defaultStateDir() string {
	if os.Geteuid() == 0 {
		return "/var/lib/nomad-driver-hetgpu"
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("nomad-driver-hetgpu-%d", os.Geteuid()))
}

// TaskConfig is the job's `config { ... }` block for driver = "hetgpu".
type TaskConfig struct {
	Command string   `msgpack:"command" json:"command"`
	Args    []string `msgpack:"args" json:"args,omitempty"`
	Metrics *Metrics `msgpack:"metrics" json:"metrics,omitempty"`
	Sharing *Sharing `msgpack:"sharing" json:"sharing,omitempty"`
	// PowerLimit is a per-GPU cap in watts for the task's lifetime; 0 leaves the GPUs alone.
	PowerLimit float64 `msgpack:"power_limit" json:"power_limit,omitempty"`
}

// Metrics says where the task's progress is read.
type Metrics struct {
	// File is the JSON-lines file, relative to the task directory.
	File string `msgpack:"file" json:"file,omitempty"`
	// Regex is matched against stdout lines instead; matches become metrics lines.
	Regex string `msgpack:"regex" json:"regex,omitempty"`
}

// Sharing configures CUDA MPS for jobs that share a GPU.
type Sharing struct {
	MPS             bool `msgpack:"mps" json:"mps"`
	ActiveThreadPct int  `msgpack:"active_thread_pct" json:"active_thread_pct,omitempty"`
}

// defaultMetricsFile is where the task writes metrics when the config names no file,
// relative to the task directory (Nomad's NOMAD_TASK_DIR is <task dir>/local).
const defaultMetricsFile = "local/hetgpu-metrics.jsonl"

// taskConfigSpec is the TaskConfigSchema answer. Nomad parses the job's config block with
// it, so type errors and missing attributes become "Failed Validation" events naming the
// attribute before the driver sees the task.
func taskConfigSpec() *hclspec.Spec {
	return plugin.Object(map[string]*hclspec.Spec{
		"command": plugin.Attr("command", "string", true),
		"args":    plugin.AttrDefault("args", "list(string)", `[]`),
		"metrics": plugin.Block("metrics", false, plugin.Object(map[string]*hclspec.Spec{
			"file":  plugin.AttrDefault("file", "string", `""`),
			"regex": plugin.AttrDefault("regex", "string", `""`),
		})),
		"sharing": plugin.Block("sharing", false, plugin.Object(map[string]*hclspec.Spec{
			"mps":               plugin.AttrDefault("mps", "bool", `false`),
			"active_thread_pct": plugin.AttrDefault("active_thread_pct", "number", `0`),
		})),
		"power_limit": plugin.AttrDefault("power_limit", "number", `0`),
	})
}

// decodeTaskConfig decodes msgpack_driver_config and checks what the schema cannot: every
// error names the field, the value and what is expected.
func decodeTaskConfig(data []byte) (*TaskConfig, error) {
	var c TaskConfig
	if err := plugin.DecodeConfig(data, &c); err != nil {
		return nil, err
	}
	if err := c.validate(); err != nil {
		return nil, err
	}
	return &c, nil
}

func (c *TaskConfig) validate() error {
	if strings.TrimSpace(c.Command) == "" {
		return fmt.Errorf(`task config field "command": empty, want the program to run, e.g. "python3" or "/opt/train/run.sh"`)
	}
	if m := c.Metrics; m != nil {
		if m.File != "" {
			clean := filepath.Clean(m.File)
			if filepath.IsAbs(m.File) || clean == ".." || strings.HasPrefix(clean, "../") {
				return fmt.Errorf(`task config field "metrics.file": got %q, want a path inside the task directory such as "local/metrics.jsonl"`, m.File)
			}
		}
		if m.Regex != "" {
			if _, err := telemetry.NewRegexExtractor(m.Regex); err != nil {
				return fmt.Errorf("task config field %w", err)
			}
		}
	}
	if s := c.Sharing; s != nil {
		if s.ActiveThreadPct < 0 || s.ActiveThreadPct > 100 {
			return fmt.Errorf(`task config field "sharing.active_thread_pct": got %d, want 1..100 (or 0 for no cap)`, s.ActiveThreadPct)
		}
		if s.ActiveThreadPct > 0 && !s.MPS {
			return fmt.Errorf(`task config field "sharing.active_thread_pct": got %d with mps = false; the percentage only applies under MPS, set mps = true`, s.ActiveThreadPct)
		}
	}
	if math.IsNaN(c.PowerLimit) || c.PowerLimit < 0 || c.PowerLimit > 2000 {
		return fmt.Errorf(`task config field "power_limit": got %v, want watts per GPU between 1 and 2000 (0 leaves the limit unchanged)`, c.PowerLimit)
	}
	return nil
}

// metricsPath is the metrics file's path for a task directory.
func (c *TaskConfig) metricsPath(taskDir string) string {
	if c.Metrics != nil && c.Metrics.File != "" {
		return filepath.Join(taskDir, c.Metrics.File)
	}
	return filepath.Join(taskDir, defaultMetricsFile)
}

func (c *TaskConfig) metricsRegex() string {
	if c.Metrics == nil {
		return ""
	}
	return c.Metrics.Regex
}
