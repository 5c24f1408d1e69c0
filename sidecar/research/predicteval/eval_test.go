package predicteval

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/hetgpu/hetgpu/model/throughput"
	"github.com/hetgpu/hetgpu/sidecar/stages/predict"
)

// TestEvaluateSmall runs both protocols on the small synthetic table (testdata, written in
// Gavel's format: 16 job types, three GPU types, 1 and 2 GPUs, one co-located pair). Its
// cross-type ratios are consistent within a model, so P1+P2 must do well on it.
func TestEvaluateSmall(t *testing.T) {
	rep, err := Evaluate(context.Background(), smallTable(t), EvalOptions{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("mae %v; within10 %v; %.1fs", rep.MAE, rep.Within10, rep.Seconds)
	for _, k := range []string{predict.ArchFFN, predict.ArchRNN, predict.ArchAttention, "p1", "knn", "p1p2", "ratio"} {
		if v, ok := rep.MAE[k]; !ok || !(v > 0 && v < 1) {
			t.Errorf("mae[%s] = %v, %v; want a normalised error in (0, 1)", k, v, ok)
		}
	}
	if rep.JobTypes != 16 || rep.Entries != 96 || strings.Join(rep.GPUTypes, ",") != "k80,p100,v100" {
		t.Errorf("table summary: %d job types, %d entries, types %v", rep.JobTypes, rep.Entries, rep.GPUTypes)
	}
	// Protocol (b) predicts each job's two counts on each of its three types once per k.
	if len(rep.Within10) != 11 || len(rep.MAEAfter) != 11 || rep.PartlyPredictions != 16*3*2 {
		t.Errorf("protocol (b): %d within10 values, %d MAE values, %d predictions per k; want 11, 11, 96",
			len(rep.Within10), len(rep.MAEAfter), rep.PartlyPredictions)
	}
	if rep.Within10After10 != rep.Within10[10] || rep.MAE["p1p2"] != rep.MAEAfter[10] || rep.MAEPartly["p1"] != rep.MAEAfter[0] {
		t.Error("summary fields disagree with the per-k series")
	}
	// Observed runs on the other types must help: P1+P2 after ten runs beats P1 alone.
	if !(rep.MAE["p1p2"] < rep.MAEAfter[0]) || !(rep.Within10After10 > rep.Within10[0]) {
		t.Errorf("P1+P2 after 10 runs: MAE %.3f, within 10 %% %.2f; P1 alone %.3f, %.2f", rep.MAE["p1p2"], rep.Within10After10, rep.MAEAfter[0], rep.Within10[0])
	}
	// Measured on this table: 0.045 and 91 %; the bounds leave room for numeric drift only.
	if rep.MAE["p1p2"] > 0.07 || rep.Within10After10 < 0.8 {
		t.Errorf("P1+P2 on a consistent table: MAE %.3f, within 10 %% %.2f; want <= 0.07 and >= 0.8", rep.MAE["p1p2"], rep.Within10After10)
	}
	// Protocol (b') holds out each of a job's six entries once.
	if rep.EntryPredictions != 16*6 || rep.MAE["p1p2_entry"] != rep.MAEEntry["p1p2"] {
		t.Errorf("protocol (b'): %d predictions, mae %v; want 96", rep.EntryPredictions, rep.MAEEntry)
	}
	if !(rep.MAEEntry["p1p2"] < rep.MAEEntry["p1"]) || !(rep.Within10EntryAfter10 > rep.Within10EntryAfter0) || rep.MAEEntry["p1p2"] > 0.07 {
		t.Errorf("protocol (b'): P1+P2 MAE %.3f within 10 %% %.2f; P1 alone %.3f, %.2f; want better than P1 and <= 0.07",
			rep.MAEEntry["p1p2"], rep.Within10EntryAfter10, rep.MAEEntry["p1"], rep.Within10EntryAfter0)
	}
	if len(rep.PerJob) != 16 || rep.PerJob["LM (batch size 32)"].Partly == nil {
		t.Errorf("per-job breakdown: %d jobs, LM (batch size 32) %+v", len(rep.PerJob), rep.PerJob["LM (batch size 32)"])
	}
	// The reference families run over the same held-out sets; the table is consistent, so
	// the best of them is close to exact, and the oracle choice is never worse than it.
	lim := rep.ReferenceLimits
	if lim == nil || lim.Partly["kernel_ratio"].Predictions != rep.PartlyPredictions || lim.Entry["kernel_ratio"].Predictions != rep.EntryPredictions {
		t.Fatalf("reference limits missing or on other held-out sets: %+v", lim)
	}
	if !(lim.BestTunedPartly >= 0 && lim.BestTunedPartly < 0.07) || !(lim.Partly["oracle_family_choice"].MAE <= lim.BestTunedPartly) {
		t.Errorf("reference limits (b): best tuned %.3f, oracle %.3f", lim.BestTunedPartly, lim.Partly["oracle_family_choice"].MAE)
	}
	if lim.Note == "" {
		t.Error("reference limits without the note saying what they see")
	}
	if rep.ColocPairs != 1 {
		t.Errorf("co-location pairs %d, want the table's 1", rep.ColocPairs)
	}
}

func TestEvaluateRejects(t *testing.T) {
	tiny, err := throughput.ParseGavelJSON(strings.NewReader(`{"v100": {"('A (batch size 8)', 1)": {"null": 3}, "('B (batch size 8)', 1)": {"null": 4}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Evaluate(context.Background(), tiny, EvalOptions{}); err == nil || !strings.Contains(err.Error(), "2 job types") {
		t.Errorf("Evaluate on 2 job types: %v", err)
	}
	if _, err := Evaluate(context.Background(), smallTable(t), EvalOptions{Noise: -1}); err == nil || !strings.Contains(err.Error(), "noise") {
		t.Errorf("Evaluate with negative noise: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Evaluate(ctx, smallTable(t), EvalOptions{}); err == nil {
		t.Error("Evaluate on a cancelled context succeeded")
	}
}

// smallTable is the predictor's small test table (sidecar/stages/predict/testdata).
func smallTable(t testing.TB) *throughput.Table {
	f, err := os.Open("../../stages/predict/testdata/small_throughputs.json")
	if err == nil {
		defer f.Close()
		var tab *throughput.Table
		if tab, err = throughput.ParseGavelJSON(f); err == nil {
			return tab
		}
	}
	t.Fatal(err)
	return nil
}

// TestCombinationNoWorseThanMembers: under protocols (b) and (b'), P2's combination
// ("p1p2") is no worse than any of its estimators alone on the predictions that estimator
// makes. On the small table's (b') the completion or the posterior alone is up to 2.4 %
// better than the combination (seed 1: 0.0458 against 0.0469), which the catalog's
// hold-outs do not see (they rate the transfer better): there the bound is 3 %, the
// measured gap (docs/results/predictor.md), not zero. The bundled
// Gavel table (slow: a minute or more) runs without -short.
func TestCombinationNoWorseThanMembers(t *testing.T) {
	type table struct {
		name string
		t    *throughput.Table
		// slack[protocol] is the relative excess allowed over the best member.
		slack map[string]float64
	}
	tables := []table{{"small", smallTable(t), map[string]float64{"b": 0, "b_entry": 0.03}}}
	if !testing.Short() {
		f, err := os.Open("../../../model/throughput/data/gavel/simulation_throughputs.json")
		if err != nil {
			t.Fatal(err)
		}
		g, err := throughput.ParseGavelJSON(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		tables = append(tables, table{"gavel", g, map[string]float64{"b": 0, "b_entry": 0}})
	}
	for _, tb := range tables {
		rep, err := Evaluate(context.Background(), tb.t, EvalOptions{Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		for _, proto := range []string{"b", "b_entry"} {
			es := rep.Estimators[proto]
			comb, ok := es[predict.SrcP1P2]
			if !ok || comb.Predictions == 0 {
				t.Fatalf("%s %s: no combination in %v", tb.name, proto, es)
			}
			for _, m := range []string{predict.CompPosterior, predict.CompTransfer, predict.CompLowRank, predict.CompRoofline} {
				e, ok := es[m]
				if !ok || e.Predictions == 0 {
					t.Errorf("%s %s: estimator %s made no prediction", tb.name, proto, m)
					continue
				}
				t.Logf("%s %s: %s %.4f alone, combination %.4f on its %d predictions", tb.name, proto, m, e.MAE, e.CombinedMAE, e.Predictions)
				if e.CombinedMAE > e.MAE*(1+tb.slack[proto])+1e-9 {
					t.Errorf("%s %s: combination MAE %.4f on %s's %d predictions, %s alone %.4f (slack %.0f %%)",
						tb.name, proto, e.CombinedMAE, m, e.Predictions, m, e.MAE, 100*tb.slack[proto])
				}
			}
		}
	}
}
