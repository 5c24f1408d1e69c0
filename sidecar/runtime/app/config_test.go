package app

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hetgpu/hetgpu/internal/testcerts"
	"github.com/hetgpu/hetgpu/model/history"
	"github.com/hetgpu/hetgpu/sidecar/stages/preempt"
)

func TestParseConfig(t *testing.T) {
	src := `
listen     = "0.0.0.0:9000"
public_url = "https://sidecar.example:9000"
token      = "t0k"
insecure   = true # no tls block on a non-loopback address
state_dir  = "/var/lib/hetgpu"
shadow     = true
reconcile  = "2s"
debounce   = "100ms"
log_level  = "debug"

nomad {
  address             = "https://nomad:4646"
  namespace           = "ml"
  sample_device_stats = false
  resync              = "30s"
  sample_every        = "2s"
}

simulator {
  cluster = "gavel-108"
  speed   = 60
}

placement {
  preset = "gogh"
}

predictor {
  window = 500
}

preemption {
  min_run        = "1h"
  hysteresis     = 2
  long_job_guard = false
}

gang {
  reserve_after = "2h"
}
`
	c := mustConfig(t, src, "")
	if c.Listen != "0.0.0.0:9000" || c.Token != "t0k" || !c.Insecure || !c.Shadow || c.ReconcileD != 2*time.Second || c.DebounceD != 100*time.Millisecond ||
		c.Nomad.Address != "https://nomad:4646" || c.Nomad.Namespace != "ml" || *c.Nomad.SampleDeviceStats || c.ResyncD != 30*time.Second || c.SampleEveryD != 2*time.Second ||
		c.Simulator.Cluster != "gavel-108" || c.Simulator.Speed != 60 || c.Simulator.Trace != "bundled:default" ||
		c.Placement.Preset != "gogh" || c.Predictor.Window != 500 || !c.UseNomad() ||
		c.Preempt.Parsed.MinRun != time.Hour || c.Preempt.Parsed.Hysteresis != 2 || c.Preempt.Parsed.LongJobGuard ||
		c.Gang.ReserveAfterD != 2*time.Hour {
		t.Errorf("config = %+v nomad %+v sim %+v", c, c.Nomad, c.Simulator)
	}
}

func TestConfigDefaults(t *testing.T) {
	t.Setenv("NOMAD_ADDR", "")
	t.Setenv("HETGPU_TOKEN", "from-env")
	c, err := LoadConfig("")
	if err != nil {
		t.Fatal(err)
	}
	if c.Listen != "127.0.0.1:4656" || c.ReconcileD != 5*time.Second || c.Backend != "auto" || c.UseNomad() ||
		c.Token != "from-env" || c.Simulator.Cluster != "modern-mix" || c.Placement.Preset != "hetgpu" || c.StateDir == "" ||
		c.Preempt.Parsed != preempt.Default() || c.Gang.ReserveAfterD != DefaultReserveAfter ||
		!c.Ranker.calibrateEstimates() || c.Ranker.estimateError() != DefaultEstimateError {
		t.Errorf("defaults = %+v", c)
	}
	if c.Ranker.History == nil || c.Ranker.History.Parsed != (history.Config{}) {
		t.Errorf("ranker.history defaults = %+v, want history.Config's", c.Ranker.History)
	}
	hc, err := ParseConfig("h.hcl", []byte("ranker {\n history {\n window = 500\n prior_median = \"30m\"\n prior_sigma = 1\n prior_runs = 2\n level_runs = 3\n min_sigma = 0.25\n explore = 0.3\n }\n}"))
	if err == nil {
		err = hc.Finish()
	}
	if want := (history.Config{Window: 500, PriorMedian: 30 * time.Minute, PriorSigma: 1, PriorRuns: 2, LevelRuns: 3, MinSigma: 0.25, Explore: 0.3}); err != nil || hc.Ranker.History.Parsed != want {
		t.Errorf("ranker.history: %v, parsed %+v, want %+v", err, hc.Ranker.History, want)
	}
	off, err := ParseConfig("off.hcl", []byte("ranker {\n calibrate_estimates = false\n estimate_error = 0.3\n}"))
	if err != nil || off.Ranker.calibrateEstimates() || off.Ranker.estimateError() != 0.3 {
		t.Errorf("calibrate_estimates = false: %v, calibrate %v", err, off != nil && off.Ranker.calibrateEstimates())
	}
	t.Setenv("NOMAD_ADDR", "http://127.0.0.1:4646")
	if !c.UseNomad() {
		t.Error("NOMAD_ADDR does not select the Nomad backend")
	}
}

