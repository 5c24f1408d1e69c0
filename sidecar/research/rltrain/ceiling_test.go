package rltrain

import (
	"math"
	"strings"
	"testing"

	"github.com/hetgpu/hetgpu/sidecar/backends/sim"
	"github.com/hetgpu/hetgpu/sidecar/policies"
)

// ceilEval is an evaluation of the ceiling's three policies on one cluster with the given pooled
// (JCT, BSLD) figures.
func ceilEval(cluster string, learned, heur, oracle [2]float64) *Eval {
	p := func(name string, f [2]float64) Pooled {
		return Pooled{Policy: name, Jobs: 10, AvgJCTS: f[0], BSLD: f[1]}
	}
	return &Eval{Traces: []string{"bundled:heldout-0"}, Clusters: []ClusterEval{{Cluster: cluster,
		Pooled: []Pooled{p("hetgpu", learned), p(HeuristicVariant, heur), p(policies.HetgpuOracle, oracle)}}}}
}

func TestCeilingOf(t *testing.T) {
	// Seed 1: the learned order closes half of a 10 % JCT gap; the oracle is worse in BSLD.
	// Seed 2: the learned order loses 2 % JCT while the oracle gains 4 %.
	evals := []*Eval{
		ceilEval("c", [2]float64{95, 2.0}, [2]float64{100, 2.0}, [2]float64{90, 2.2}),
		ceilEval("c", [2]float64{122.4, 3.0}, [2]float64{120, 3.0}, [2]float64{115.2, 2.4}),
	}
	ce, err := CeilingOf([]uint64{1, 2}, evals)
	if err != nil {
		t.Fatal(err)
	}
	if len(ce.Rows) != 4 || len(ce.Summary) != 2 || ce.Clusters[0] != "c" || ce.Traces[0] != "bundled:heldout-0" {
		t.Fatalf("report %+v", ce)
	}
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
	gap := func(g *float64) float64 {
		if g == nil {
			return math.NaN()
		}
		return *g
	}
	for _, c := range []struct {
		row                   int
		seed                  uint64
		metric                string
		learned, oracle, gapc float64 // NaN gap: none
	}{
		{0, 1, "jct", 0.95, 0.90, 0.5},
		{1, 1, "bsld", 1.0, 1.1, math.NaN()},
		{2, 2, "jct", 1.02, 0.96, -0.5},
		{3, 2, "bsld", 1.0, 0.8, 0},
	} {
		r := ce.Rows[c.row]
		g := gap(r.GapCaptured)
		if r.Seed != c.seed || r.Metric != c.metric || !near(r.LearnedRatio, c.learned) || !near(r.OracleRatio, c.oracle) ||
			(math.IsNaN(c.gapc) != math.IsNaN(g)) || (!math.IsNaN(g) && !near(g, c.gapc)) {
			t.Errorf("row %d: %+v (gap %v), want seed %d %s learned %v oracle %v gap %v", c.row, r, g, c.seed, c.metric, c.learned, c.oracle, c.gapc)
		}
	}
	jct := ce.Summary[0]
	if jct.Metric != "jct" || !near(jct.LearnedMean, 0.985) || !near(jct.LearnedWorst, 1.02) || !near(jct.OracleMean, 0.93) ||
		!near(jct.OracleBest, 0.90) || !near(jct.HeuristicSpread, 20.0/110) || !near(gap(jct.GapCapturedMean), 0) {
		t.Errorf("jct summary %+v (gap %v)", jct, gap(jct.GapCapturedMean))
	}
	// Only seed 2 has a BSLD gap to capture.
	if bs := ce.Summary[1]; bs.Metric != "bsld" || !near(gap(bs.GapCapturedMean), 0) || !near(bs.OracleBest, 0.8) || !near(bs.LearnedWorst, 1) {
		t.Errorf("bsld summary %+v", bs)
	}
	var b strings.Builder
	if err := ce.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"0.9500", "50 %", "-50 %", "18.2 %", "hetgpu-oracle"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
}

