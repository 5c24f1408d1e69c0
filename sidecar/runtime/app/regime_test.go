package app

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/hetgpu/hetgpu/sidecar/stages/rank"
)

// The bundled policy ranks only in the live estimate regimes whose held-out verdict beats the
// heuristic: the choice at start, the switch's decision per regime, and the status /v1/health
// shows (policy, regime, share, verdicts per regime, reason).
func TestRankerChoicePerRegime(t *testing.T) {
	_, real := bundledVerdict(t)
	verdict := func(ratio float64) *rank.Verdict {
		v, err := rank.JudgeVerdict([]rank.VerdictRatio{{Cluster: "c", Metric: "jct", Ratio: ratio}, {Cluster: "c", Trace: "w", Metric: "bsld", Ratio: ratio}},
			rank.VerdictPooledMax, rank.VerdictWindowMax)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	// bundled with verdict ratios per regime (0: none recorded).
	bundled := func(with, partial, none float64) func() (*rank.Checkpoint, error) {
		ck := *real
		ck.Meta = map[string]string{"cluster": "c"}
		for r, x := range map[string]float64{rank.RegimeEstimates: with, rank.RegimePartial: partial, rank.RegimeNone: none} {
			if x > 0 {
				var err error
				if ck.Meta, err = verdict(x).SetMetaRegime(ck.Meta, r); err != nil {
					t.Fatal(err)
				}
			}
		}
		return func() (*rank.Checkpoint, error) { return &ck, nil }
	}
	type step struct {
		share  float64 // of user estimates in the live queue
		policy string
		reason string
	}
	for _, c := range []struct {
		name        string
		config      string
		bundled     func() (*rank.Checkpoint, error)
		startPolicy string
		startReason string
		steps       []step
	}{
		{"wins only without estimates", "", bundled(1.2, 1.1, 0.85), PolicyHeuristic, "only in the none estimate regime", []step{
			{1, PolicyHeuristic, "does not beat the heuristic on held-out traces in the estimates regime"},
			{0, PolicyBundled, "beats the heuristic on held-out traces in the none regime"},
			{0.3, PolicyHeuristic, "does not beat the heuristic on held-out traces in the partial regime"},
			{0.05, PolicyBundled, "live estimate regime none (5 %"},
		}},
		{"wins with estimates and partially", "", bundled(0.9, 0.95, 0), PolicyBundled, "beats the heuristic on held-out traces", []step{
			{0, PolicyHeuristic, "has no held-out verdict in the none regime"},
			{0.5, PolicyBundled, "in the partial regime"},
			{1, PolicyBundled, "in the estimates regime"},
		}},
		{"an old checkpoint: one verdict, not better", "", bundled(1.17, 0, 0), PolicyHeuristic, "does not beat the heuristic on held-out traces: not-better", []step{
			{1, PolicyHeuristic, "does not beat"},
			{0, PolicyHeuristic, "has no held-out verdict in the none regime"},
		}},
		{"forced bundled ranks everywhere", `ranker { policy = "bundled:default" }`, bundled(1.2, 0, 0.85), PolicyBundled, "forces it", []step{
			{1, PolicyBundled, "forces it"},
			{0, PolicyBundled, "forces it"},
		}},
		{"forced heuristic", `ranker { policy = "heuristic" }`, bundled(0.8, 0.8, 0.8), PolicyHeuristic, "configured", []step{
			{0, PolicyHeuristic, "configured"},
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			cfg := mustConfig(t, c.config, dir)
			ch, err := chooseRanker(cfg, filepath.Join(dir, TunedPolicyFile), c.bundled)
			if err != nil {
				t.Fatal(err)
			}
			rk, sw, rs, err := rankerFor(ch, hclog.NewNullLogger())
			if err != nil {
				t.Fatal(err)
			}
			if s := rs.Status(); s.Policy != c.startPolicy || !strings.Contains(s.Reason, c.startReason) || s.Regime != "" || (rk.Policy() != nil) != (c.startPolicy != PolicyHeuristic) {
				t.Fatalf("at start: %+v (ranker has a policy: %v); want %s, reason with %q", s, rk.Policy() != nil, c.startPolicy, c.startReason)
			}
			for i, st := range c.steps {
				if _, err := sw.Decide(st.share, 20); err != nil {
					t.Fatal(err)
				}
				s := rs.Status()
				if s.Policy != st.policy || !strings.Contains(s.Reason, st.reason) || (rk.Policy() != nil) != (st.policy != PolicyHeuristic) {
					t.Fatalf("step %d (share %v): policy %s (ranker has a policy: %v), reason %q; want %s, reason with %q", i, st.share, s.Policy, rk.Policy() != nil, s.Reason, st.policy, st.reason)
				}
				if s.Regime != rank.RegimeOf(st.share) || s.UserEstimateShare == nil || *s.UserEstimateShare != st.share || s.RegimeJobs != 20 {
					t.Fatalf("step %d: regime %q share %v jobs %d, want %s", i, s.Regime, s.UserEstimateShare, s.RegimeJobs, rank.RegimeOf(st.share))
				}
				if (s.Checkpoint != nil) != (st.policy != PolicyHeuristic) {
					t.Fatalf("step %d: policy %s with checkpoint %p; the dashboard reads a learned policy's from the status", i, s.Policy, s.Checkpoint)
				}
				if c.config == "" && s.Learned != PolicyBundled {
					t.Fatalf("step %d: learned policy %q", i, s.Learned)
				}
			}
		})
	}
}

// /v1/health's ranker object keeps its keys (policy, reason, verdict) and adds the learned
// policy, the live regime, the share of user estimates and the verdicts per regime.
func TestRankerHealthJSON(t *testing.T) {
	_, real := bundledVerdict(t)
	ck := *real
	ck.Meta = map[string]string{}
	v, err := rank.JudgeVerdict([]rank.VerdictRatio{{Cluster: "c", Metric: "jct", Ratio: 0.8}, {Cluster: "c", Trace: "w", Metric: "bsld", Ratio: 0.9}},
		rank.VerdictPooledMax, rank.VerdictWindowMax)
	if err != nil {
		t.Fatal(err)
	}
	v.Estimates = "none"
	if ck.Meta, err = v.SetMetaRegime(ck.Meta, rank.RegimeNone); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	ch, err := chooseRanker(mustConfig(t, "", dir), filepath.Join(dir, TunedPolicyFile), func() (*rank.Checkpoint, error) { return &ck, nil })
	if err != nil {
		t.Fatal(err)
	}
	_, sw, rs, err := rankerFor(ch, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sw.Decide(0, 7); err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(rs.Status())
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"policy": PolicyBundled, "learned_policy": PolicyBundled, "regime": "none", "user_estimate_share": 0.0, "regime_jobs": 7.0}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s = %v, want %v (JSON %s)", k, got[k], w, b)
		}
	}
	if r, _ := got["reason"].(string); !strings.Contains(r, "none regime") {
		t.Errorf("reason %q", r)
	}
	vs, _ := got["verdicts"].(map[string]any)
	none, _ := vs["none"].(map[string]any)
	if len(vs) != 1 || none["result"] != rank.VerdictBeats || none["estimates"] != "none" || none["worst_pooled_ratio"] != 0.8 {
		t.Errorf("verdicts %v", got["verdicts"])
	}
	if vd, _ := got["verdict"].(map[string]any); vd["result"] != rank.VerdictBeats {
		t.Errorf("verdict (the live regime's) %v", got["verdict"])
	}
}
