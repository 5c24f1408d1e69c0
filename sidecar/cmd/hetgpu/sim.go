package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/hashicorp/go-hclog"
	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	"github.com/hetgpu/hetgpu/model/cluster"
	"github.com/hetgpu/hetgpu/model/throughput"
	"github.com/hetgpu/hetgpu/model/trace"
	"github.com/hetgpu/hetgpu/sidecar/backends/sim"
	"github.com/hetgpu/hetgpu/sidecar/backends/sim/report"
	"github.com/hetgpu/hetgpu/sidecar/policies"
	"github.com/hetgpu/hetgpu/sidecar/runtime/app"
	"github.com/hetgpu/hetgpu/sidecar/stages/rank"
)

func runSim(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("sim", stderr)
	clusterRef := fs.String("cluster", "modern-mix", "bundled cluster ("+strings.Join(sim.BundledClusters(), ", ")+") or HCL spec file; append :scale=F to scale node counts")
	traceRef := fs.String("trace", "bundled:default", "trace: FILE, bundled:NAME, synthetic:jobs=N,rate=JOBS_PER_HOUR[,seed=S], philly:FILE, helios:FILE, pai:JOBS,TASKS")
	policyList := fs.String("policies", "all", "comma-separated policies ("+strings.Join(policies.Names(), ", ")+") or all (every one but "+policies.HetgpuHeuristic+" and "+policies.HetgpuOracle+")")
	seed := fs.Uint64("seed", 1, "seed for synthetic traces and randomised policies")
	outDir := fs.String("out", "", "directory for CSV, JSON and the HTML report with plots")
	asJSON := fs.Bool("json", false, "print a JSON array (one object per policy) instead of the table")
	parallel := fs.Int("parallel", 0, "policies simulated at once (0: one per CPU)")
	penalty := fs.Float64("restart-penalty", policies.DefaultRestartPenaltyS, "seconds of work a preempted job loses per restart (preemptive baselines)")
	compare := addCompareFlags(fs)
	logLevel := fs.String("log-level", "warn", "log level on stderr: trace, debug, info, warn, error")
	queues := fs.String("queues", "", "queues for the hetgpu policies: auto (one per namespace, guarantees splitting 80 % of the cluster by demand), auto:F, or an HCL file of queue blocks; reports per queue")
	setUsage(fs, fmt.Sprintf("Usage: hetgpu sim [flags]\n\nReplays a trace on a simulated GPU cluster under each policy and compares them.\nBundled traces: %s", strings.Join(trace.BundledNames(), ", ")))
	if err := fs.Parse(args); err != nil {
		return err
	}
	replay, starvation, err := compare.read("hetgpu sim")
	if err != nil {
		return err
	}
	if !(*penalty >= 0 && *penalty <= maxRestartPenaltyS) {
		return fmt.Errorf("%w: hetgpu sim --restart-penalty = %v, expected seconds from 0 to %d (a day)", errUsage, *penalty, maxRestartPenaltyS)
	}
	if *parallel < 0 || *parallel > 1024 {
		return fmt.Errorf("%w: hetgpu sim --parallel = %d, expected 0 (one per CPU) to 1024", errUsage, *parallel)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: hetgpu sim: unexpected argument %q (all options are flags)", errUsage, fs.Arg(0))
	}
	names, err := policies.ParseList(*policyList)
	if err != nil {
		return fmt.Errorf("%w: hetgpu sim --policies: %v", errUsage, err)
	}
	spec, err := sim.LoadSpec(*clusterRef)
	if err != nil {
		return fmt.Errorf("--cluster: %w", err)
	}
	engines := len(names)
	if p := *parallel; p == 0 && runtime.NumCPU() < engines {
		engines = runtime.NumCPU()
	} else if p > 0 && p < engines {
		engines = p
	}
	if need, avail := simMemory(spec.TotalGPUs(), engines), availableMemory(); need > avail/2 {
		return fmt.Errorf("%w: hetgpu sim --cluster %s: %d GPUs would need about %.1f GiB (%d KiB per GPU x %d engines at once), more than half of the %.1f GiB available; use a smaller :scale",
			errUsage, *clusterRef, spec.TotalGPUs(), float64(need)/(1<<30), simBytesPerGPU>>10, engines, float64(avail)/(1<<30))
	}
	level := hclog.LevelFromString(*logLevel)
	if level == hclog.NoLevel {
		return fmt.Errorf("%w: hetgpu sim --log-level = %q, expected trace, debug, info, warn or error", errUsage, *logLevel)
	}
	logger := hclog.New(&hclog.LoggerOptions{Name: "sim", Level: level, Output: stderr})

	opts := policies.CompareOptions{Cluster: *clusterRef, Trace: *traceRef, Policies: names, Seed: *seed,
		Parallel: *parallel, Logger: logger, RestartPenaltyS: *penalty, Queues: *queues,
		EstimateReplay: replay, Starvation: starvation}
	if f, ok := stdout.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		var mu sync.Mutex
		var bar *progressbar.ProgressBar
		done := make([]int, len(names))
		opts.Progress = func(i, n int) {
			mu.Lock()
			defer mu.Unlock()
			if i < 0 {
				bar = progressbar.NewOptions(n*len(names), progressbar.OptionSetWriter(stderr),
					progressbar.OptionSetDescription("simulating "+strings.Join(names, ",")),
					progressbar.OptionShowCount(), progressbar.OptionClearOnFinish(), progressbar.OptionThrottle(100_000_000))
				return
			}
			if bar != nil && n > done[i] {
				_ = bar.Add(n - done[i])
				done[i] = n
			}
		}
		defer func() {
			if bar != nil {
				_ = bar.Finish()
			}
		}()
	}
	cmp, err := policies.Compare(ctx, opts)
	if err != nil {
		return err
	}
	unsched := unschedulable(cmp)
	if *asJSON {
		if err := report.WriteJSON(stdout, cmp.Results); err != nil {
			return err
		}
		if unsched != "" {
			fmt.Fprintln(stderr, unsched)
		}
	} else {
		st := cmp.Trace.Stats()
		fmt.Fprintf(stdout, "cluster %s (%d GPUs: %s), trace %s (%d jobs, %d multi-GPU, span %.1f h)\n\n",
			cmp.Spec.Name, cmp.Spec.TotalGPUs(), strings.Join(cmp.Spec.GPUTypes(), ", "), cmp.Trace.Name, st.Jobs, st.MultiGPU, st.SpanS/3600)
		if err := report.WriteTable(stdout, cmp.Results); err != nil {
			return err
		}
		if unsched != "" {
			fmt.Fprintf(stdout, "\n%s\n", unsched)
		}
		if err := report.WriteQueues(stdout, cmp.Results); err != nil {
			return err
		}
	}
	if *outDir != "" {
		if err := report.WriteDir(*outDir, report.Meta{Cluster: cmp.Spec, Trace: cmp.Trace, Seed: *seed}, cmp.Results); err != nil {
			return err
		}
		abs, _ := filepath.Abs(filepath.Join(*outDir, "index.html"))
		w := stdout
		if *asJSON {
			w = stderr
		}
		fmt.Fprintf(w, "\nreport: %s\n", abs)
	}
	return nil
}

