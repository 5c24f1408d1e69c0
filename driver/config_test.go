package driver

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hetgpu/hetgpu/plugin"
	"github.com/hetgpu/hetgpu/plugin/proto/base"
	"github.com/hetgpu/hetgpu/plugin/proto/drivers"
	"github.com/hetgpu/hetgpu/plugin/proto/hclspec"
)

// encodeTask parses a job's task config block the way the Nomad client does and encodes it
// as msgpack_driver_config.
func encodeTask(t testing.TB, src string) []byte {
	t.Helper()
	return encodeHCL(t, taskConfigSpec(), src)
}

// encodePlugin encodes a plugin block's config as the Nomad client hands it to the driver.
func encodePlugin(t testing.TB, src string) []byte {
	t.Helper()
	return encodeHCL(t, pluginConfigSpec(), src)
}

func encodeHCL(t testing.TB, spec *hclspec.Spec, src string) []byte {
	t.Helper()
	b, err := plugin.EncodeHCLConfig(spec, []byte(src))
	if err != nil {
		t.Fatalf("encode config: %v\n%s", err, src)
	}
	return b
}

func TestTaskConfigDecode(t *testing.T) {
	b := encodeTask(t, `
command = "python3"
args    = ["train.py", "--epochs", "3"]
metrics {
  regex = "throughput (?P<samples_per_sec>[0-9.]+)"
}
sharing {
  mps               = true
  active_thread_pct = 50
}
power_limit = 250
`)
	c, err := decodeTaskConfig(b)
	if err != nil {
		t.Fatal(err)
	}
	if c.Command != "python3" || len(c.Args) != 3 || c.Metrics == nil || c.Metrics.Regex == "" || c.Metrics.File != "" ||
		c.Sharing == nil || !c.Sharing.MPS || c.Sharing.ActiveThreadPct != 50 || c.PowerLimit != 250 {
		t.Fatalf("decoded %+v metrics %+v sharing %+v", c, c.Metrics, c.Sharing)
	}
	if got := c.metricsPath("/alloc/train"); got != "/alloc/train/local/hetgpu-metrics.jsonl" {
		t.Errorf("metrics path = %s", got)
	}

	minimal, err := decodeTaskConfig(encodeTask(t, `command = "/bin/true"`))
	if err != nil {
		t.Fatal(err)
	}
	if minimal.Metrics != nil || minimal.Sharing != nil || minimal.PowerLimit != 0 || len(minimal.Args) != 0 {
		t.Errorf("defaults: %+v", minimal)
	}
}

// Errors the schema catches surface in Nomad as "Failed Validation"; the rest come from
// StartTask. Both must name the field.
func TestTaskConfigErrorsNameTheField(t *testing.T) {
	schemaErrors := []struct {
		src, field string
	}{
		{`args = ["x"]`, "command"},
		{`command = "x"
power_limit = "lots"`, "power_limit"},
		{`command = "x"
sharing { mps = "maybe" }`, "mps"},
		{`command = "x"
gpus = 2`, "gpus"},
	}
	for _, tc := range schemaErrors {
		_, err := plugin.EncodeHCLConfig(taskConfigSpec(), []byte(tc.src))
		if err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("schema error for %q = %v, want it to name %q", tc.src, err, tc.field)
		}
	}
	semantic := []struct {
		src, want string
	}{
		{`command = "  "`, `"command": empty`},
		{`command = "x"
metrics { regex = "throughput ([0-9]+)" }`, `metrics.regex`},
		{`command = "x"
metrics { regex = "(?P<samples>[0-9" }`, `metrics.regex`},
		{`command = "x"
metrics { file = "../../etc/passwd" }`, `"metrics.file": got "../../etc/passwd"`},
		{`command = "x"
metrics { file = "/etc/passwd" }`, `"metrics.file"`},
		{`command = "x"
sharing { active_thread_pct = 50 }`, `"sharing.active_thread_pct": got 50 with mps = false`},
		{`command = "x"
sharing {
  mps = true
  active_thread_pct = 150
}`, `"sharing.active_thread_pct": got 150, want 1..100`},
		{`command = "x"
power_limit = -5`, `"power_limit": got -5`},
		{`command = "x"
sharing {
  mps = true
  active_thread_pct = 12.5
}`, `sharing.active_thread_pct`},
	}
	for _, tc := range semantic {
		_, err := decodeTaskConfig(encodeTask(t, tc.src))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("decode %q: error %v, want one containing %q", tc.src, err, tc.want)
		}
	}
}

