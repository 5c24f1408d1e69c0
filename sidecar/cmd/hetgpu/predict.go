package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/hetgpu/hetgpu/model/throughput"
	"github.com/hetgpu/hetgpu/sidecar/research/predicteval"
	"github.com/hetgpu/hetgpu/sidecar/stages/predict"
)

const predictUsage = `usage: hetgpu predict <eval|train> [flags]
  eval   evaluate P1 and P1+P2 on a throughput table in Gavel's JSON format
  train  train the predictor on a throughput table and write the model file`

// runPredict dispatches "predict eval" and "predict train".
func runPredict(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return fmt.Errorf("%w: %s", errUsage, predictUsage)
	}
	switch args[0] {
	case "eval":
		return runPredictEval(ctx, args[1:], stdout, stderr)
	case "train":
		return runPredictTrain(ctx, args[1:], stdout, stderr)
	case "-h", "--help", "help":
		fmt.Fprintln(stderr, predictUsage)
		return nil
	}
	return fmt.Errorf("%w: unknown predict subcommand %q\n%s", errUsage, args[0], predictUsage)
}

func loadThroughputs(path string) (*throughput.Table, error) {
	if path == "" || path == "bundled" {
		return throughput.Bundled()
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("--throughputs: %w", err)
	}
	defer f.Close()
	t, err := throughput.ParseGavelJSON(f)
	if err != nil {
		return nil, fmt.Errorf("--throughputs %s: %w", path, err)
	}
	return t, nil
}

func runPredictEval(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("predict eval", stderr)
	file := fs.String("throughputs", "", "throughput table in Gavel's simulation_throughputs.json format (required)")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	seed := fs.Uint64("seed", 1, "seed for training and observed-run noise")
	noise := fs.Float64("noise", 0.05, "log-scale standard deviation of one observed run")
	maxRuns := fs.Int("max-runs", 10, "observed runs of the held-out job under protocols (b) and (b')")
	traceFile := fs.String("trace", "", "write every estimator's prediction of every held-out cell of (b) and (b') to this file, one JSON object a line")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *maxRuns < 1 {
		return fmt.Errorf("%w: predict eval: --max-runs = %d, expected a positive number of runs", errUsage, *maxRuns)
	}
	if *file == "" {
		return fmt.Errorf("%w: predict eval: --throughputs FILE is required", errUsage)
	}
	if *noise < 0 {
		return fmt.Errorf("%w: predict eval: --noise = %v, expected >= 0", errUsage, *noise)
	}
	t, err := loadThroughputs(*file)
	if err != nil {
		return err
	}
	opts := predicteval.EvalOptions{Seed: *seed, Noise: *noise, MaxRuns: *maxRuns}
	var tw *traceWriter
	if *traceFile != "" {
		f, err := os.Create(*traceFile)
		if err != nil {
			return fmt.Errorf("--trace: %w", err)
		}
		defer f.Close()
		tw = &traceWriter{w: bufio.NewWriter(f)}
		opts.Trace = tw.write
	}
	rep, err := predicteval.Evaluate(ctx, t, opts)
	if err != nil {
		return err
	}
	if tw != nil {
		if err := tw.flush(); err != nil {
			return fmt.Errorf("--trace %s: %w", *traceFile, err)
		}
	}
	if *asJSON {
		return writeJSON(stdout, rep)
	}
	writeEvalText(stdout, *file, rep)
	return nil
}

// traceWriter writes trace entries as JSON lines; Evaluate calls it from several goroutines.
type traceWriter struct {
	mu  sync.Mutex
	w   *bufio.Writer
	err error
}

func (t *traceWriter) write(e predicteval.TraceEntry) {
	b, err := json.Marshal(e)
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.err == nil && err != nil {
		t.err = err
	}
	if t.err == nil {
		t.w.Write(append(b, '\n'))
	}
}

func (t *traceWriter) flush() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.err != nil {
		return t.err
	}
	return t.w.Flush()
}

