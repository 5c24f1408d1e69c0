package rltrain

import (
	"bytes"
	"context"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/hetgpu/hetgpu/sidecar/backends/sim"
	"github.com/hetgpu/hetgpu/sidecar/policies"
	"github.com/hetgpu/hetgpu/sidecar/stages/rank"
)

func tinyOptions() TrainOptions {
	return TrainOptions{Cluster: "modern-mix", Trace: "bundled:train-0", Epochs: 2, Seed: 7, EpisodeJobs: 12, Stride: 200,
		Rollouts: 2, EvalEvery: 2, EvalEpisodes: 1, MinBSLD: -1, Workers: 2, Pipeline: policies.HetgpuPipeline}
}

// TestTrainIsReproducible: the same options give the same policy, and resuming from the first
// epoch's checkpoint gives the same policy as training straight through.
func TestTrainIsReproducible(t *testing.T) {
	var firstEpoch *rank.Checkpoint
	o := tinyOptions()
	o.Checkpoint = func(c *rank.Checkpoint) error {
		if firstEpoch == nil {
			var b bytes.Buffer
			if err := c.Write(&b); err != nil {
				return err
			}
			var err error
			firstEpoch, err = rank.ReadCheckpoint(&b)
			return err
		}
		return nil
	}
	a, err := Train(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if a.Trainer.Epoch != 2 || len(a.Trainer.Curve) != 2 || !a.Trainer.Curve[1].Evaluated || a.Episodes != 3 {
		t.Fatalf("epoch %d, curve %+v, %d episodes", a.Trainer.Epoch, a.Trainer.Curve, a.Episodes)
	}
	b, err := Train(context.Background(), tinyOptions())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(a.Trainer.Policy.Actor.Params, b.Trainer.Policy.Actor.Params) {
		t.Fatal("same seed, different policies")
	}
	r := tinyOptions()
	r.Epochs = 1
	r.Resume = firstEpoch
	c, err := Train(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	if c.Trainer.Epoch != 2 || !slices.Equal(a.Trainer.Policy.Actor.Params, c.Trainer.Policy.Actor.Params) {
		t.Fatal("resumed training differs from training straight through")
	}
}

func TestTrainRejectsBadOptions(t *testing.T) {
	for _, c := range []struct {
		edit func(*TrainOptions)
		want string
	}{
		{func(o *TrainOptions) { o.Epochs = 0 }, "epochs"},
		{func(o *TrainOptions) { o.Cluster = "no-such-cluster" }, "no-such-cluster"},
		{func(o *TrainOptions) { o.Trace = "bundled:nope" }, "nope"},
		{func(o *TrainOptions) { o.Baseline = "nobody" }, "nobody"},
	} {
		o := tinyOptions()
		c.edit(&o)
		if _, err := Train(context.Background(), o); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("error %v, want one mentioning %q", err, c.want)
		}
	}
}

func TestEvaluateChecksTargets(t *testing.T) {
	ev, err := Evaluate(context.Background(), EvalOptions{Clusters: []string{"modern-mix"}, Traces: []string{"synthetic:jobs=80,rate=20,seed=3"},
		Policies: []string{"fifo", "sjf", "hetgpu"}, Seed: 1, Parallel: 2})
	if err != nil {
		t.Fatal(err)
	}
	c := ev.Clusters[0]
	if len(c.Pooled) != 3 || len(c.Targets) != 4 {
		t.Fatalf("pooled %+v, targets %+v", c.Pooled, c.Targets)
	}
	// The JCT target compares hetgpu's pooled average with 0.3 x FIFO's from the same table.
	pooled := map[string]Pooled{}
	for _, p := range c.Pooled {
		pooled[p.Policy] = p
	}
	found := false
	for _, tg := range c.Targets {
		if tg.Name == "avg JCT <= 0.30 x FIFO" {
			found = true
			if tg.Value != pooled["hetgpu"].AvgJCTS || math.Abs(tg.Limit-0.3*pooled["fifo"].AvgJCTS) > 1e-9 || tg.Against != "fifo" {
				t.Errorf("target %+v, want hetgpu's %v against 0.3 x fifo's %v", tg, pooled["hetgpu"].AvgJCTS, pooled["fifo"].AvgJCTS)
			}
		}
	}
	if !found {
		t.Errorf("no JCT target in %+v", c.Targets)
	}
	var b strings.Builder
	if err := ev.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"hetgpu", "bounded slowdown <= 0.90 x best heuristic", "avg JCT <= 0.30 x FIFO"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
}

// targets on hand-made pooled figures: each limit is the factor times the named baseline's
// figure, and Met says whether hetgpu is within it.
func TestTargets(t *testing.T) {
	ps := []Pooled{
		{Policy: "fifo", AvgJCTS: 1000, BSLD: 40, EnergyPerWork: 0.2},
		{Policy: "sjf", AvgJCTS: 400, BSLD: 10},
		{Policy: "gavel", AvgJCTS: 350, BSLD: 5}, // a simulator baseline, not a heuristic
		{Policy: "hetgpu", AvgJCTS: 290, BSLD: 9.5, EnergyPerWork: 0.18},
	}
	want := []Target{
		// 9.5 > 0.9 x 10 (sjf, the best heuristic; gavel's 5 does not count) = 9
		{"c", "bounded slowdown <= 0.90 x best heuristic", 9.5, 9, "sjf", false},
		// 290 <= 0.3 x 1000 = 300
		{"c", "avg JCT <= 0.30 x FIFO", 290, 300, "fifo", true},
		// 0.18 > 0.85 x 0.2 = 0.17
		{"c", "energy per work <= 0.85 x FIFO", 0.18, 0.17, "fifo", false},
		// 290 <= 0.85 x 350 (gavel) = 297.5
		{"c", "avg JCT <= 0.85 x best simulator baseline", 290, 297.5, "gavel", true},
	}
	got := targets("c", ps)
	if len(got) != len(want) {
		t.Fatalf("targets %+v, want %+v", got, want)
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.Cluster != w.Cluster || g.Name != w.Name || g.Value != w.Value || math.Abs(g.Limit-w.Limit) > 1e-9 || g.Against != w.Against || g.Met != w.Met {
			t.Errorf("target %d: %+v, want %+v", i, g, w)
		}
	}
	if got := targets("c", ps[:3]); got != nil {
		t.Errorf("without hetgpu: %+v, want no targets", got)
	}
}

// Training in a regime records it in the checkpoint's meta and trains schema version 2.
func TestTrainRecordsRegime(t *testing.T) {
	for _, c := range []struct {
		replay sim.EstimateReplay
		want   string
	}{{sim.EstimateReplay{NoEstimates: true}, "none"}, {sim.EstimateReplay{PartialEstimates: 0.3}, "partial:0.3"}} {
		o := tinyOptions()
		o.Epochs, o.EvalEvery = 1, 0
		o.EstimateReplay = c.replay
		var saved *rank.Checkpoint
		o.Checkpoint = func(ck *rank.Checkpoint) error { saved = ck; return nil }
		res, err := Train(context.Background(), o)
		if err != nil {
			t.Fatal(err)
		}
		if res.Meta[rank.MetaTrainEstimates] != c.want || saved == nil || saved.Meta[rank.MetaTrainEstimates] != c.want {
			t.Fatalf("meta %v, want estimates = %s", res.Meta, c.want)
		}
		if !saved.Schema.Equal(rank.DefaultSchema()) || saved.Schema.Version != 2 {
			t.Fatalf("schema %+v, want version 2", saved.Schema)
		}
	}
	o := tinyOptions()
	o.EstimateReplay = sim.EstimateReplay{NoEstimates: true, PartialEstimates: 0.3}
	if _, err := Train(context.Background(), o); err == nil || !strings.Contains(err.Error(), "partial") {
		t.Fatalf("none and partial together: %v", err)
	}
}

func TestRegimeOfReplay(t *testing.T) {
	for _, c := range []struct {
		r    sim.EstimateReplay
		want string
	}{
		{sim.EstimateReplay{}, rank.RegimeEstimates},
		{sim.EstimateReplay{LiveEstimates: true, EstimateError: 0.5}, rank.RegimeEstimates},
		{sim.EstimateReplay{NoEstimates: true}, rank.RegimeNone},
		{sim.EstimateReplay{NoEstimates: true, DeclareSteps: true}, rank.RegimeNone},
		{sim.EstimateReplay{PartialEstimates: 0.3}, rank.RegimePartial},
	} {
		if got := RegimeOfReplay(c.r); got != c.want {
			t.Errorf("%s: regime %s, want %s", c.r.Regime(), got, c.want)
		}
	}
}