func FuzzDecodeTaskConfig(f *testing.F) {
	for _, src := range []string{
		`command = "python3"`,
		`command = "x"
args = ["a", "b"]
metrics { file = "local/m.jsonl" }
power_limit = 300`,
		`command = "x"
sharing {
  mps = true
  active_thread_pct = 25
}`,
	} {
		f.Add(encodeTask(f, src))
	}
	f.Add([]byte{0xc0})
	f.Add([]byte{0x81, 0xa7, 'c', 'o', 'm', 'm', 'a', 'n', 'd', 0x05})
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := decodeTaskConfig(data)
		if err != nil {
			return
		}
		// Whatever decodes is valid by our own rules.
		if verr := c.validate(); verr != nil {
			t.Fatalf("decoded config fails validation: %v", verr)
		}
		if strings.TrimSpace(c.Command) == "" {
			t.Fatal("empty command accepted")
		}
	})
}

func TestPluginConfig(t *testing.T) {
	c, err := decodePluginConfig(encodePlugin(t, `
sidecar_addr    = "http://127.0.0.1:4656"
state_dir       = "/var/lib/hetgpu-driver"
sample_interval = "500ms"
`), "")
	if err != nil {
		t.Fatal(err)
	}
	if c.SidecarAddr != "http://127.0.0.1:4656" || c.SpoolDir != "/var/lib/hetgpu-driver/spool" || c.SampleInterval != 500*time.Millisecond ||
		c.NVML != "auto" || c.CgroupParent != "hetgpu.slice" || c.StartTimeout != 30*time.Second {
		t.Fatalf("decoded %+v", c)
	}
	empty, err := decodePluginConfig(encodePlugin(t, ``), "")
	if err != nil || empty.StateDir == "" || empty.NVML != "auto" {
		t.Fatalf("empty config: %+v, %v", empty, err)
	}
	for _, tc := range []struct{ src, want string }{
		{`nvml = "maybe"`, `"nvml": got "maybe"`},
		{`nvml = "fake"`, `"fake_gpus": empty`},
		{`sample_interval = "1h"`, `"sample_interval": got 1h0m0s`},
		{`sample_interval = "soon"`, `sample_interval`},
		{`sidecar_addr = "127.0.0.1:4656"`, `"sidecar_addr": got "127.0.0.1:4656"`},
		{`state_dir = "relative/dir"`, `"state_dir": got "relative/dir", want an absolute path`},
		{`cgroup_parent = "../escape"`, `"cgroup_parent"`},
	} {
		if _, err := decodePluginConfig(encodePlugin(t, tc.src), ""); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", tc.src, err, tc.want)
		}
	}
}

// Several Nomad clients on one host run their own driver from their own plugin_dir: each gets
// its own default state_dir (and spool), stable across restarts; an explicit state_dir wins.
func TestDefaultStateDirPerClient(t *testing.T) {
	base := "/var/lib/nomad-driver-hetgpu"
	dirs := func(src, pluginPath string) (string, string) {
		t.Helper()
		c, err := decodePluginConfig(encodePlugin(t, src), clientStateDir(base, pluginPath))
		if err != nil {
			t.Fatal(err)
		}
		return c.StateDir, c.SpoolDir
	}
	c1, spool1 := dirs(``, "/srv/nomad/client1/plugins/nomad-driver-hetgpu")
	c2, spool2 := dirs(``, "/srv/nomad/client2/plugins/nomad-driver-hetgpu")
	again, _ := dirs(``, "/srv/nomad/client1/plugins/./nomad-driver-hetgpu")
	renamed, _ := dirs(``, "/srv/nomad/client1/plugins/hetgpu-v2")
	explicit, _ := dirs(`state_dir = "/var/lib/mine"`, "/srv/nomad/client1/plugins/nomad-driver-hetgpu")
	none, _ := dirs(``, "")
	for _, tt := range []struct {
		name string
		ok   bool
	}{
		{"under the per-machine default", filepath.Dir(c1) == base && filepath.Dir(c2) == base},
		{"named client-<hash>", strings.HasPrefix(filepath.Base(c1), "client-") && len(filepath.Base(c1)) == len("client-")+12},
		{"one per client", c1 != c2},
		{"spools apart", spool1 == filepath.Join(c1, "spool") && spool2 == filepath.Join(c2, "spool") && spool1 != spool2},
		{"stable across restarts", again == c1},
		{"keyed by the directory, not the binary's name", renamed == c1},
		{"explicit state_dir wins", explicit == "/var/lib/mine"},
		{"no plugin path: the per-machine directory", none == base},
	} {
		if !tt.ok {
			t.Errorf("%s: client1 %s, client2 %s, again %s, renamed %s, explicit %s, none %s", tt.name, c1, c2, again, renamed, explicit, none)
		}
	}
	// The driver keys by the path it was run as.
	if d := New(nil, Options{}); d.opts.PluginPath == "" || !filepath.IsAbs(d.opts.PluginPath) {
		t.Errorf("default plugin path %q", d.opts.PluginPath)
	}
}

