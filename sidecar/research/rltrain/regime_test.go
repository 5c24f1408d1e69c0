package rltrain

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/hetgpu/hetgpu/sidecar/backends/sim"
	"github.com/hetgpu/hetgpu/sidecar/stages/rank"
)

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
