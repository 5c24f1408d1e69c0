package rank

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"math"
	"strings"
	"testing"
)

func TestJudgeVerdict(t *testing.T) {
	pooled := func(c, m string, x float64) VerdictRatio { return VerdictRatio{Cluster: c, Metric: m, Ratio: x} }
	window := func(c, tr, m string, x float64) VerdictRatio {
		return VerdictRatio{Cluster: c, Trace: tr, Metric: m, Ratio: x}
	}
	for _, c := range []struct {
		name   string
		ratios []VerdictRatio
		want   string
		worst  string
	}{
		{"clear gain", []VerdictRatio{pooled("a", "jct", 0.90), pooled("a", "bsld", 0.95), window("a", "w0", "jct", 0.99), window("a", "w1", "bsld", 1.02)},
			VerdictBeats, "a pooled bsld"},
		{"pooled at the limit", []VerdictRatio{pooled("a", "jct", 0.97), window("a", "w0", "jct", 0.97)}, VerdictBeats, "a pooled jct"},
		{"pooled gain too small", []VerdictRatio{pooled("a", "jct", 0.98), window("a", "w0", "jct", 0.90)}, VerdictNotBetter, "a pooled jct"},
		{"one window regresses", []VerdictRatio{pooled("a", "jct", 0.80), window("a", "w0", "jct", 0.70), window("a", "w1", "bsld", 1.04)},
			VerdictNotBetter, "a pooled jct"},
		{"one cluster loses", []VerdictRatio{pooled("a", "jct", 0.80), pooled("b", "jct", 1.17), window("a", "w0", "jct", 0.9)}, VerdictNotBetter, "b pooled jct"},
		{"nothing finished", []VerdictRatio{pooled("a", "jct", math.NaN()), window("a", "w0", "jct", 0.9)}, VerdictNotBetter, "a pooled jct"},
	} {
		t.Run(c.name, func(t *testing.T) {
			v, err := JudgeVerdict(c.ratios, VerdictPooledMax, VerdictWindowMax)
			if err != nil {
				t.Fatal(err)
			}
			if v.Result != c.want || v.WorstPooledAt != c.worst || v.Beats() != (c.want == VerdictBeats) {
				t.Fatalf("verdict %s (worst pooled at %q); want %s at %q", v.Result, v.WorstPooledAt, c.want, c.worst)
			}
			// The meta encoding round-trips and leaves other keys alone.
			meta := v.SetMeta(map[string]string{"cluster": "x"})
			got, err := VerdictFromMeta(meta)
			if err != nil {
				t.Fatal(err)
			}
			if got.Result != v.Result || got.WorstPooledAt != v.WorstPooledAt || got.WorstWindowAt != v.WorstWindowAt ||
				got.PooledMax != VerdictPooledMax || got.WindowMax != VerdictWindowMax || got.Ratios != v.Ratios || meta["cluster"] != "x" {
				t.Fatalf("meta round trip: %+v, want %+v", got, v)
			}
			ClearVerdict(meta)
			if got, err := VerdictFromMeta(meta); got != nil || err != nil || len(meta) != 1 {
				t.Fatalf("after ClearVerdict: %+v %v, meta %v", got, err, meta)
			}
		})
	}
	if _, err := JudgeVerdict([]VerdictRatio{pooled("a", "jct", 0.9)}, VerdictPooledMax, VerdictWindowMax); err == nil {
		t.Fatal("a verdict without per-window ratios was judged")
	}
	bad := map[string]string{MetaVerdict: "maybe"}
	if _, err := VerdictFromMeta(bad); err == nil || !strings.Contains(err.Error(), MetaVerdict) {
		t.Fatalf("malformed verdict: %v, want an error naming %s", err, MetaVerdict)
	}
}

// The bundled policy's held-out verdict was written into its meta after training; its weights
// and normalisers must be exactly those `make train` produced (digest and the correction's
// scores on fixed rows). A `make train` that ships new weights updates both.
func TestBundledPolicyWeightsUnchanged(t *testing.T) {
	c, err := DefaultCheckpoint()
	if err != nil || c == nil {
		t.Fatalf("bundled checkpoint: %v %v", c, err)
	}
	b, err := json.Marshal(struct {
		Schema        Schema
		Norm, GNorm   *Normalizer
		Actor, Critic NetFile
		Residual      bool
	}{c.Schema, c.Norm, c.GNorm, c.Actor, c.Critic, c.Residual})
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	const wantDigest = "d80d90edfdb0bbe8707759eb2ded5b0787d4549968d3e9f52e6237a79d96359f"
	if got := hex.EncodeToString(sum[:]); got != wantDigest {
		t.Errorf("bundled policy digest %s, want %s", got, wantDigest)
	}
	p, err := c.Policy()
	if err != nil {
		t.Fatal(err)
	}
	rows := 3
	x := make([]float64, rows*p.NumFeatures())
	for i := range x {
		x[i] = float64(i%7-3) / 2
	}
	got := p.Actor.Forward(p.Actor.NewWorkspace(rows), x, rows)
	// The policy `make train` keeps now is the residual start: no trained epoch beat the
	// heuristic on the validation windows, so the correction is zero and it orders as the
	// heuristic does.
	if !c.Residual {
		t.Error("the bundled policy is not residual")
	}
	want := []float64{0, 0, 0}
	for i := range want {
		if math.Abs(got[i]-want[i]) > 1e-12 {
			t.Errorf("score of row %d = %.15g, want %.15g", i, got[i], want[i])
		}
	}
	v, err := VerdictFromMeta(c.Meta)
	if err != nil || v == nil {
		t.Fatalf("bundled verdict: %+v %v", v, err)
	}
}