// twoClientConfigs configures, through SetConfig with no state_dir, the drivers of two
// clients (client1, client2) that share stateBase, and returns their resolved configs.
func twoClientConfigs(t *testing.T, stateBase string) []PluginConfig {
	t.Helper()
	var out []PluginConfig
	for _, c := range []string{"client1", "client2"} {
		d := New(nil, Options{PluginPath: filepath.Join("/srv/nomad", c, "plugins", "nomad-driver-hetgpu"), StateBase: stateBase})
		t.Cleanup(func() { _, _ = d.Shutdown(context.Background(), &drivers.ShutdownRequest{}) })
		if _, err := d.BaseServer().SetConfig(context.Background(), &base.SetConfigRequest{}); err != nil {
			t.Fatal(err)
		}
		d.mu.Lock()
		out = append(out, d.cfg)
		d.mu.Unlock()
	}
	return out
}

// Two drivers of two clients configured through SetConfig with no state_dir create and use
// two directories.
func TestSetConfigStateDirPerClient(t *testing.T) {
	stateBase := t.TempDir()
	var got []string
	for i, cfg := range twoClientConfigs(t, stateBase) {
		c, dir := fmt.Sprintf("client%d", i+1), cfg.StateDir
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() || filepath.Dir(dir) != stateBase {
			t.Fatalf("%s: state_dir %s not created in %s (%v)", c, dir, stateBase, err)
		}
		got = append(got, dir)
	}
	if got[0] == got[1] {
		t.Fatalf("both clients use %s", got[0])
	}
}

// TestLegacySpoolAdopted: run records an earlier version spooled in the shared <base>/spool
// move into the first configured client's own spool, each exactly once.
func TestLegacySpoolAdopted(t *testing.T) {
	stateBase := t.TempDir()
	legacy := filepath.Join(stateBase, "spool")
	if err := os.MkdirAll(legacy, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"001-a.json", "002-b.json"} {
		if err := os.WriteFile(filepath.Join(legacy, n), []byte(`{}`), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var spools []string
	for _, cfg := range twoClientConfigs(t, stateBase) {
		spools = append(spools, cfg.SpoolDir)
	}
	first, _ := filepath.Glob(filepath.Join(spools[0], "*.json"))
	second, _ := filepath.Glob(filepath.Join(spools[1], "*.json"))
	left, _ := filepath.Glob(filepath.Join(legacy, "*.json"))
	if len(first) != 2 || len(second) != 0 || len(left) != 0 {
		t.Errorf("records: first client %v, second %v, left in the shared spool %v", first, second, left)
	}
}

func TestAnnotationsFromMetaEnv(t *testing.T) {
	a := parseAnnotations(map[string]string{
		"NOMAD_META_hetgpu_model":      "resnet/ResNet-50",
		"NOMAD_META_HETGPU_MODEL":      "RESNET/RESNET-50",
		"NOMAD_META_hetgpu.batch_size": "64",
		"NOMAD_META_HETGPU_PARAMS":     "25.6M",
		"NOMAD_META_hetgpu_framework":  "pytorch",
		"NOMAD_META_other":             "x",
		"PATH":                         "/bin",
	})
	if a.ModelFamily != "resnet" || a.ModelName != "ResNet-50" || a.BatchSize != 64 || a.ParamCount != 25.6e6 ||
		a.Framework != "pytorch" || len(a.Problems) != 0 {
		t.Fatalf("annotations = %+v", a)
	}
	bad := parseAnnotations(map[string]string{"NOMAD_META_hetgpu_batch_size": "big", "NOMAD_META_hetgpu_model": "BERT"})
	if bad.BatchSize != 0 || bad.ModelName != "BERT" || bad.ModelFamily != "" || len(bad.Problems) != 1 ||
		!strings.Contains(bad.Problems[0], `hetgpu.batch_size = "big"`) {
		t.Fatalf("bad annotations = %+v", bad)
	}
	// Older spellings still count; the documented key wins when both are set.
	alias := parseAnnotations(map[string]string{"NOMAD_META_hetgpu_param_count": "1.5B", "NOMAD_META_hetgpu_batch": "8",
		"NOMAD_META_hetgpu_batch_size": "16", "NOMAD_META_hetgpu_unknown": "x"})
	if alias.ParamCount != 1.5e9 || alias.BatchSize != 16 || len(alias.Problems) != 0 {
		t.Fatalf("aliased annotations = %+v", alias)
	}
}

func TestParseSignal(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want syscall.Signal
		err  bool
	}{
		{"", syscall.SIGINT, false}, {"SIGTERM", syscall.SIGTERM, false}, {"hup", syscall.SIGHUP, false},
		{"SIGUSR1", syscall.SIGUSR1, false}, {"9", syscall.SIGKILL, false}, {"SIGNOPE", 0, true}, {"0", 0, true},
	} {
		got, err := parseSignal(tc.in)
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("parseSignal(%q) = %v, %v", tc.in, got, err)
		}
	}
}