// writeEstimators prints each estimator alone beside the combination on the same
// predictions.
func writeEstimators(w io.Writer, r *predicteval.EvalReport) {
	if len(r.Estimators) == 0 {
		return
	}
	fmt.Fprintln(w, "\nP2's estimators alone and combined (\"p1p2\"), each on the predictions it makes (normalised MAE):")
	fmt.Fprintf(w, "  %-9s %-10s %5s  %-7s %-9s %s\n", "protocol", "estimator", "n", "MAE", "within10", "p1p2 on the same")
	for _, proto := range []string{"a", "b", "b_entry"} {
		es := r.Estimators[proto]
		label := map[string]string{"a": "(a)", "b": "(b)", "b_entry": "(b')"}[proto]
		for _, k := range []string{predict.SrcP1, predict.CompPosterior, predict.CompTransfer, predict.CompLowRank, predict.CompRoofline, predict.SrcP1P2} {
			e, ok := es[k]
			if !ok {
				continue
			}
			fmt.Fprintf(w, "  %-9s %-10s %5d  %.3f   %5.1f %%   %.3f\n", label, k, e.Predictions, e.MAE, 100*e.Within10, e.CombinedMAE)
		}
	}
	for _, rf := range r.Roofline {
		fmt.Fprintf(w, "  roofline validation, kind %d (%s): admitted in %d of %d folds; mean over folds: MAE %.3f (log) against %.3f without it, gain t %.2f, weight %.2f\n",
			rf.Kind, map[int]string{0: "job ran on the type", 1: "type new to the job"}[rf.Kind], rf.Accepted, rf.Folds, rf.MAE, rf.MAEMix, rf.Gain, rf.Weight)
	}
}

func writeEvalText(w io.Writer, file string, r *predicteval.EvalReport) {
	fmt.Fprintf(w, "predictor evaluation on %s: %d job types, GPU types %s, %d entries (seed %d, run noise %.3g, %.1fs)\n\n",
		file, r.JobTypes, strings.Join(r.GPUTypes, ","), r.Entries, r.Seed, r.Noise, r.Seconds)
	fmt.Fprintln(w, "(a) new job, all entries of a job type held out (normalised MAE):")
	for _, k := range slices.Sorted(maps.Keys(r.MAENewJob)) {
		fmt.Fprintf(w, "  %-10s %.3f\n", k, r.MAENewJob[k])
	}
	won := make([]string, 0, len(r.Selected))
	for k, v := range r.Selected {
		won = append(won, fmt.Sprintf("%s %d", k, v))
	}
	sort.Strings(won)
	fmt.Fprintf(w, "  p1 (per-fold choice) within 10 %%: %.1f %%; folds won: %s\n\n", 100*r.NewJobWithin10, strings.Join(won, ", "))
	fmt.Fprintf(w, "(b) partly observed job, one (job type, GPU type) held out at all its GPU counts, the job's entries on the other types observed, %d predictions per k:\n", r.PartlyPredictions)
	fmt.Fprintln(w, "  k   MAE    within 10 %")
	for k := range r.MAEAfter {
		fmt.Fprintf(w, "  %-3d %.3f  %5.1f %%\n", k, r.MAEAfter[k], 100*r.Within10[k])
	}
	if v, ok := r.MAEPartly["ratio"]; ok {
		fmt.Fprintf(w, "  reference \"ratio\" (the job's other entries without noise x similar jobs' type ratios): MAE %.3f, within 10 %% %.1f %%\n",
			v, 100*r.RatioWithin10)
	}
	if r.EntryPredictions > 0 {
		fmt.Fprintf(w, "\n(b') partly observed job, one entry (job type, GPU type, GPU count) held out, the job's other entries (other types and other counts) observed, %d predictions:\n", r.EntryPredictions)
		fmt.Fprintf(w, "  p1 (k = 0)          MAE %.3f  within 10 %% %5.1f %%\n", r.MAEEntry["p1"], 100*r.Within10EntryAfter0)
		fmt.Fprintf(w, "  p1p2 (k = %-2d)       MAE %.3f  within 10 %% %5.1f %%\n", r.MaxRuns, r.MAEEntry["p1p2"], 100*r.Within10EntryAfter10)
	}
	writeEstimators(w, r)
	fmt.Fprintf(w, "\nco-location (leave one pair out, %d pairs): MAE %.3f (mean-ratio baseline %.3f)\n", r.ColocPairs, r.ColocMAE, r.ColocMAEBaseline)
	if l := r.ReferenceLimits; l != nil {
		fmt.Fprintln(w, "\nreference limits of the table (NOT the predictor): estimator families on the same held-out sets, under (b)")
		fmt.Fprintln(w, "and (b') seeing the job's other entries without noise; \"tuned\" uses the setting best on these very")
		fmt.Fprintln(w, "predictions (optimistic), \"nested\" the setting best on the other jobs; oracle_family_choice picks per")
		fmt.Fprintln(w, "prediction with the truth.")
		writeLimits(w, "(a)", l.NewJob, l.BestTunedNewJob, l.BestNestedNewJob)
		writeLimits(w, "(b)", l.Partly, l.BestTunedPartly, l.BestNestedPartly)
		writeLimits(w, "(b')", l.Entry, l.BestTunedEntry, l.BestNestedEntry)
	}
}

