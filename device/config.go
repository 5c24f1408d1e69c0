package device

import (
	"fmt"
	"os"
	"time"

	"github.com/hetgpu/hetgpu/device/fake"
	"github.com/hetgpu/hetgpu/plugin"
	"github.com/hetgpu/hetgpu/plugin/proto/hclspec"
)

// Config is the agent's `plugin "nomad-device-hetgpu" { config { ... } }` block.
type Config struct {
	// Enabled false makes the plugin report no devices (the stream stays open).
	Enabled bool `msgpack:"enabled"`
	// IgnoredGPUIDs are GPU or MIG UUIDs never reported.
	IgnoredGPUIDs []string `msgpack:"ignored_gpu_ids"`
	// FingerprintPeriod is how often devices are re-enumerated; health events are immediate.
	FingerprintPeriod time.Duration `msgpack:"fingerprint_period"`
	// Fake makes the node pose as a GPU mix without GPUs (device/fake).
	Fake *FakeConfig `msgpack:"fake"`
	// Sharing exposes chosen GPUs as MPS slots (sharing.go).
	Sharing *SharingConfig `msgpack:"sharing"`
}

// FakeConfig is the `fake { ... }` block.
type FakeConfig struct {
	GPUs          []string      `msgpack:"gpus"`
	Seed          string        `msgpack:"seed"`
	PowerAlpha    float64       `msgpack:"power_alpha"`
	InitFailures  int           `msgpack:"init_failures"`
	DriverVersion string        `msgpack:"driver_version"`
	MIG           []MIGConfig   `msgpack:"mig"`
	Faults        []FaultConfig `msgpack:"fault"`
}

// MIGConfig is a `mig { gpu = 4  profiles = ["3g.20gb", "3g.20gb"] }` block.
type MIGConfig struct {
	GPU      int      `msgpack:"gpu"`
	Profiles []string `msgpack:"profiles"`
}

// FaultConfig is a `fault { gpu = 0  after = "30s"  xid = 79 }` or
// `fault { gpu = 1  error = "GPU_IS_LOST"  query = "power" }` block.
type FaultConfig struct {
	GPU   int           `msgpack:"gpu"`
	After time.Duration `msgpack:"after"`
	XID   uint64        `msgpack:"xid"`
	Error string        `msgpack:"error"`
	Query string        `msgpack:"query"`
}

// DefaultFingerprintPeriod matches nomad-device-nvidia.
const DefaultFingerprintPeriod = time.Minute

// minFingerprintPeriod keeps a typo ("1ms") from spinning NVML.
const minFingerprintPeriod = 100 * time.Millisecond

// DefaultConfig is the config with every default applied.
func DefaultConfig() Config {
	return Config{Enabled: true, FingerprintPeriod: DefaultFingerprintPeriod}
}

// ConfigSchema is the plugin's hclspec; defaults live here so the agent applies them.
func ConfigSchema() *hclspec.Spec {
	return plugin.Object(map[string]*hclspec.Spec{
		"enabled":            plugin.AttrDefault("enabled", "bool", "true"),
		"ignored_gpu_ids":    plugin.AttrDefault("ignored_gpu_ids", "list(string)", "[]"),
		"fingerprint_period": plugin.AttrDefault("fingerprint_period", "string", `"1m"`),
		"sharing": plugin.Block("sharing", false, plugin.Object(map[string]*hclspec.Spec{
			"gpus":  plugin.Attr("gpus", "list(string)", true),
			"slots": plugin.AttrDefault("slots", "number", "2"),
		})),
		"fake": plugin.Block("fake", false, plugin.Object(map[string]*hclspec.Spec{
			"gpus":           plugin.Attr("gpus", "list(string)", true),
			"seed":           plugin.AttrDefault("seed", "string", `""`),
			"power_alpha":    plugin.AttrDefault("power_alpha", "number", "0.7"),
			"init_failures":  plugin.AttrDefault("init_failures", "number", "0"),
			"driver_version": plugin.AttrDefault("driver_version", "string", `"550.54.15"`),
			"mig": plugin.BlockList("mig", 0, 0, plugin.Object(map[string]*hclspec.Spec{
				"gpu":      plugin.Attr("gpu", "number", true),
				"profiles": plugin.Attr("profiles", "list(string)", true),
			})),
			"fault": plugin.BlockList("fault", 0, 0, plugin.Object(map[string]*hclspec.Spec{
				"gpu":   plugin.Attr("gpu", "number", true),
				"after": plugin.AttrDefault("after", "string", `"0s"`),
				"xid":   plugin.AttrDefault("xid", "number", "0"),
				"error": plugin.AttrDefault("error", "string", `""`),
				"query": plugin.AttrDefault("query", "string", `"all"`),
			})),
		})),
	})
}

// ParseConfig decodes SetConfig's msgpack bytes and validates them; errors name the field.
func ParseConfig(data []byte) (Config, error) {
	cfg := DefaultConfig()
	if err := plugin.DecodeConfig(data, &cfg); err != nil {
		return Config{}, err
	}
	if cfg.FingerprintPeriod < minFingerprintPeriod {
		return Config{}, fmt.Errorf("config field \"fingerprint_period\": got %s, want at least %s (e.g. \"1m\")", cfg.FingerprintPeriod, minFingerprintPeriod)
	}
	for i, id := range cfg.IgnoredGPUIDs {
		if id == "" {
			return Config{}, fmt.Errorf("config field \"ignored_gpu_ids[%d]\": got an empty string, want a GPU or MIG UUID", i)
		}
	}
	if cfg.Sharing != nil {
		if err := cfg.Sharing.validate(); err != nil {
			return Config{}, err
		}
	}
	if cfg.Fake != nil {
		// Build once to validate every fake field now, not at first fingerprint.
		f, err := fake.New(cfg.Fake.Spec())
		if err != nil {
			return Config{}, fmt.Errorf("config block \"fake\": %w", err)
		}
		f.Close()
	}
	return cfg, nil
}

// Spec converts the block to the fake backend's spec; the seed defaults to the host name so
// every node gets its own UUIDs.
func (c *FakeConfig) Spec() fake.Spec {
	s := fake.Spec{GPUs: c.GPUs, Seed: c.Seed, PowerAlpha: c.PowerAlpha, InitFailures: c.InitFailures,
		DriverVersion: c.DriverVersion}
	if s.Seed == "" {
		s.Seed, _ = os.Hostname()
	}
	for _, m := range c.MIG {
		s.MIG = append(s.MIG, fake.MIG{GPU: m.GPU, Profiles: m.Profiles})
	}
	for _, f := range c.Faults {
		s.Faults = append(s.Faults, fake.Fault{GPU: f.GPU, After: f.After, XID: f.XID, Error: f.Error, Query: f.Query})
	}
	return s
}