func TestLabelsAndIDs(t *testing.T) {
	if got := gpuLabel([]string{"NVIDIA A100-SXM4-40GB", "NVIDIA A100-SXM4-40GB"}); got != "2x A100-SXM4-40GB" {
		t.Errorf("gpuLabel = %q", got)
	}
	if got := gpuLabel([]string{"Tesla T4", "Tesla V100-SXM2-16GB", "Tesla T4"}); got != "2x T4 + 1x V100-SXM2-16GB" {
		t.Errorf("gpuLabel mixed = %q", got)
	}
	if got := gpuLabel(nil); got != "no GPUs" {
		t.Errorf("gpuLabel none = %q", got)
	}
	if got := sanitizeID("0a1b-2c/train/8f3e"); got != "0a1b-2c_train_8f3e" {
		t.Errorf("sanitizeID = %q", got)
	}
	if got := sanitizeID("../.."); strings.Contains(got, "/") || strings.HasPrefix(got, ".") {
		t.Errorf("sanitizeID escapes: %q", got)
	}
	if got := formatRate(812.46); got != "812" {
		t.Errorf("formatRate = %q", got)
	}
	if got := visibleIDs(" GPU-a, GPU-b ,"); len(got) != 2 || got[1] != "GPU-b" {
		t.Errorf("visibleIDs = %q", got)
	}
}

func TestDriverStateRoundTrip(t *testing.T) {
	s := &driverState{GPUs: []string{"GPU-a"}, MetricsFile: "/m"}
	s.Shim.Dir, s.Shim.ShimPID, s.Shim.TaskPID = "/state/tasks/x", 10, 11
	b, err := encodeDriverState(s)
	if err != nil {
		t.Fatal(err)
	}
	back, err := decodeDriverState(b)
	if err != nil || back.Shim.TaskPID != 11 || back.GPUs[0] != "GPU-a" {
		t.Fatalf("round trip: %+v, %v", back, err)
	}
	for _, bad := range []string{``, `{}`, `{"version": 99, "shim": {"dir": "/x", "shim_pid": 1}}`, `{"version": 1}`, `not json`} {
		if _, err := decodeDriverState([]byte(bad)); err == nil {
			t.Errorf("decodeDriverState(%q) accepted", bad)
		}
	}
}

func TestEventBusKeepsEventsUntilSubscribed(t *testing.T) {
	b := newEventBus()
	for i := range maxPendingEvents + 5 {
		b.publish(&drivers.DriverTaskEvent{Message: fmt.Sprint(i)})
	}
	ch, cancel := b.subscribe()
	defer cancel()
	first := <-ch
	if first.GetMessage() != "5" || len(ch) != maxPendingEvents-1 {
		t.Fatalf("first replayed = %q, %d queued; want the newest %d", first.GetMessage(), len(ch)+1, maxPendingEvents)
	}
	b.publish(&drivers.DriverTaskEvent{Message: "live"})
	for len(ch) > 1 {
		<-ch
	}
	if got := (<-ch).GetMessage(); got != "live" {
		t.Fatalf("live event = %q", got)
	}
	ch2, cancel2 := b.subscribe()
	defer cancel2()
	if len(ch2) != 0 {
		t.Fatal("events replayed twice")
	}
}
