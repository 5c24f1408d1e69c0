package livebench

import (
	"context"
	"testing"
	"time"
)

// TestSmallRun runs the harness on a small cluster and checks that rounds pin every group and
// that the counts add up.
func TestSmallRun(t *testing.T) {
	res, rounds, err := Run(context.Background(), Config{Nodes: 8, GPUsPerNode: 8, GPUTypes: 2, Pending: 6, Running: 8,
		Latency: time.Millisecond, Rounds: 2, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(rounds) != 2 || res.Rounds != 2 {
		t.Fatalf("rounds = %d (%d in the summary), want 2", len(rounds), res.Rounds)
	}
	for i, r := range rounds {
		// 6 groups of at most 8 GPUs on 64 GPUs of which 8 are busy: all fit.
		if r.Applied != 6 || r.Pins != 6 {
			t.Errorf("round %d applied %d of %d pins, want all 6 groups pinned", i+1, r.Applied, r.Pins)
		}
		// Each pin is a register and a tag (job reads are the watcher's: an event that
		// overtakes the register's answer is read; they are not asserted, being a race).
		for route, want := range map[string]int{"PUT /v1/jobs": 6, "PUT /v1/job/:id/versions/:version/tag": 6} {
			if got := r.CallsByRoute[route]; got != want {
				t.Errorf("round %d: %d calls of %s, want %d (calls %v)", i+1, got, route, want, r.CallsByRoute)
			}
		}
		// Energy: one node stats read per node running allocations (8 allocations on 6 of
		// the 8 nodes), never one per allocation.
		if got := r.CallsByRoute["GET /v1/client/allocation/:id/stats"]; got != 0 {
			t.Errorf("round %d: %d allocation stats calls", i+1, got)
		}
		if r.MaintenanceCalls == 0 || r.MaintenanceCalls > 8 {
			t.Errorf("round %d: %d maintenance calls, want one per node with running allocations", i+1, r.MaintenanceCalls)
		}
		if r.Round <= 0 || r.Phases["pin"] <= 0 || r.Phases["snapshot"] <= 0 || r.Phases["place"] <= 0 {
			t.Errorf("round %d: phases %v, round %v", i+1, r.Phases, r.Round)
		}
	}
	if res.RoundP99MS < res.RoundP50MS || res.CallsPerRnd <= 0 || res.RSSMB <= 0 {
		t.Errorf("summary %+v", res)
	}
}

func TestValidate(t *testing.T) {
	ok := Config{Nodes: 4, GPUsPerNode: 8, GPUTypes: 4, Pending: 10, Running: 10, Rounds: 1}
	for _, c := range []struct {
		name string
		mod  func(*Config)
	}{
		{"no nodes", func(c *Config) { c.Nodes = 0 }},
		{"too many types", func(c *Config) { c.GPUTypes = len(GPUNames) + 1 }},
		{"running beyond the GPUs", func(c *Config) { c.Running = 33 }},
		{"negative latency", func(c *Config) { c.Latency = -time.Millisecond }},
		{"no rounds", func(c *Config) { c.Rounds = 0 }},
	} {
		cfg := ok
		c.mod(&cfg)
		if cfg.Validate() == nil {
			t.Errorf("%s: accepted %+v", c.name, cfg)
		}
	}
	if err := ok.Validate(); err != nil {
		t.Errorf("valid config refused: %v", err)
	}
}
