package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"runtime/pprof"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/hetgpu/hetgpu/sidecar/research/livebench"
)

const benchLiveUsage = "Usage: hetgpu bench live [--nodes N] [--gpus-per-node G] [--gpu-types T] [--pending P] [--running R] [--latency D] [--rounds K] [--json]"

// runBench dispatches `hetgpu bench <subcommand>`.
func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return subcommand(ctx, "bench", "live", benchLiveUsage, runBenchLive, args, stdout, stderr)
}

// runBenchLive measures decision rounds of the real Nomad backend and service against the
// in-process fake Nomad API with injected latency.
func runBenchLive(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("bench live", stderr)
	nodes := fs.Int("nodes", 1280, "client nodes")
	per := fs.Int("gpus-per-node", 8, "GPUs per node")
	types := fs.Int("gpu-types", 4, fmt.Sprintf("GPU types, one per node in turn (1-%d: %s)", len(livebench.GPUNames), strings.Join(livebench.GPUNames, ", ")))
	pending := fs.Int("pending", 1024, "held groups submitted before each round (1, 2, 4, 8 GPUs with p = .70, .10, .15, .05)")
	running := fs.Int("running", 4000, "one-GPU allocations of pinned hetgpu jobs running throughout")
	latency := fs.Duration("latency", 2*time.Millisecond, "added to every Nomad API call during the rounds")
	rounds := fs.Int("rounds", 10, "measured rounds (after one warm-up round)")
	seed := fs.Uint64("seed", 1, "seed of the groups' sizes and models")
	asJSON := fs.Bool("json", false, "print one JSON object instead of the table")
	verbose := fs.Bool("v", false, "log each round to stderr")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the whole run (setup included) to this file")
	memProfile := fs.String("memprofile", "", "write a heap profile at the end to this file")
	setUsage(fs, benchLiveUsage+"\n\n"+
		"Runs the sidecar's real Nomad backend and service, with the production ranker, predictor and\n"+
		"placer, against an in-process fake of the Nomad HTTP API that adds --latency to every call, on a\n"+
		"cluster of --nodes x --gpus-per-node GPUs already running --running allocations; before each\n"+
		"round --pending held groups are submitted. Reports per phase p50/p99, calls per round, pins/s,\n"+
		"CPU and memory (the fake runs in the same process: its CPU and memory are included).")
	if err := parseFlags(fs, args, "hetgpu bench live", " (all options are flags)"); err != nil {
		return err
	}
	cfg := livebench.Config{Nodes: *nodes, GPUsPerNode: *per, GPUTypes: *types, Pending: *pending, Running: *running,
		Latency: *latency, Rounds: *rounds, Seed: *seed, Logger: hclog.New(&hclog.LoggerOptions{Name: "bench", Level: hclog.Warn, Output: stderr})}
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("%w: hetgpu bench live: %v", errUsage, err)
	}
	if *verbose {
		cfg.Progress = func(i int, r livebench.RoundStats) {
			fmt.Fprintf(stderr, "round %d: %v (service %v), %d/%d pins, %d calls, catch-up %v (%d calls), maintenance %v\n",
				i, r.Round.Round(time.Millisecond), r.Service.Round(time.Millisecond), r.Applied, r.Pins, r.Calls,
				r.CatchUp.Round(time.Millisecond), r.CatchUpCalls, r.Phases["maintenance"].Round(time.Millisecond))
		}
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return fmt.Errorf("--cpuprofile: %w", err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("--cpuprofile: %w", err)
		}
		defer pprof.StopCPUProfile()
	}
	if *memProfile != "" {
		f, err := os.Create(*memProfile)
		if err != nil {
			return fmt.Errorf("--memprofile: %w", err)
		}
		defer f.Close()
		cfg.HeapProfile = f
	}
	res, _, err := livebench.Run(ctx, cfg)
	if err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(stdout, res)
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	row := func(k, format string, v ...any) { fmt.Fprintf(tw, "%s\t"+format+"\n", append([]any{k}, v...)...) }
	row("cluster", "%d nodes x %d GPUs = %d GPUs, %d types; %d running allocations; %d pending groups per round",
		res.Nodes, *per, res.GPUs, res.GPUTypes, res.Running, res.Pending)
	row("API latency", "%.1f ms per call; %d measured rounds; setup %.1f s", res.LatencyMS, res.Rounds, res.SetupS)
	row("round", "p50 %.1f ms, p99 %.1f ms (snapshot to every pin issued)", res.RoundP50MS, res.RoundP99MS)
	row("service round", "p50 %.1f ms, p99 %.1f ms (maintenance, round, records)", res.ServiceP50, res.ServiceP99)
	for _, p := range livebench.Phases {
		q := res.Phases[p]
		row("  "+p, "p50 %.1f ms, p99 %.1f ms", q.P50, q.P99)
	}
	row("pins", "%.0f per round, %.0f pins/s", res.PinsPerRound, res.PinsPerSec)
	row("API calls", "%.0f per round (maintenance %.0f), then %.0f while the watcher catches up (p99 %.0f ms)",
		res.CallsPerRnd, res.MaintenanceCalls, res.CatchUpCalls, res.CatchUpP99MS)
	for _, k := range slices.Sorted(maps.Keys(res.CallsByRoute)) {
		row("  "+k, "%.0f", res.CallsByRoute[k])
	}
	row("full resync", "%.1f ms, %d calls (list APIs, nothing changed)", res.ResyncMS, res.ResyncCalls)
	row("CPU", "%.2f s per round (process: the fake's handlers included)", res.CPUPerRoundS)
	row("memory", "RSS %.0f MiB (peak %.0f MiB), Go heap in use %.0f MiB (the fake's state included)", res.RSSMB, res.PeakRSSMB, res.HeapMB)
	return tw.Flush()
}