// The --estimates values: how the runtime estimates of the policies that see noisy ones are
// replayed (sim.EstimateReplay).
const (
	estimatesScaled = "scaled"
	estimatesLive   = "live"
	estimatesAuto   = "auto"
	estimatesNone   = "none"
	estimatesPart   = "partial"
	estimatesUsage  = "runtime estimates of the policies that use them: scaled (each job's remaining runtime times its fixed error factor), live (its whole runtime times the factor, read as the live sidecar reads hetgpu.runtime: minus the time it has run), live:SIGMA (the sidecar with ranker.estimate_error = SIGMA), live:auto or live:auto:SIGMA (the sidecar learning the estimates' error from finished jobs, ranker.calibrate_estimates, from SIGMA, default 0.5), none (no job carries hetgpu.runtime), partial:F (a seeded share F of namespaces, or of jobs in a trace with one namespace, carries one, scaled; the rest none)"
	skewUsage       = "users' habit: median of estimate / true runtime, scaling every noisy estimate (1: unbiased, 2: users ask for twice what their jobs take)"
	spreadUsage     = "how much teams' habits differ: each namespace's estimates are further scaled by exp(S x z), z ~ N(0, 1) fixed per namespace (0: every team alike)"
	stepsUsage      = "jobs declare hetgpu.steps, their total work, as a user who knows epochs x steps would"
	starvationUsage = "the hetgpu rankers' starvation guard: a job that waited more than this many times its expected runtime is boosted (the sidecar's ranker.starvation; 0 off, else above 1)"
)

