package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/hetgpu/hetgpu/sidecar/stages/place"
)

// runPlace dispatches `hetgpu place <subcommand>`.
func runPlace(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return subcommand(ctx, "place", "bench", "Usage: hetgpu place bench --jobs N --gpus M --types K --seed S [--json]", runPlaceBench, args, stdout, stderr)
}

// subcommand runs `hetgpu <cmd> <sub> ...` for a command with one subcommand: usage on -h or
// none given (an error then), a usage error naming the expected subcommand otherwise.
func subcommand(ctx context.Context, cmd, sub, usage string, run func(context.Context, []string, io.Writer, io.Writer) error,
	args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprintln(stderr, usage)
		if len(args) == 0 {
			return fmt.Errorf("%w: hetgpu %s: missing subcommand (%s)", errUsage, cmd, sub)
		}
		return nil
	}
	if args[0] != sub {
		return fmt.Errorf("%w: hetgpu %s: unknown subcommand %q, expected %s", errUsage, cmd, args[0], sub)
	}
	return run(ctx, args[1:], stdout, stderr)
}

// runPlaceBench times the placement engine on random clusters and queues.
func runPlaceBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("place bench", stderr)
	jobs := fs.Int("jobs", 256, "pending jobs")
	gpus := fs.Int("gpus", 1024, "GPUs in the cluster (a multiple of 8; 8 per node)")
	types := fs.Int("types", 4, "GPU types (1-9), in equal shares")
	seed := fs.Uint64("seed", 1, "seed of the first round (round r uses seed+r)")
	rounds := fs.Int("rounds", 20, "rounds, each a new random snapshot")
	preset := fs.String("preset", "hetgpu", "placement preset: hetgpu, rltune or gogh")
	solver := fs.String("solver", "", "override the solver: auto, milp, decomposed or greedy")
	timeLimit := fs.Duration("time-limit", 0, "override the solve time limit (e.g. 500ms)")
	roundDeadline := fs.Duration("round-deadline", 0, "override the round deadline of the LP and MILP steps, per 1,024 GPUs (0 disables it; unset: the preset's, 60ms)")
	compare := fs.Bool("compare-full", false, "also solve each round as one full MILP without time limit and report the objective lost")
	asJSON := fs.Bool("json", false, "print JSON instead of the table")
	warm := fs.Bool("warm", true, "warm the placer with one untimed synthetic round first, as the sidecar does at start-up")
	setUsage(fs, "Usage: hetgpu place bench --jobs N --gpus M --types K --seed S [--json]\n\n"+
		"Generates random heterogeneous clusters and queues of that size and reports the placement\n"+
		"decision time (p50/p99 wall clock and CPU), objective, MIP gap, fallbacks and HiGHS statistics.")
	if err := parseFlags(fs, args, "hetgpu place bench", " (all options are flags)"); err != nil {
		return err
	}
	cfg, err := place.Preset(*preset)
	if err != nil {
		return fmt.Errorf("%w: hetgpu place bench --preset: %v", errUsage, err)
	}
	if *solver != "" {
		cfg.Solver = *solver
	}
	if *timeLimit != 0 {
		cfg.TimeLimit = *timeLimit
	}
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "round-deadline" {
			cfg.RoundDeadline = *roundDeadline
		}
	})
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("%w: hetgpu place bench: %v", errUsage, err)
	}
	if *rounds < 1 {
		return fmt.Errorf("%w: hetgpu place bench --rounds = %d, expected >= 1", errUsage, *rounds)
	}
	spec := place.BenchSpec{Jobs: *jobs, GPUs: *gpus, Types: *types, Seed: *seed}
	if _, err := place.RandomSnapshot(place.BenchSpec{Jobs: 0, GPUs: *gpus, Types: *types}); err != nil || *jobs < 0 {
		if err == nil {
			err = fmt.Errorf("--jobs = %d, expected >= 0", *jobs)
		}
		return fmt.Errorf("%w: hetgpu place bench: %v", errUsage, err)
	}
	res, err := place.BenchWith(ctx, cfg, spec, place.BenchOptions{Rounds: *rounds, CompareFull: *compare, Warm: *warm})
	if err != nil {
		return err
	}
	if res.VerifyError != "" {
		return fmt.Errorf("a placement failed verification: %s", res.VerifyError)
	}
	if *asJSON {
		return writeJSON(stdout, res)
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	row := func(k, format string, v ...any) { fmt.Fprintf(tw, "%s\t"+format+"\n", append([]any{k}, v...)...) }
	row("cluster", "%d GPUs (%d nodes x 8), %d types; %d pending jobs; %d rounds from seed %d", res.GPUs, res.GPUs/8, res.Types, res.Jobs, res.Rounds, res.Seed)
	row("preset / solver", "%s / %s (time limit %v, MIP gap %.2g)", *preset, res.Solver, cfg.TimeLimit, cfg.MIPGap)
	row("decision time", "p50 %.1f ms, p99 %.1f ms, max %.1f ms (wall clock; every round counts)", res.P50Ms, res.P99Ms, res.MaxMs)
	if res.WarmMs > 0 {
		row("warm-up", "%.1f ms (one untimed synthetic round before the first, as at sidecar start-up; --warm=false skips it)", res.WarmMs)
	}
	row("CPU time", "p50 %.1f ms, p99 %.1f ms (process CPU per decision)", res.CPUP50Ms, res.CPUP99Ms)
	row("model build", "%.1f ms mean (classes and candidate columns)", res.BuildMs)
	row("jobs placed", "%.1f mean (%.1f by backfill), window %.1f jobs", res.Placed, res.Backfilled, res.Window)
	row("objective", "%.2f mean (greedy %.2f, %+.2f%%)", res.Objective, res.GreedyObj, pct(res.Objective, res.GreedyObj))
	row("MIP gap", "%.3g%% worst (relative to the LP bound of the columns)", 100*res.Gap)
	row("fallbacks", "%d of %d rounds%s", res.Fallbacks, res.Rounds, reasons(res.Reasons))
	row("round deadline", "%d of %d rounds cut an LP or MILP step (%v per 1,024 GPUs)", res.DeadlineHits, res.Rounds, cfg.RoundDeadline)
	row("HiGHS", "%.0f columns, %.0f rows, %.1f solves, %.0f LP iterations, %.1f B&B nodes (means)", res.Cols, res.Rows, res.Solves, res.LPIters, res.MIPNodes)
	if *compare {
		row("vs full MILP", "full objective %.2f (no time limit, polish limit or round deadline), loss %.2f%%", res.FullObj, 100*res.DecompGap)
	}
	return tw.Flush()
}

func pct(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return 100 * (a - b) / b
}

func reasons(rs []string) string {
	if len(rs) == 0 {
		return ""
	}
	return " (" + strings.Join(rs, "; ") + ")"
}
