package rank

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hetgpu/hetgpu/model/cluster"
)

func judged(t *testing.T, ratio float64) *Verdict {
	t.Helper()
	v, err := JudgeVerdict([]VerdictRatio{{Cluster: "c", Metric: "jct", Ratio: ratio}, {Cluster: "c", Trace: "w", Metric: "bsld", Ratio: ratio}},
		VerdictPooledMax, VerdictWindowMax)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// Each regime's verdict survives a checkpoint's meta (and a JSON file) on its own keys; the
// with-estimates one on the keys checkpoints used before regimes.
func TestVerdictMetaPerRegime(t *testing.T) {
	with, none := judged(t, 1.2), judged(t, 0.9)
	with.Estimates, none.Estimates = "scaled", "none"
	meta := map[string]string{"cluster": "c", MetaTrainEstimates: "none"}
	var err error
	if meta, err = with.SetMetaRegime(meta, RegimeEstimates); err != nil {
		t.Fatal(err)
	}
	if meta, err = none.SetMetaRegime(meta, RegimeNone); err != nil {
		t.Fatal(err)
	}
	if _, err := none.SetMetaRegime(meta, "sometimes"); err == nil {
		t.Fatal("an unknown regime was accepted")
	}
	if meta[MetaVerdict] != VerdictNotBetter || meta["heldout_none_verdict"] != VerdictBeats {
		t.Fatalf("meta %v", meta)
	}
	// Through a checkpoint file.
	ck := PolicyCheckpoint(randomPolicy(t))
	ck.Meta = meta
	path := t.TempDir() + "/p.json"
	if err := ck.Save(path); err != nil {
		t.Fatal(err)
	}
	back, err := LoadCheckpoint(path)
	if err != nil {
		t.Fatal(err)
	}
	vs, err := VerdictsFromMeta(back.Meta)
	if err != nil {
		t.Fatal(err)
	}
	if len(vs) != 2 || vs[RegimePartial] != nil || back.Meta[MetaTrainEstimates] != "none" {
		t.Fatalf("verdicts %v, meta %v", vs, back.Meta)
	}
	for r, want := range map[string]*Verdict{RegimeEstimates: with, RegimeNone: none} {
		got := vs[r]
		if got.Result != want.Result || got.WorstPooled != want.WorstPooled || got.Ratios != want.Ratios || got.Estimates != want.Estimates ||
			got.PooledMax != want.PooledMax || got.WindowMax != want.WindowMax {
			t.Errorf("regime %s: %+v, want %+v", r, got, want)
		}
	}
	// The old reader still sees the with-estimates verdict.
	if v, err := VerdictFromMeta(back.Meta); err != nil || v.Result != VerdictNotBetter {
		t.Fatalf("VerdictFromMeta: %v %v", v, err)
	}
	if s := vs.Summary(); s != "estimates: not-better; none: beats" {
		t.Errorf("summary %q", s)
	}
	// Rewriting one regime keeps the other; clearing drops all.
	if meta, err = judged(t, 0.95).SetMetaRegime(back.Meta, RegimeNone); err != nil {
		t.Fatal(err)
	}
	if vs, _ := VerdictsFromMeta(meta); vs[RegimeEstimates].Result != VerdictNotBetter || vs[RegimeNone].WorstPooled != 0.95 {
		t.Fatalf("after rewriting none: %v", vs)
	}
	ClearVerdict(meta)
	if vs, _ := VerdictsFromMeta(meta); len(vs) != 0 || meta["cluster"] != "c" {
		t.Fatalf("after clearing: %v, meta %v", vs, meta)
	}
	// A malformed regime verdict names its key.
	if _, err := VerdictsFromMeta(map[string]string{"heldout_none_verdict": "maybe"}); err == nil || !strings.Contains(err.Error(), "none") {
		t.Fatalf("malformed: %v", err)
	}
}

func TestRegimeOf(t *testing.T) {
	for _, c := range []struct {
		share float64
		want  string
	}{{1, RegimeEstimates}, {0.9, RegimeEstimates}, {0.89, RegimePartial}, {0.3, RegimePartial}, {0.11, RegimePartial}, {0.1, RegimeNone}, {0, RegimeNone}} {
		if got := RegimeOf(c.share); got != c.want {
			t.Errorf("RegimeOf(%v) = %s, want %s", c.share, got, c.want)
		}
	}
}

// queue of n jobs of which users estimated the first k (the rest read by history).
func regimeQueue(n, k int) *cluster.Snapshot {
	snap := bigSnapshot(n, 9)
	for i := range snap.Pending {
		h := &snap.Pending[i].Hetgpu
		if i < k {
			h.Est = cluster.EstimateInfo{Source: cluster.EstUser}
		} else {
			h.Est = cluster.EstimateInfo{Source: cluster.EstHistory, Level: "namespace", Runs: 3, Left: 2 * time.Hour}
		}
	}
	return snap
}

// The switch ranks with the learned policy exactly in the regimes whose verdict beats the
// heuristic, swapping as the live share of user estimates moves, and reports each change.
func TestRegimeSwitch(t *testing.T) {
	learned := randomPolicy(t)
	for _, c := range []struct {
		name     string
		verdicts Verdicts
		// learned per queue: all estimated, 3 of 10, none
		want [3]bool
	}{
		{"wins only without estimates", Verdicts{RegimeEstimates: judged(t, 1.1), RegimeNone: judged(t, 0.8)}, [3]bool{false, false, true}},
		{"wins with estimates only", Verdicts{RegimeEstimates: judged(t, 0.9)}, [3]bool{true, false, false}},
		{"wins everywhere", Verdicts{RegimeEstimates: judged(t, 0.9), RegimePartial: judged(t, 0.9), RegimeNone: judged(t, 0.9)}, [3]bool{true, true, true}},
		{"no verdict", Verdicts{}, [3]bool{false, false, false}},
		{"short of the margin", Verdicts{RegimeNone: judged(t, 0.98)}, [3]bool{false, false, false}},
	} {
		t.Run(c.name, func(t *testing.T) {
			rk := quietRanker(t, nil)
			var changes []RegimeState
			sw := &RegimeSwitch{Ranker: rk, Learned: learned, Verdicts: c.verdicts, OnChange: func(s RegimeState) { changes = append(changes, s) }}
			for i, q := range []*cluster.Snapshot{regimeQueue(10, 10), regimeQueue(10, 3), regimeQueue(10, 0)} {
				if _, err := sw.Rank(context.Background(), q, fakePred{}); err != nil {
					t.Fatal(err)
				}
				st := sw.State()
				if st.Learned != c.want[i] || (rk.Policy() != nil) != c.want[i] || st.Regime != Regimes()[i] {
					t.Fatalf("queue %d: regime %s, learned %v (ranker policy %v), want %s, %v; reason %s", i, st.Regime, st.Learned, rk.Policy() != nil, Regimes()[i], c.want[i], st.Reason)
				}
				if !strings.Contains(st.Reason, st.Regime) {
					t.Errorf("reason %q does not name the regime", st.Reason)
				}
			}
			if len(changes) != 3 {
				t.Fatalf("%d changes, want 3 (one per regime)", len(changes))
			}
			// An empty queue keeps the last regime; a pinned switch records regimes only.
			if st, _ := sw.Decide(0, 0); st.Regime != RegimeNone {
				t.Fatalf("empty queue: regime %s", st.Regime)
			}
			if err := sw.Pin(nil, "configured"); err != nil {
				t.Fatal(err)
			}
			if _, err := sw.Rank(context.Background(), regimeQueue(10, 10), fakePred{}); err != nil {
				t.Fatal(err)
			}
			if st := sw.State(); st.Regime != RegimeEstimates || st.Learned || rk.Policy() != nil || st.Reason != "configured" || len(changes) != 3 {
				t.Fatalf("pinned: %+v, ranker policy %v, %d changes", st, rk.Policy() != nil, len(changes))
			}
		})
	}
	// Without a learned policy the switch keeps the heuristic whatever the verdicts say.
	rk, _ := New(nil)
	sw := &RegimeSwitch{Ranker: rk, Verdicts: Verdicts{RegimeEstimates: judged(t, 0.5)}}
	if st, err := sw.Decide(1, 5); err != nil || st.Learned || rk.Policy() != nil {
		t.Fatalf("no learned policy: %+v %v", st, err)
	}
}

func TestUserEstimateShare(t *testing.T) {
	jobs := []cluster.Job{
		{Hetgpu: cluster.Annotations{EstRuntime: time.Hour, Est: cluster.EstimateInfo{Source: cluster.EstUser}}},
		{Hetgpu: cluster.Annotations{EstRuntime: time.Hour}}, // a backend's reading, not marked yet
		{Hetgpu: cluster.Annotations{EstRuntime: time.Hour, Est: cluster.EstimateInfo{Source: cluster.EstSteps}}},
		{Hetgpu: cluster.Annotations{EstRuntime: time.Hour, Est: cluster.EstimateInfo{Source: cluster.EstHistory}}},
		{},
	}
	if s, n := UserEstimateShare(jobs); s != 0.4 || n != 5 {
		t.Fatalf("share %v of %d, want 0.4 of 5", s, n)
	}
	if s, n := UserEstimateShare(nil); s != 0 || n != 0 {
		t.Fatalf("empty: %v %d", s, n)
	}
}