// Where the evaluation ran hetgpu-hindsight, each row and summary carries its ratio; where it
// did not, none does and the table prints a dash.
func TestCeilingOfHindsight(t *testing.T) {
	with := func(e *Eval, jct, bsld float64) *Eval {
		c := &e.Clusters[0]
		c.Pooled = append(c.Pooled, Pooled{Policy: policies.HetgpuHindsight, Jobs: 10, AvgJCTS: jct, BSLD: bsld})
		return e
	}
	evals := []*Eval{
		with(ceilEval("c", [2]float64{95, 2.0}, [2]float64{100, 2.0}, [2]float64{80, 1.6}), 96, 1.8),
		with(ceilEval("c", [2]float64{95, 2.0}, [2]float64{100, 2.0}, [2]float64{80, 1.6}), 92, 2.1),
	}
	ce, err := CeilingOf([]uint64{1, 2}, evals)
	if err != nil {
		t.Fatal(err)
	}
	near := func(p *float64, want float64) bool { return p != nil && math.Abs(*p-want) < 1e-9 }
	if r := ce.Rows[0]; !near(r.Hindsight, 96) || !near(r.HindsightRatio, 0.96) {
		t.Errorf("row 0 %+v: want hindsight 96, ratio 0.96", r)
	}
	if s := ce.Summary[0]; !near(s.HindsightMean, 0.94) || !near(s.HindsightBest, 0.92) {
		t.Errorf("jct summary %+v: want hindsight mean 0.94, best 0.92", s)
	}
	if s := ce.Summary[1]; !near(s.HindsightMean, 0.975) || !near(s.HindsightBest, 0.9) {
		t.Errorf("bsld summary %+v: want hindsight mean 0.975, best 0.9", s)
	}
	var b strings.Builder
	if err := ce.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "hindsight/heur") || !strings.Contains(b.String(), "0.9400") {
		t.Errorf("table lacks the hindsight column:\n%s", b.String())
	}
	without, err := CeilingOf([]uint64{1}, []*Eval{ceilEval("c", [2]float64{95, 2}, [2]float64{100, 2}, [2]float64{80, 1.6})})
	if err != nil {
		t.Fatal(err)
	}
	if r := without.Rows[0]; r.HindsightRatio != nil || without.Summary[0].HindsightMean != nil {
		t.Errorf("no hindsight run, yet row %+v summary %+v carry one", r, without.Summary[0])
	}
	if got := CeilingPoliciesFor(sim.EstimateReplay{NoEstimates: true}); len(got) != 4 || got[3] != policies.HetgpuHindsight {
		t.Errorf("policies under none %v: want the three and %s", got, policies.HetgpuHindsight)
	}
	if got := CeilingPoliciesFor(sim.EstimateReplay{}); len(got) != 3 {
		t.Errorf("policies with estimates %v: want the three", got)
	}
}

func TestCeilingOfRejects(t *testing.T) {
	ok := ceilEval("c", [2]float64{1, 1}, [2]float64{1, 1}, [2]float64{1, 1})
	noOracle := ceilEval("c", [2]float64{1, 1}, [2]float64{1, 1}, [2]float64{1, 1})
	noOracle.Clusters[0].Pooled = noOracle.Clusters[0].Pooled[:2]
	zero := ceilEval("c", [2]float64{1, 1}, [2]float64{0, 1}, [2]float64{1, 1})
	for _, c := range []struct {
		name  string
		seeds []uint64
		evals []*Eval
		want  string
	}{
		{"no seeds", nil, nil, "expected as many of each and at least one"},
		{"fewer evaluations than seeds", []uint64{1, 2}, []*Eval{ok}, "2 seeds and 1 evaluations"},
		{"oracle missing", []uint64{1}, []*Eval{noOracle}, "lacks hetgpu-oracle"},
		{"other cluster", []uint64{1, 2}, []*Eval{ok, ceilEval("d", [2]float64{1, 1}, [2]float64{1, 1}, [2]float64{1, 1})}, "cluster d at position 0, expected c"},
		{"heuristic zero", []uint64{1}, []*Eval{zero}, "pooled jct is 0, expected > 0"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := CeilingOf(c.seeds, c.evals); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want %q", err, c.want)
			}
		})
	}
}
