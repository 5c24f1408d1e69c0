package device

import (
	"strings"
	"testing"
	"time"

	"github.com/hetgpu/hetgpu/internal/wanterr"
	"github.com/hetgpu/hetgpu/plugin"
)

func TestParseConfig(t *testing.T) {
	tests := []struct {
		name    string
		hcl     string
		check   func(Config) bool
		wantErr string
	}{
		{name: "defaults", hcl: ``, check: func(c Config) bool {
			return c.Enabled && c.FingerprintPeriod == time.Minute && len(c.IgnoredGPUIDs) == 0 && c.Fake == nil
		}},
		{name: "all fields", hcl: `
enabled = false
ignored_gpu_ids = ["GPU-1"]
fingerprint_period = "30s"
fake {
  gpus = ["4x T4", "2x A100-SXM4-40GB"]
  seed = "n1"
  power_alpha = 0.8
  mig {
    gpu = 4
    profiles = ["3g.20gb", "3g.20gb"]
  }
  fault {
    gpu = 0
    after = "1m"
    xid = 79
  }
}`, check: func(c Config) bool {
			f := c.Fake
			return !c.Enabled && c.FingerprintPeriod == 30*time.Second && c.IgnoredGPUIDs[0] == "GPU-1" && f != nil &&
				len(f.GPUs) == 2 && f.Seed == "n1" && f.PowerAlpha == 0.8 && f.DriverVersion == "550.54.15" &&
				len(f.MIG) == 1 && f.MIG[0].GPU == 4 && len(f.Faults) == 1 && f.Faults[0].After == time.Minute &&
				f.Faults[0].XID == 79 && f.Faults[0].Query == "all"
		}},
		{name: "bad period", hcl: `fingerprint_period = "often"`, wantErr: `config field "fingerprint_period": got string "often"`},
		{name: "too short period", hcl: `fingerprint_period = "1ms"`, wantErr: `config field "fingerprint_period": got 1ms, want at least 100ms`},
		{name: "empty ignored id", hcl: `ignored_gpu_ids = [""]`, wantErr: `config field "ignored_gpu_ids[0]"`},
		{name: "unknown model", hcl: `fake {
  gpus = ["4x T4", "1x Q9000"]
}`, wantErr: `config block "fake": fake: gpus[1]: gpu entry "1x Q9000": unknown model "Q9000"`},
		{name: "fractional gpu index", hcl: `fake {
  gpus = ["1x T4"]
  fault {
    gpu = 0.5
    xid = 79
  }
}`, wantErr: `config field "fake.fault[0].gpu": got float64 0.5`},
		{name: "bad fault duration", hcl: `fake {
  gpus = ["1x T4"]
  fault {
    gpu = 0
    xid = 79
    after = "soon"
  }
}`, wantErr: `config field "fake.fault[0].after"`},
		{name: "bad MIG profile", hcl: `fake {
  gpus = ["1x A100"]
  mig {
    gpu = 0
    profiles = ["5g.50gb"]
  }
}`, wantErr: `profile "5g.50gb" is not a A100-SXM4-40GB MIG profile`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := ParseConfig(encodeConfig(t, tt.hcl))
			if wanterr.Done(t, err, tt.wantErr) {
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !tt.check(cfg) {
				t.Errorf("config = %+v (fake %+v)", cfg, cfg.Fake)
			}
		})
	}
}

// The agent rejects a config that does not match the schema before the plugin sees it.
func TestSchemaRejectsUnknownAndMissing(t *testing.T) {
	for hcl, want := range map[string]string{`gpus = 1`: "Unsupported argument", `fake {}`: `"gpus" is required`} {
		_, err := plugin.EncodeHCLConfig(ConfigSchema(), []byte(hcl))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: got %v, want %q", hcl, err, want)
		}
	}
	// Empty bytes (no config at all) decode to the defaults.
	if cfg, err := ParseConfig(nil); err != nil || !cfg.Enabled || cfg.FingerprintPeriod != DefaultFingerprintPeriod {
		t.Errorf("nil config: %+v %v", cfg, err)
	}
}