func writeLimits(w io.Writer, proto string, fams map[string]predicteval.LimitFamily, bestTuned, bestNested float64) {
	if len(fams) == 0 {
		return
	}
	names := make([]string, 0, len(fams))
	for k := range fams {
		names = append(names, k)
	}
	sort.Strings(names)
	fmt.Fprintf(w, "  %s %-24s %5s  %-7s %-8s %-7s  %s\n", proto, "family", "n", "tunedMAE", "within10", "nestMAE", "setting")
	for _, k := range names {
		f := fams[k]
		nested := "     -"
		if f.NestedMAE > 0 {
			nested = fmt.Sprintf("%.3f", f.NestedMAE)
		}
		fmt.Fprintf(w, "  %s %-24s %5d  %.3f    %5.1f %%  %-7s  %s\n", strings.Repeat(" ", len(proto)), k, f.Predictions, f.MAE, 100*f.Within10, nested, f.Param)
	}
	fmt.Fprintf(w, "  %s best over every prediction: tuned (one family or the cascade) MAE %.3f; nested (honest) MAE %.3f\n", strings.Repeat(" ", len(proto)), bestTuned, bestNested)
}

func runPredictTrain(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("predict train", stderr)
	file := fs.String("throughputs", "bundled", `training table in Gavel's JSON format, or "bundled" (Gavel + ElasticFlow)`)
	out := fs.String("out", "", "model file to write (required)")
	seed := fs.Uint64("seed", 1, "training seed")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *out == "" {
		return fmt.Errorf("%w: predict train: --out FILE is required", errUsage)
	}
	if *seed == 0 {
		return fmt.Errorf("%w: predict train: --seed = 0, expected a positive integer", errUsage)
	}
	t, err := loadThroughputs(*file)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	m, err := predict.Train(predict.SeedRecords(t), predict.TrainOptions{Seed: *seed})
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	if err := m.Save(&buf); err != nil {
		return err
	}
	if err := os.WriteFile(*out, buf.Bytes(), 0o644); err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	vals := make([]string, 0, len(m.ValMAE))
	for k, v := range m.ValMAE {
		vals = append(vals, fmt.Sprintf("%s %.3f", k, v))
	}
	sort.Strings(vals)
	fmt.Fprintf(stdout, "trained P1 %s (validation MAE: %s) on %d workloads, %d examples; wrote %s\n",
		m.Arch, strings.Join(vals, ", "), m.TrainedOn.Workloads, m.TrainedOn.Examples, *out)
	return nil
}