func TestConfigErrors(t *testing.T) {
	for _, tt := range []struct{ src, want string }{
		{`listen = "4656"`, `config listen = "4656": expected host:port`},
		{`reconcile = "soon"`, `config reconcile = "soon": expected a duration`},
		{`debounce = "1m"`, `config debounce = "1m": expected a duration between 0 and the reconcile period`},
		{`backend = "k8s"`, `config backend = "k8s": expected auto, nomad or simulated`},
		{`log_level = "loud"`, `log_level = "loud"`},
		{`policy = "lottery"`, `config policy = "lottery": expected a registered policy: fifo, sjf, tiresias, gavel, rltune, gogh, slurm, f1, hetgpu, hetgpu-heuristic`},
		{`public_url = "sidecar:4656"`, "public_url"},
		{"placement {\n preset = \"best\"\n}", `config placement.preset = "best"`},
		{"simulator {\n speed = -1\n}", "simulator.speed"},
		{"nomad {\n resync = \"1ms\"\n}", "nomad.resync"},
		{"nomad {\n sample_every = \"10ms\"\n}", `config nomad.sample_every = "10ms": expected a duration of at least 500ms`},
		{"nomad {\n stream_stall = \"20s\"\n}", `config nomad.stream_stall = "20s": expected "0" (off) or a duration of at least 35s`},
		{"nomad {\n leader_probe = \"1ms\"\n}", `config nomad.leader_probe = "1ms": expected "0" (off) or a duration of at least 100ms`},
		{"nomad {\n rpc_address = \"nomad-1\"\n}", `config nomad.rpc_address = "nomad-1": expected host:port of a Nomad server's RPC listener (port 4647 by default), or "off"`},
		{"ranker {\n tune_every = \"1ms\"\n}", `config ranker.tune_every = "1ms"`},
		{"ranker {\n tune_runs = -1\n}", `config ranker.tune_runs = "-1"`},
		{"ranker {\n estimate_error = -0.5\n}", `config ranker.estimate_error = "-0.5"`},
		{"ranker {\n estimate_error = 4\n}", `config ranker.estimate_error = "4": expected a number from 0 to 3`},
		{"ranker {\n starvation = 1\n}", `config ranker.starvation = "1": expected 0 (off) or a finite slowdown above 1`},
		{"ranker {\n starvation = -3\n}", `config ranker.starvation = "-3": expected 0 (off)`},
		{"ranker {\n history {\n window = -1\n }\n}", `config ranker.history.window = "-1": expected a number of finished runs from 1 to 20000 (default 2000)`},
		{"ranker {\n history {\n window = 1000000\n }\n}", `config ranker.history.window = "1000000"`},
		{"ranker {\n history {\n prior_median = \"soon\"\n }\n}", `config ranker.history.prior_median = "soon": expected a duration from 1s to 8760h`},
		{"ranker {\n history {\n prior_median = \"0s\"\n }\n}", `config ranker.history.prior_median = "0s"`},
		{"ranker {\n history {\n prior_sigma = 0\n }\n}", `config ranker.history.prior_sigma = "0": expected a number above 0 and at most 3`},
		{"ranker {\n history {\n prior_sigma = 9\n }\n}", `config ranker.history.prior_sigma = "9"`},
		{"ranker {\n history {\n prior_runs = -2\n }\n}", `config ranker.history.prior_runs = "-2": expected a number above 0`},
		{"ranker {\n history {\n level_runs = 0\n }\n}", `config ranker.history.level_runs = "0"`},
		{"ranker {\n history {\n min_sigma = 4\n }\n}", `config ranker.history.min_sigma = "4"`},
		{"ranker {\n history {\n windows = 5\n }\n}", `An argument named "windows" is not expected here`},
		{"preemption {\n hysteresis = 0.5\n}", `config preemption.hysteresis = "0.5": expected a speed-up factor >= 1`},
		{"preemption {\n min_run = \"-5m\"\n}", `config preemption.min_run = "-5m"`},
		{"preemption {\n min_run = \"later\"\n}", `config preemption.min_run = "later"`},
		{"preemption {\n min_run_history = \"-1h\"\n}", `config preemption.min_run_history = "-1h"`},
		{"preemption {\n min_run_first = \"-6m\"\n}", `config preemption.min_run_first = "-6m"`},
		{"ranker {\n history {\n explore = 1\n }\n}", `config ranker.history.explore = "1": expected a weight from 0 (off) to below 1`},
		{"gang {\n reserve_after = \"-1m\"\n}", `config gang.reserve_after = "-1m": expected a non-negative duration`},
		{"gang {\n reserve_after = \"soon\"\n}", `config gang.reserve_after = "soon"`},
		{`bogus = 1`, `An argument named "bogus" is not expected here`},
		{`listen = `, "s.hcl:1"},
	} {
		c, err := ParseConfig("s.hcl", []byte(tt.src))
		if err == nil {
			err = c.Finish()
		}
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: err = %v, want %q", tt.src, err, tt.want)
		}
	}
}

func FuzzParseConfig(f *testing.F) {
	f.Add(`listen = "127.0.0.1:1"` + "\nnomad {\n address = \"http://x\"\n}")
	f.Add(`reconcile = "1h"`)
	f.Add("simulator {\n speed = 1e9\n}")
	f.Fuzz(func(t *testing.T, src string) {
		c, err := ParseConfig("f.hcl", []byte(src))
		if err != nil {
			return
		}
		if err := c.Finish(); err != nil {
			return
		}
		if c.ReconcileD < 100*time.Millisecond || c.DebounceD > c.ReconcileD || c.Listen == "" || c.Simulator.Speed < 1 {
			t.Fatalf("accepted an invalid config: %+v", c)
		}
	})
}

