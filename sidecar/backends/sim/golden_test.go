package sim_test

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"path/filepath"
	"testing"

	"github.com/hetgpu/hetgpu/internal/golden"
	"github.com/hetgpu/hetgpu/sidecar/backends/sim"
	"github.com/hetgpu/hetgpu/sidecar/backends/sim/simtest"
)

var update = flag.Bool("update", false, "rewrite golden files")

// deterministic strips what depends on the machine (wall time, decision latency).
func deterministic(rs []*sim.Result) []*sim.Result {
	out := make([]*sim.Result, len(rs))
	for i, r := range rs {
		c := *r
		c.WallS, c.DecisionP50Ms, c.DecisionP95Ms, c.DecisionP99Ms = 0, 0, 0, 0
		out[i] = &c
	}
	return out
}

// Same seed, same results: a fixed synthetic trace on gavel-108 scaled to a third gives the
// results in testdata/golden.json for the baselines, run concurrently.
func TestGolden(t *testing.T) {
	s, tr := simtest.Spec(t, "gavel-108:scale=0.34"), simtest.Trace(t, "synthetic:jobs=150,rate=3", 42)
	names := []string{"fifo", "sjf", "tiresias", "gavel"}
	run := func() []byte {
		var ps []*sim.PipelinePolicy
		for _, n := range names {
			ps = append(ps, newPolicy(t, n, s))
		}
		rs, err := sim.SimulateAll(context.Background(), sim.Setup{Spec: s, Throughput: table(t), Trace: tr, RestartPenaltyS: 30}, ps, 0, nil)
		if err != nil {
			t.Fatal(err)
		}
		b, err := json.MarshalIndent(deterministic(rs), "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		return append(b, '\n')
	}
	got := run()
	if again := run(); !bytes.Equal(got, again) {
		t.Fatal("two runs with the same seed differ")
	}
	path := filepath.Join("testdata", "golden.json")
	if !golden.Compare(t, path, got, *update) {
		t.FailNow()
	}
	var rs []*sim.Result
	if err := json.Unmarshal(got, &rs); err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if r.Jobs+r.Unschedulable != 150 || r.AvgJCTS <= 0 || r.EnergyKWh <= 0 {
			t.Fatalf("%s: implausible result %+v", r.Policy, r)
		}
	}
}
