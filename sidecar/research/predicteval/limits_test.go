package predicteval

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/hetgpu/hetgpu/sidecar/stages/predict"
)

// limitTable builds a synthetic table: 3 models x 3 batch sizes on k80/p100/v100 at 1, 2
// and 4 GPUs, log per-GPU throughput a_job + b_type + c_count plus noise of the given
// log-scale size.
func limitTable(noise float64) ([]string, map[string]predict.Features, map[string][]entry) {
	rng := rand.New(rand.NewPCG(7, 7))
	types := []string{"k80", "p100", "v100"}
	bType := []float64{0, 1.1, 1.6}
	counts := []int{1, 2, 4}
	var jobs []string
	feats := map[string]predict.Features{}
	byJob := map[string][]entry{}
	for mi, model := range []string{"ResNet-50", "Transformer", "LM"} {
		for bi, batch := range []int{16, 32, 64} {
			f := predict.Features{Name: model, BatchSize: batch}
			k := predict.WorkloadKey(f.Name, f.BatchSize)
			jobs = append(jobs, k)
			feats[k] = f
			a := float64(mi) - 0.7*float64(bi)
			for ti, g := range types {
				for ci, n := range counts {
					y := a + bType[ti] - 0.1*float64(ci) + noise*rng.NormFloat64()
					byJob[k] = append(byJob[k], entry{GPU: g, GPUs: n, Throughput: float64(n) * math.Exp(y)})
				}
			}
		}
	}
	return jobs, feats, byJob
}

// TestReferenceLimitsExact: on a table whose ratios are the same for every job, every
// family carries a held-out entry over exactly.
func TestReferenceLimitsExact(t *testing.T) {
	rep := referenceLimits(withWorkers(limitTable(0)))
	for _, proto := range []struct {
		name string
		fams map[string]LimitFamily
		want []string
	}{
		{"partly", rep.Partly, []string{"kernel_ratio", "sibling_ratio", "cross_type_regression", "low_rank", "cascade", "nested_family_selection", "oracle_family_choice"}},
		{"entry", rep.Entry, []string{"kernel_ratio", "sibling_ratio", "double_difference", "cross_type_regression", "low_rank", "cascade", "nested_family_selection", "oracle_family_choice"}},
	} {
		for _, f := range proto.want {
			lf, ok := proto.fams[f]
			tol := 1e-6
			if f == "low_rank" || f == "cross_type_regression" {
				tol = 1e-3 // iterative / ridge-regularised
			}
			if !ok || lf.Predictions == 0 || !(lf.MAE < tol) {
				t.Errorf("%s %s: %+v (present %v); want an exact carry-over", proto.name, f, lf, ok)
			}
		}
	}
	// A model's throughput is linear in log2 batch size here: the line through the two
	// nearest batch sizes carries it to a new job exactly.
	if lf := rep.NewJob["sibling_batch_line"]; lf.Predictions != 81 || !(lf.MAE < 1e-9) || lf.Param != "nearest=2" && lf.Param != "nearest=3" {
		t.Errorf("new job sibling_batch_line: %+v; want exact with 2 or 3 nearest on 81 predictions", lf)
	}
	if lf := rep.NewJob["kernel_mean"]; !(lf.MAE > 0.1) {
		t.Errorf("new job kernel_mean: %+v; the jobs differ by a factor, so the mean cannot be exact", lf)
	}
	// 9 jobs x 9 entries: every entry is predicted once under each protocol.
	if n := rep.Partly["kernel_ratio"].Predictions; n != 81 {
		t.Errorf("partly predictions %d, want 81", n)
	}
	if _, ok := rep.Partly["double_difference"]; ok {
		t.Error("double_difference under protocol (b): no entry of the held-out type remains, want it absent")
	}
}

// TestReferenceLimitsNoisy: with noise no family is exact, the oracle choice is at least as
// good as every family that predicts every entry, and the summary is the best of them.
func TestReferenceLimitsNoisy(t *testing.T) {
	rep := referenceLimits(withWorkers(limitTable(0.1)))
	for name, fams := range map[string]map[string]LimitFamily{"new": rep.NewJob, "partly": rep.Partly, "entry": rep.Entry} {
		or := fams["oracle_family_choice"]
		best := math.Inf(1)
		for f, lf := range fams {
			if !(lf.MAE > 0.005 && lf.MAE < 1) || lf.Within10 < 0 || lf.Within10 > 1 {
				t.Errorf("%s %s: %+v; want a normalised error in (0.005, 1)", name, f, lf)
			}
			if f == "oracle_family_choice" || lf.Predictions != or.Predictions {
				continue
			}
			if or.MAE > lf.MAE+1e-12 {
				t.Errorf("%s: oracle choice %.4f worse than %s %.4f", name, or.MAE, f, lf.MAE)
			}
			if f != "nested_family_selection" {
				best = math.Min(best, lf.MAE)
			}
		}
		got := map[string]float64{"new": rep.BestTunedNewJob, "partly": rep.BestTunedPartly, "entry": rep.BestTunedEntry}[name]
		if math.Abs(got-best) > 1e-12 {
			t.Errorf("%s: best tuned %.4f, want %.4f", name, got, best)
		}
	}
	t.Logf("%s", fmt.Sprint(rep.BestTunedPartly, rep.BestTunedEntry, rep.BestNestedPartly, rep.BestNestedEntry))
}

func withWorkers(jobs []string, feats map[string]predict.Features, byJob map[string][]entry) ([]string, map[string]predict.Features, map[string][]entry, int) {
	return jobs, feats, byJob, 2
}