// TestNomadWatchdogConfig: nomad.stream_stall and nomad.leader_probe default to 45 s and 2 s,
// "0" turns them off (the backend's negative), and nomad.addresses reaches the client.
func TestNomadWatchdogConfig(t *testing.T) {
	for _, tt := range []struct {
		src          string
		stall, probe time.Duration
	}{
		{"", 45 * time.Second, 2 * time.Second},
		{"nomad {\n stream_stall = \"0\"\n leader_probe = \"0\"\n}", -1, -1},
		{"nomad {\n stream_stall = \"1m\"\n leader_probe = \"500ms\"\n}", time.Minute, 500 * time.Millisecond},
	} {
		c, err := ParseConfig("t.hcl", []byte(tt.src))
		if err == nil {
			err = c.Finish()
		}
		if err != nil {
			t.Fatalf("%q: %v", tt.src, err)
		}
		if s, p := offIfZero(c.StreamStallD), offIfZero(c.LeaderProbeD); s != tt.stall || p != tt.probe {
			t.Errorf("%q: stall %v probe %v, want %v %v", tt.src, s, p, tt.stall, tt.probe)
		}
	}
	c, err := ParseConfig("t.hcl", []byte("nomad {\n address = \"http://a:4646\"\n addresses = [\"http://b:4646\", \"https://c:4646\"]\n}"))
	if err == nil {
		err = c.Finish()
	}
	if err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := nomadClient(c.Nomad, 0); err == nil || !strings.Contains(err.Error(), `nomad address "https://c:4646": scheme https, want http`) {
		t.Errorf("mixed schemes: %v", err)
	}
}

// TestNomadRPCConfig: the RPC for linked children takes the API's token, TLS when the API is
// https (with Nomad's server name unless tls_server_name says otherwise), the configured
// address or none (the leader's), and is off with rpc_address = "off".
func TestNomadRPCConfig(t *testing.T) {
	tests := []struct {
		name, src   string
		off         bool
		addr, token string
		tls         bool
		serverName  string
	}{
		{"defaults", "nomad {\n address = \"http://a:4646\"\n token = \"s3cret\"\n}", false, "", "s3cret", false, ""},
		{"address", "nomad {\n address = \"http://a:4646\"\n rpc_address = \"10.0.0.1:4647\"\n}", false, "10.0.0.1:4647", "", false, ""},
		{"off", "nomad {\n address = \"http://a:4646\"\n rpc_address = \"off\"\n}", true, "", "", false, ""},
		{"tls", "nomad {\n address = \"https://a:4646\"\n tls_skip_verify = true\n}", false, "", "", true, ""},
		{"tls server name", "nomad {\n address = \"https://a:4646\"\n tls_server_name = \"server.eu.nomad\"\n}", false, "", "", true, "server.eu.nomad"},
		{"task api socket", "nomad {\n address = \"unix:///secrets/api.sock\"\n}", true, "", "", false, ""},
		{"task api socket, a server named", "nomad {\n address = \"unix:///secrets/api.sock\"\n rpc_address = \"10.0.0.1:4647\"\n token = \"jwt\"\n}", false, "10.0.0.1:4647", "jwt", false, ""},
		{"task api socket, TLS", "nomad {\n address = \"unix:///secrets/api.sock\"\n rpc_address = \"10.0.0.1:4647\"\n ca_file = \"CA\"\n}", false, "10.0.0.1:4647", "", true, ""},
	}
	t.Setenv("NOMAD_TOKEN", "")
	ca := testcerts.MustWrite(t, t.TempDir()).CA
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := ParseConfig("t.hcl", []byte(strings.ReplaceAll(tt.src, `"CA"`, fmt.Sprintf("%q", ca))))
			if err == nil {
				err = c.Finish()
			}
			if err != nil {
				t.Fatal(err)
			}
			rc, err := NomadRPC(c.Nomad)
			if err != nil {
				t.Fatal(err)
			}
			if tt.off {
				if rc != nil {
					t.Fatalf("RPC %+v, want off", rc)
				}
				return
			}
			if rc == nil {
				t.Fatal("RPC off, want on")
			}
			if rc.Address != tt.addr || rc.Token != tt.token || (rc.TLS != nil) != tt.tls {
				t.Errorf("RPC address %q token %q TLS %v, want %q %q %v", rc.Address, rc.Token, rc.TLS != nil, tt.addr, tt.token, tt.tls)
			}
			if rc.TLS != nil && rc.TLS.ServerName != tt.serverName {
				t.Errorf("RPC TLS server name %q, want %q", rc.TLS.ServerName, tt.serverName)
			}
		})
	}
}