// estimateFlags are the --estimates and --estimate-skew flags of the commands that simulate.
type estimateFlags struct {
	mode         *string
	skew, spread *float64
	steps        *bool
}

func addEstimateFlags(fs *flag.FlagSet) estimateFlags {
	return estimateFlags{mode: fs.String("estimates", estimatesScaled, estimatesUsage), skew: fs.Float64("estimate-skew", 1, skewUsage),
		spread: fs.Float64("estimate-skew-spread", 0, spreadUsage), steps: fs.Bool("steps", false, stepsUsage)}
}

// guardFlag is the --starvation flag of the commands that compare policies.
type guardFlag struct{ k *float64 }

func addGuardFlag(fs *flag.FlagSet) guardFlag {
	return guardFlag{fs.Float64("starvation", rank.DefaultStarvation, starvationUsage)}
}

// value reads --starvation; errors name cmd, the flag, the value and what is expected.
func (f guardFlag) value(cmd string) (float64, error) {
	if err := rank.ValidStarvation(*f.k); err != nil {
		return 0, fmt.Errorf("%w: %s --starvation: %v", errUsage, cmd, err)
	}
	return *f.k, nil
}

// compareFlags are the flags of the commands that compare policies on simulated replays:
// how runtime estimates are replayed and the hetgpu rankers' starvation guard.
type compareFlags struct {
	estimates estimateFlags
	guard     guardFlag
}

func addCompareFlags(fs *flag.FlagSet) compareFlags {
	return compareFlags{estimates: addEstimateFlags(fs), guard: addGuardFlag(fs)}
}

// read reads the estimate replay and the starvation guard; errors name cmd, the flag, the
// value and what is expected.
func (f compareFlags) read(cmd string) (sim.EstimateReplay, float64, error) {
	replay, err := f.estimates.replay(cmd)
	if err != nil {
		return replay, 0, err
	}
	starvation, err := f.guard.value(cmd)
	return replay, starvation, err
}

// replay reads the flags; errors name cmd, the flag, the value and what is expected.
func (f estimateFlags) replay(cmd string) (sim.EstimateReplay, error) {
	r, err := parseEstimates(cmd, *f.mode)
	if err != nil {
		return r, err
	}
	k := *f.skew
	if !(k >= 0.05 && k <= 20) {
		return r, fmt.Errorf("%w: %s --estimate-skew = %v, expected a factor from 0.05 to 20 (median estimate / true runtime)", errUsage, cmd, k)
	}
	if k != 1 {
		r.EstimateSkew = k
	}
	sp := *f.spread
	if !(sp >= 0 && sp <= cluster.MaxEstimateSigma) {
		return r, fmt.Errorf("%w: %s --estimate-skew-spread = %v, expected 0 to %d (sigma of log habit between namespaces)", errUsage, cmd, sp, cluster.MaxEstimateSigma)
	}
	r.EstimateSkewSpread = sp
	r.DeclareSteps = *f.steps
	return r, nil
}

