package rltrain

import (
	"bytes"
	"strings"
	"testing"

	"github.com/hetgpu/hetgpu/sidecar/backends/sim"
	"github.com/hetgpu/hetgpu/sidecar/stages/rank"
)

// fakeEval is one cluster's evaluation of the verdict's two policies with the given per-window
// (JCT, BSLD) figures, pooled as Evaluate pools them.
func fakeEval(learned, heur [][2]float64) *Eval {
	ev := &Eval{Traces: []string{"bundled:heldout-0", "bundled:heldout-1"}}
	c := ClusterEval{Cluster: "c", PerTrace: map[string][]*sim.Result{}}
	acc := map[string]*poolAcc{"hetgpu": {}, HeuristicVariant: {}}
	for i, t := range ev.Traces {
		for _, r := range []*sim.Result{
			{Policy: "hetgpu", Jobs: 10, AvgJCTS: learned[i][0], BoundedSlowdown: learned[i][1]},
			{Policy: HeuristicVariant, Jobs: 10, AvgJCTS: heur[i][0], BoundedSlowdown: heur[i][1]},
		} {
			c.PerTrace[t] = append(c.PerTrace[t], r)
			acc[r.Policy].add(r, 8)
		}
	}
	c.Pooled = []Pooled{acc["hetgpu"].pooled("hetgpu"), acc[HeuristicVariant].pooled(HeuristicVariant)}
	ev.Clusters = append(ev.Clusters, c)
	return ev
}

func TestHeldOutVerdict(t *testing.T) {
	for _, c := range []struct {
		name           string
		learned, heur  [][2]float64
		want, worstWin string
	}{
		{"beats everywhere", [][2]float64{{90, 1.8}, {900, 9}}, [][2]float64{{100, 2}, {1000, 10}}, rank.VerdictBeats, "c heldout-0 jct"},
		{"loses pooled", [][2]float64{{110, 2}, {1200, 10}}, [][2]float64{{100, 2}, {1000, 10}}, rank.VerdictNotBetter, "c heldout-1 jct"},
		// Pooled JCT is dominated by the long window; the short one regresses by 10 %.
		{"one window regresses", [][2]float64{{110, 2.2}, {800, 8}}, [][2]float64{{100, 2}, {1000, 10}}, rank.VerdictNotBetter, "c heldout-0 jct"},
	} {
		t.Run(c.name, func(t *testing.T) {
			v, err := HeldOutVerdict(fakeEval(c.learned, c.heur), 1, rank.VerdictPooledMax, rank.VerdictWindowMax)
			if err != nil {
				t.Fatal(err)
			}
			if v.Result != c.want || v.WorstWindowAt != c.worstWin || v.Traces != "bundled:heldout-0,bundled:heldout-1" || v.Clusters != "c" {
				t.Fatalf("verdict %+v; want %s, worst window at %q", v, c.want, c.worstWin)
			}
		})
	}
	ev := fakeEval([][2]float64{{1, 1}, {1, 1}}, [][2]float64{{1, 1}, {1, 1}})
	ev.Clusters[0].Pooled = ev.Clusters[0].Pooled[:1]
	if _, err := HeldOutVerdict(ev, 1, rank.VerdictPooledMax, rank.VerdictWindowMax); err == nil || !strings.Contains(err.Error(), HeuristicVariant) {
		t.Fatalf("an evaluation without %s: %v, want an error naming it", HeuristicVariant, err)
	}
}

// train eval's table ends with the policy's stored verdicts, one line per regime.
func TestEvalTablePrintsVerdicts(t *testing.T) {
	v, err := rank.JudgeVerdict([]rank.VerdictRatio{{Cluster: "c", Metric: "jct", Ratio: 0.9}, {Cluster: "c", Trace: "w", Metric: "bsld", Ratio: 0.95}},
		rank.VerdictPooledMax, rank.VerdictWindowMax)
	if err != nil {
		t.Fatal(err)
	}
	v.Estimates = "none"
	ev := &Eval{Regime: rank.RegimeNone, PolicyVerdicts: rank.Verdicts{rank.RegimeNone: v}}
	var b bytes.Buffer
	if err := ev.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"estimate regime of this evaluation: none", "none       (--estimates none) beats: worst pooled learned/heuristic ratio 0.9000",
		"estimates  none recorded", "partial    none recorded"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}
