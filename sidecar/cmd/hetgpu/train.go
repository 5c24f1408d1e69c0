package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	"github.com/hetgpu/hetgpu/sidecar/learning/ppo"
	"github.com/hetgpu/hetgpu/sidecar/policies"
	"github.com/hetgpu/hetgpu/sidecar/research/rltrain"
	"github.com/hetgpu/hetgpu/sidecar/stages/rank"
)

// runTrain trains the prioritiser in the simulator (`hetgpu train`) or evaluates the hetgpu
// policy on held-out traces (`hetgpu train eval`, `verdict`, `ceiling`).
func runTrain(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "eval" {
		return runTrainEval(ctx, args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "verdict" {
		return runTrainVerdict(ctx, args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "ceiling" {
		return runTrainCeiling(ctx, args[1:], stdout, stderr)
	}
	fs := newFlagSet("train", stderr)
	cluster := fs.String("cluster", "gavel-108", "bundled cluster or HCL spec file")
	traceRef := fs.String("trace", "bundled:train", "training trace (cut into episodes); see hetgpu sim -h")
	epochs := fs.Int("epochs", 60, "PPO epochs to run (more after --resume)")
	out := fs.String("out", "", "checkpoint file to write (required); rewritten after every epoch")
	plot := fs.String("plot", "", "learning-curve image (default: --out with .png)")
	resume := fs.String("resume", "", "checkpoint to continue training from")
	seed := fs.Uint64("seed", 1, "seed (ignored with --resume: the checkpoint's wins)")
	episodeJobs := fs.Int("episode-jobs", rltrain.DefaultEpisodeJobs, "jobs per episode (a window of the trace)")
	stride := fs.Int("stride", rltrain.DefaultStride, "jobs between episode starts")
	rollouts := fs.Int("rollouts", 0, "episodes per epoch (default 8)")
	score := fs.String("score", string(rank.ScoreBSLD), "reward score: bsld, jct, wait, util, energy-mix, jct-bsld")
	baseline := fs.String("baseline", rltrain.DefaultBaseline, "reward baseline: heuristic (hetgpu with the fallback ranker) or a simulator policy")
	evalEvery := fs.Int("eval-every", rltrain.DefaultEvalEvery, "score the greedy policy every N epochs (0: never)")
	evalEpisodes := fs.Int("eval-episodes", rltrain.DefaultEvalEps, "episodes (evenly spaced) the greedy policy is scored on; the best-scoring epoch is kept")
	minBSLD := fs.Float64("min-bsld", rltrain.DefaultMinBSLD, "train only on episodes whose baseline mean bounded slowdown reaches this (<0: all)")
	workers := fs.Int("workers", 0, "parallel rollouts (0: one per CPU; results do not depend on it)")
	residual := fs.Bool("residual", true, "train a correction of the fallback heuristic's score that starts at zero (false: a plain policy that first imitates the heuristic)")
	validate := fs.String("validate", "", "comma-separated validation traces (e.g. bundled:validate-0,...): the best greedy-evaluated epochs are judged against the heuristic there and only one that beats it is kept (default: none, keep the best greedy-evaluated epoch)")
	validateTop := fs.Int("validate-top", rltrain.DefaultValidateTop, "how many of the best greedy-evaluated epochs --validate judges")
	logLevel := fs.String("log-level", "warn", "log level on stderr")
	estimates := addEstimateFlags(fs)
	setUsage(fs, "Usage: hetgpu train --cluster NAME --trace REF --epochs N --out FILE [flags]\n"+
		"       hetgpu train eval [flags]   (held-out comparison; -h for its flags)\n"+
		"       hetgpu train verdict --policy FILE [flags]   (held-out verdict into the policy's meta)\n\n"+
		"Trains the prioritiser (PPO) in the simulator, episodes being windows of the trace.")
	if err := parseFlags(fs, args, "hetgpu train", ""); err != nil {
		return err
	}
	if *out == "" {
		return fmt.Errorf("%w: hetgpu train: --out FILE is required", errUsage)
	}
	if *epochs <= 0 {
		return fmt.Errorf("%w: hetgpu train --epochs = %d, expected > 0", errUsage, *epochs)
	}
	if *validateTop <= 0 {
		return fmt.Errorf("%w: hetgpu train --validate-top = %d, expected > 0", errUsage, *validateTop)
	}
	if *validate != "" && *evalEvery <= 0 {
		return fmt.Errorf("%w: hetgpu train --validate needs greedy evaluations to choose from, --eval-every = %d, expected > 0", errUsage, *evalEvery)
	}
	if *evalEpisodes <= 0 {
		return fmt.Errorf("%w: hetgpu train --eval-episodes = %d, expected > 0", errUsage, *evalEpisodes)
	}
	kind, err := rank.ParseScore(*score)
	if err != nil {
		return fmt.Errorf("%w: hetgpu train --score: %v", errUsage, err)
	}
	replay, err := estimates.replay("hetgpu train")
	if err != nil {
		return err
	}
	level := hclog.LevelFromString(*logLevel)
	if level == hclog.NoLevel {
		return fmt.Errorf("%w: hetgpu train --log-level = %q, expected trace, debug, info, warn or error", errUsage, *logLevel)
	}
	logger := hclog.New(&hclog.LoggerOptions{Name: "train", Level: level, Output: stderr})
	if *plot == "" {
		*plot = strings.TrimSuffix(*out, filepath.Ext(*out)) + ".png"
	}
	o := rltrain.TrainOptions{Cluster: *cluster, Trace: *traceRef, Epochs: *epochs, Seed: *seed,
		EpisodeJobs: *episodeJobs, Stride: *stride, Rollouts: *rollouts, Score: kind, Baseline: *baseline,
		EvalEvery: *evalEvery, EvalEpisodes: *evalEpisodes, MinBSLD: *minBSLD, Workers: *workers, Pipeline: policies.HetgpuPipeline, Logger: logger,
		Residual: *residual, ValidateTraces: splitList(*validate), ValidateTop: *validateTop, EstimateReplay: replay,
		Checkpoint: func(c *rank.Checkpoint) error { return c.Save(*out) }}
	if *resume != "" {
		if o.Resume, err = rank.LoadCheckpoint(*resume); err != nil {
			return err
		}
	}
	var bar *progressbar.ProgressBar
	if f, ok := stderr.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		bar = progressbar.NewOptions(*epochs, progressbar.OptionSetWriter(stderr), progressbar.OptionSetDescription("training"),
			progressbar.OptionShowCount(), progressbar.OptionSetPredictTime(true), progressbar.OptionClearOnFinish())
	}
	start := time.Now()
	o.Progress = func(s rank.EpochStats) {
		if bar != nil {
			bar.Clear()
		}
		fmt.Fprintln(stdout, rltrain.FormatEpoch(s))
		if bar != nil {
			_ = bar.Add(1)
		}
	}
	res, err := rltrain.Train(ctx, o)
	if bar != nil {
		_ = bar.Finish()
	}
	if res != nil && len(res.Trainer.Curve) > 0 {
		title := fmt.Sprintf("hetgpu prioritiser: %s on %s (%s vs %s)", *traceRef, *cluster, kind, *baseline)
		if perr := ppo.PlotCurve(res.Trainer.Curve, title, *plot); perr != nil && err == nil {
			err = perr
		}
	}
	if err != nil {
		return err
	}
	kept := res.Trainer.Epoch
	if res.Best != nil {
		kept = res.BestEpoch
	}
	why := "best greedy evaluation"
	if v := res.Meta["validation_verdict"]; v != "" {
		why = "validation: " + v
	}
	fmt.Fprintf(stdout, "trained %d epochs (%d episodes of %d jobs) in %s; kept epoch %d (%s); policy: %s; learning curve: %s\n",
		res.Trainer.Epoch, res.Episodes, *episodeJobs, time.Since(start).Round(time.Second), kept, why, *out, *plot)
	return nil
}

func runTrainEval(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("train eval", stderr)
	clusters := fs.String("clusters", "gavel-108,modern-mix", "comma-separated clusters")
	traces := fs.String("traces", strings.Join(rltrain.HeldOutTraces(), ","), "comma-separated held-out traces")
	policyList := fs.String("policies", "all", "policies to compare (must include hetgpu for the targets); all is every simulator policy but "+rltrain.HeuristicVariant+", which adds hetgpu with the fallback heuristic ranker")
	policyFile := fs.String("policy", "", "prioritiser checkpoint for hetgpu (default: the bundled policy)")
	seed := fs.Uint64("seed", 1, "seed")
	parallel := fs.Int("parallel", 0, "policies simulated at once (0: one per CPU)")
	asJSON := fs.Bool("json", false, "print JSON")
	compare := addCompareFlags(fs)
	setUsage(fs, "Usage: hetgpu train eval [flags]\n\nCompares hetgpu with every baseline on held-out traces and checks the prioritiser's targets.")
	if err := parseFlags(fs, args, "hetgpu train eval", ""); err != nil {
		return err
	}
	if len(splitList(*policyList)) == 0 {
		return fmt.Errorf("%w: hetgpu train eval --policies is empty", errUsage)
	}
	replay, starvation, err := compare.read("hetgpu train eval")
	if err != nil {
		return err
	}
	names, err := policies.ParseList(*policyList)
	if err != nil {
		return fmt.Errorf("%w: hetgpu train eval --policies: %v", errUsage, err)
	}
	pol, err := loadPolicyFile(*policyFile)
	if err != nil {
		return err
	}
	cs, ts := splitList(*clusters), splitList(*traces)
	if len(cs) == 0 || len(ts) == 0 {
		return fmt.Errorf("%w: hetgpu train eval: --clusters and --traces must not be empty", errUsage)
	}
	ev, err := rltrain.Evaluate(ctx, rltrain.EvalOptions{Clusters: cs, Traces: ts, Policies: names, Policy: pol, Seed: *seed, Parallel: *parallel,
		EstimateReplay: replay, Starvation: starvation, Progress: func(c, t int) { fmt.Fprintf(stderr, "simulating %s on %s...\n", ts[t], cs[c]) }})
	if err != nil {
		return err
	}
	if slices.Contains(names, "hetgpu") {
		if ev.PolicyVerdicts, err = policyVerdicts(*policyFile); err != nil {
			return err
		}
	}
	ev.Regime = rltrain.RegimeOfReplay(replay)
	return writeReport(stdout, *asJSON, ev)
}

// policyVerdicts are the held-out verdicts per estimate regime stored in a --policy checkpoint
// ("": the bundled one), for train eval to print beside its own figures.
func policyVerdicts(path string) (rank.Verdicts, error) {
	var c *rank.Checkpoint
	var err error
	if path == "" {
		c, err = rank.DefaultCheckpoint()
	} else {
		c, err = rank.LoadCheckpoint(path)
	}
	if err != nil || c == nil {
		return nil, err
	}
	vs, err := rank.VerdictsFromMeta(c.Meta)
	if err != nil {
		return nil, fmt.Errorf("policy %q: %w", path, err)
	}
	return vs, nil
}

// runTrainCeiling compares the learned order with the heuristic and with the heuristic shown
// exact runtimes (the ceiling of better runtime knowledge) on several seeds.
func runTrainCeiling(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("train ceiling", stderr)
	clusters := fs.String("clusters", "gavel-108,modern-mix", "comma-separated clusters")
	traces := fs.String("traces", strings.Join(rltrain.HeldOutTraces(), ","), "comma-separated held-out traces")
	policyFile := fs.String("policy", "", "prioritiser checkpoint for hetgpu (default: the bundled policy)")
	seedList := fs.String("seeds", "1,2,3", "comma-separated seeds (each draws new runtime-estimate errors)")
	compare := addCompareFlags(fs)
	parallel := fs.Int("parallel", 0, "policies simulated at once (0: one per CPU)")
	asJSON := fs.Bool("json", false, "print JSON")
	setUsage(fs, fmt.Sprintf("Usage: hetgpu train ceiling [flags]\n\nRuns the learned order (hetgpu), the fallback heuristic (%s) and the heuristic shown exact runtimes (%s) on held-out traces once per seed, and reports the learned and oracle orders' ratios to the heuristic, the share of the gap to the oracle the learned order closes, and the heuristic's own spread over the seeds.", rltrain.HeuristicVariant, policies.HetgpuOracle))
	if err := parseFlags(fs, args, "hetgpu train ceiling", ""); err != nil {
		return err
	}
	seeds, err := parseSeeds(*seedList)
	if err != nil {
		return fmt.Errorf("%w: hetgpu train ceiling --seeds: %v", errUsage, err)
	}
	replay, starvation, err := compare.read("hetgpu train ceiling")
	if err != nil {
		return err
	}
	cs, ts := splitList(*clusters), splitList(*traces)
	if len(cs) == 0 || len(ts) == 0 {
		return fmt.Errorf("%w: hetgpu train ceiling: --clusters and --traces must not be empty", errUsage)
	}
	pol, err := loadPolicyFile(*policyFile)
	if err != nil {
		return err
	}
	var seed uint64
	ce, err := rltrain.RunCeiling(ctx, rltrain.CeilingOptions{Seeds: seeds, SeedProgress: func(s uint64) { seed = s },
		EvalOptions: rltrain.EvalOptions{Clusters: cs, Traces: ts, Policy: pol, Parallel: *parallel, EstimateReplay: replay, Starvation: starvation,
			Progress: func(c, t int) { fmt.Fprintf(stderr, "seed %d: simulating %s on %s...\n", seed, ts[t], cs[c]) }}})
	if err != nil {
		return err
	}
	return writeReport(stdout, *asJSON, ce)
}

// loadPolicyFile loads a --policy checkpoint; "" gives nil (the bundled policy).
func loadPolicyFile(path string) (*rank.Policy, error) {
	if path == "" {
		return nil, nil
	}
	c, err := rank.LoadCheckpoint(path)
	if err != nil {
		return nil, err
	}
	return c.Policy()
}

// writeReport prints a report as indented JSON or as its table.
func writeReport(w io.Writer, asJSON bool, r interface{ WriteTable(io.Writer) error }) error {
	if !asJSON {
		return r.WriteTable(w)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", " ")
	return enc.Encode(r)
}

// parseSeeds reads a comma-separated list of distinct unsigned seeds.
func parseSeeds(s string) ([]uint64, error) {
	var out []uint64
	seen := map[uint64]bool{}
	for _, p := range strings.Split(s, ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		v, err := strconv.ParseUint(p, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%q is not a seed, expected an unsigned integer", p)
		}
		if seen[v] {
			return nil, fmt.Errorf("seed %d is listed twice, expected distinct seeds", v)
		}
		seen[v] = true
		out = append(out, v)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%q lists no seed, expected e.g. 1,2,3", s)
	}
	return out, nil
}

// runTrainVerdict evaluates a policy against the fallback heuristic on the held-out windows and
// writes the verdict into the checkpoint's meta; the weights are left as they are. The sidecar
// ranks with the bundled policy by default only when the verdict is "beats".
func runTrainVerdict(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("train verdict", stderr)
	policyFile := fs.String("policy", "", "prioritiser checkpoint to judge; its meta is rewritten (required)")
	clusters := fs.String("clusters", "gavel-108,modern-mix", "comma-separated clusters")
	traces := fs.String("traces", strings.Join(rltrain.HeldOutTraces(), ","), "comma-separated held-out traces")
	seed := fs.Uint64("seed", 1, "seed")
	parallel := fs.Int("parallel", 0, "policies simulated at once (0: one per CPU)")
	evalFile := fs.String("eval", "", "judge from this `hetgpu train eval --json` output of the same policy instead of simulating (it must hold hetgpu and "+rltrain.HeuristicVariant+")")
	pooledMax := fs.Float64("pooled-max", rank.VerdictPooledMax, "highest pooled learned/heuristic ratio that still beats")
	windowMax := fs.Float64("window-max", rank.VerdictWindowMax, "highest per-window learned/heuristic ratio that still beats")
	estimates := addEstimateFlags(fs)
	setUsage(fs, fmt.Sprintf("Usage: hetgpu train verdict --policy FILE [flags]\n\nCompares the policy with the fallback heuristic (hetgpu vs %s) on held-out traces and writes the verdict into the checkpoint's meta, as the verdict of the estimate regime --estimates replays (with estimates, partial:F or none; each regime keeps its own).", rltrain.HeuristicVariant))
	if err := parseFlags(fs, args, "hetgpu train verdict", ""); err != nil {
		return err
	}
	if *policyFile == "" {
		return fmt.Errorf("%w: hetgpu train verdict: --policy FILE is required", errUsage)
	}
	if !(*pooledMax > 0) || !(*windowMax > 0) {
		return fmt.Errorf("%w: hetgpu train verdict --pooled-max = %v, --window-max = %v, expected positive ratios", errUsage, *pooledMax, *windowMax)
	}
	replay, err := estimates.replay("hetgpu train verdict")
	if err != nil {
		return err
	}
	regime := rltrain.RegimeOfReplay(replay)
	c, err := rank.LoadCheckpoint(*policyFile)
	if err != nil {
		return err
	}
	var ev *rltrain.Eval
	if *evalFile != "" {
		b, err := os.ReadFile(*evalFile)
		if err != nil {
			return fmt.Errorf("--eval: %w", err)
		}
		ev = &rltrain.Eval{}
		if err := json.Unmarshal(b, ev); err != nil {
			return fmt.Errorf("--eval %s: %w, expected the output of hetgpu train eval --json", *evalFile, err)
		}
	} else {
		pol, err := c.Policy()
		if err != nil {
			return err
		}
		cs, ts := splitList(*clusters), splitList(*traces)
		if len(cs) == 0 || len(ts) == 0 {
			return fmt.Errorf("%w: hetgpu train verdict: --clusters and --traces must not be empty", errUsage)
		}
		start := time.Now()
		ev, err = rltrain.Evaluate(ctx, rltrain.EvalOptions{Clusters: cs, Traces: ts, Policies: rltrain.VerdictPolicies(), Policy: pol,
			Seed: *seed, Parallel: *parallel, EstimateReplay: replay, Progress: func(c, t int) { fmt.Fprintf(stderr, "simulating %s on %s...\n", ts[t], cs[c]) }})
		if err != nil {
			return err
		}
		fmt.Fprintf(stderr, "held-out evaluation took %s\n", time.Since(start).Round(time.Second))
	}
	v, err := rltrain.HeldOutVerdict(ev, *seed, *pooledMax, *windowMax)
	if err != nil {
		return err
	}
	v.Estimates = replay.Regime()
	if c.Meta, err = v.SetMetaRegime(c.Meta, regime); err != nil {
		return err
	}
	if err := c.Save(*policyFile); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "held-out verdict of %s against the fallback heuristic in the %s regime (--estimates %s): %s\n  %s\n  ratios: %s\n",
		*policyFile, regime, v.Estimates, v, v.Rule(), v.Ratios)
	return nil
}

// splitList splits a comma-separated list of cluster or trace specs. A spec's own options are
// comma-separated too ("synthetic:jobs=300,rate=12"), so a part that is a bare key=value (no
// ':' before its '=') continues the spec before it.
func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		eq, colon := strings.IndexByte(p, '='), strings.IndexByte(p, ':')
		if len(out) > 0 && eq > 0 && (colon < 0 || colon > eq) {
			out[len(out)-1] += "," + p
			continue
		}
		out = append(out, p)
	}
	return out
}
