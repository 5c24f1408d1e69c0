package app

import (
	"reflect"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/hetgpu/hetgpu/sidecar/policies/baselines"
	"github.com/hetgpu/hetgpu/sidecar/stages/place"
	"github.com/hetgpu/hetgpu/sidecar/stages/predict"
	"github.com/hetgpu/hetgpu/sidecar/stages/rank"
)

// policy = "NAME" builds that registered policy's stages around the sidecar's predictor; the
// default is hetgpu's (learned or heuristic ranker, the MILP placer, online tuning).
func TestPolicySetting(t *testing.T) {
	dir := t.TempDir()
	for _, tt := range []struct {
		src    string
		policy string
		// hetgpu only: the placement preset's config and whether it preempts
		preset    place.Config
		noPreempt bool
	}{
		{src: ``, policy: DefaultPolicy, preset: place.PresetHetgpu()},
		{src: "placement {\n preset = \"gogh\"\n}\npreemption {\n enabled = false\n}", policy: DefaultPolicy, preset: place.PresetGOGH(), noPreempt: true},
		{src: `policy = "tiresias"`, policy: "tiresias"},
		{src: `policy = "fifo"`, policy: "fifo"},
		{src: `policy = "gavel"`, policy: "gavel"},
	} {
		c := mustConfig(t, tt.src, dir)
		if c.Policy != tt.policy {
			t.Fatalf("%q: policy %q, want %q", tt.src, c.Policy, tt.policy)
		}
		st, _, err := Stages(c, dir, hclog.NewNullLogger())
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := st.Predictor.(*predict.Predictor); !ok || st.Learner == nil {
			t.Fatalf("%s: predictor %T, learner %v; want the sidecar's predictor, learning", tt.policy, st.Predictor, st.Learner)
		}
		switch tt.policy {
		case DefaultPolicy:
			if sw, ok := st.Ranker.(*rank.RegimeSwitch); !ok || sw.Ranker == nil || st.Tuner == nil {
				t.Fatalf("hetgpu: ranker %T, tuner %v", st.Ranker, st.Tuner)
			}
			if (st.Preemptor == nil) != tt.noPreempt {
				t.Fatalf("%q: preemptor %T, want none: %v", tt.src, st.Preemptor, tt.noPreempt)
			}
			pl, ok := st.Placer.(*place.Placer)
			// Live: the preset's production limits, no pairing on whole GPUs.
			want := tt.preset
			want.PairIdleGPUs = false
			if !ok || !reflect.DeepEqual(pl.Config(), want) {
				t.Fatalf("%q: placer %T config %+v, want %+v", tt.src, st.Placer, pl.Config(), want)
			}
		case "tiresias":
			if _, ok := st.Ranker.(*baselines.LAS); !ok || any(st.Preemptor) != any(st.Ranker) || st.Tuner != nil {
				t.Fatalf("tiresias: ranker %T, preemptor %T, tuner %v", st.Ranker, st.Preemptor, st.Tuner)
			}
		case "gavel":
			g, ok := st.Ranker.(*baselines.Gavel)
			if !ok || any(st.Preemptor) != any(g) || any(st.Placer) != any(g) {
				t.Fatalf("gavel: ranker %T, preemptor %T, placer %T; want one baselines.Gavel", st.Ranker, st.Preemptor, st.Placer)
			}
		case "fifo":
			if _, ok := st.Placer.(place.FirstFit); !ok || st.Preemptor != nil {
				t.Fatalf("fifo: placer %T, preemptor %T", st.Placer, st.Preemptor)
			}
		}
	}
}