// parseEstimates reads an --estimates value.
func parseEstimates(cmd, v string) (sim.EstimateReplay, error) {
	sigma := func(s string) (float64, bool) {
		f, err := strconv.ParseFloat(s, 64)
		return f, err == nil && f >= 0 && f <= cluster.MaxEstimateSigma
	}
	mode, rest, ok := strings.Cut(v, ":")
	switch {
	case v == estimatesScaled:
		return sim.EstimateReplay{}, nil
	case v == estimatesNone:
		return sim.EstimateReplay{NoEstimates: true}, nil
	case mode == estimatesPart && ok:
		if f, err := strconv.ParseFloat(rest, 64); err == nil && f > 0 && f < 1 {
			return sim.EstimateReplay{PartialEstimates: f}, nil
		}
		return sim.EstimateReplay{}, fmt.Errorf("%w: %s --estimates = %q, expected %s:F with F a share of namespaces above 0 and below 1", errUsage, cmd, v, estimatesPart)
	case mode == estimatesLive && !ok:
		return sim.EstimateReplay{LiveEstimates: true}, nil
	case mode == estimatesLive && rest == estimatesAuto:
		return sim.EstimateReplay{LiveEstimates: true, CalibrateEstimates: true, EstimateError: app.DefaultEstimateError}, nil
	case mode == estimatesLive && strings.HasPrefix(rest, estimatesAuto+":"):
		if f, ok := sigma(strings.TrimPrefix(rest, estimatesAuto+":")); ok {
			return sim.EstimateReplay{LiveEstimates: true, CalibrateEstimates: true, EstimateError: f}, nil
		}
	case mode == estimatesLive:
		if f, ok := sigma(rest); ok {
			return sim.EstimateReplay{LiveEstimates: true, EstimateError: f}, nil
		}
	}
	return sim.EstimateReplay{}, fmt.Errorf("%w: %s --estimates = %q, expected %s, %s, %s:SIGMA, %s:%s, %s:%s:SIGMA (SIGMA from 0 to %d), %s or %s:F", errUsage, cmd, v,
		estimatesScaled, estimatesLive, estimatesLive, estimatesLive, estimatesAuto, estimatesLive, estimatesAuto, cluster.MaxEstimateSigma, estimatesNone, estimatesPart)
}

// maxRestartPenaltyS bounds --restart-penalty: more than a day of lost work per restart is a
// typo, not a scenario.
const maxRestartPenaltyS = 86400

// simBytesPerGPU is what one engine holds per simulated GPU, with room to spare: measured
// 0.7 KiB (fifo) to 1.8 KiB (hetgpu, snapshots and the MILP) on modern-mix x100.
const simBytesPerGPU = 4 << 10

func simMemory(gpus, engines int) int64 { return int64(gpus) * simBytesPerGPU * int64(max(engines, 1)) }

// availableMemory is MemAvailable from /proc/meminfo; 8 GiB where it cannot be read.
func availableMemory() int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if rest, ok := strings.CutPrefix(line, "MemAvailable:"); ok {
				var kb int64
				if _, err := fmt.Sscanf(strings.TrimSpace(rest), "%d kB", &kb); err == nil && kb > 0 {
					return kb << 10
				}
			}
		}
	}
	return 8 << 30
}

// unschedulable names the trace's jobs no GPU type of the cluster can run, by reason: an
// unknown job type (no throughput for it anywhere), or more GPUs than the cluster has.
func unschedulable(cmp *policies.Comparison) string {
	n := 0
	for _, r := range cmp.Results {
		n = max(n, r.Unschedulable)
	}
	if n == 0 {
		return ""
	}
	tab, err := throughput.Bundled()
	if err != nil {
		return fmt.Sprintf("unschedulable: %d jobs (no GPU type of the cluster can run them)", n)
	}
	known := map[string]bool{}
	for _, jt := range tab.JobTypes() {
		known[jt] = true
	}
	unknown := map[string]int{}
	tooBig := 0
	for _, j := range cmp.Trace.Jobs {
		switch {
		case !known[j.JobType]:
			unknown[j.JobType]++
		case j.GPUs > cmp.Spec.TotalGPUs():
			tooBig++
		}
	}
	var parts []string
	if len(unknown) > 0 {
		types := make([]string, 0, len(unknown))
		for t := range unknown {
			types = append(types, t)
		}
		sort.Strings(types)
		for i, t := range types {
			if i == 8 {
				types = append(types[:8], fmt.Sprintf("and %d more", len(unknown)-8))
				break
			}
			types[i] = fmt.Sprintf("%q x%d", t, unknown[t])
		}
		parts = append(parts, "unknown job types "+strings.Join(types, ", "))
	}
	if tooBig > 0 {
		parts = append(parts, fmt.Sprintf("%d need more GPUs than the cluster has", tooBig))
	}
	if len(parts) == 0 {
		parts = append(parts, "out of memory on every GPU type")
	}
	return fmt.Sprintf("unschedulable: %d jobs, left out of the metrics: %s", n, strings.Join(parts, "; "))
}
