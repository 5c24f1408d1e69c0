package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/hashicorp/go-hclog"
	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	"github.com/hetgpu/hetgpu/sidecar/policies"
	"github.com/hetgpu/hetgpu/sidecar/sim"
	"github.com/hetgpu/hetgpu/sidecar/sim/report"
	"github.com/hetgpu/hetgpu/sidecar/trace"
)

func runSim(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("sim", stderr)
	clusterRef := fs.String("cluster", "modern-mix", "bundled cluster ("+strings.Join(sim.BundledClusters(), ", ")+") or HCL spec file; append :scale=F to scale node counts")
	traceRef := fs.String("trace", "bundled:default", "trace: FILE, bundled:NAME, synthetic:jobs=N,rate=JOBS_PER_HOUR[,seed=S], philly:FILE, helios:FILE, pai:JOBS,TASKS")
	policyList := fs.String("policies", "all", "comma-separated policies ("+strings.Join(policies.Names(), ", ")+") or all")
	seed := fs.Uint64("seed", 1, "seed for synthetic traces and randomised policies")
	outDir := fs.String("out", "", "directory for CSV, JSON and the HTML report with plots")
	asJSON := fs.Bool("json", false, "print a JSON array (one object per policy) instead of the table")
	parallel := fs.Int("parallel", 0, "policies simulated at once (0: one per CPU)")
	penalty := fs.Float64("restart-penalty", policies.DefaultRestartPenaltyS, "seconds of work a preempted job loses per restart (preemptive baselines)")
	logLevel := fs.String("log-level", "warn", "log level on stderr: trace, debug, info, warn, error")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: hetgpu sim [flags]\n\nReplays a trace on a simulated GPU cluster under each policy and compares them.\nBundled traces: %s\n\nFlags:\n", strings.Join(trace.BundledNames(), ", "))
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *penalty < 0 {
		return fmt.Errorf("%w: hetgpu sim --restart-penalty = %v, expected seconds >= 0", errUsage, *penalty)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: hetgpu sim: unexpected argument %q (all options are flags)", errUsage, fs.Arg(0))
	}
	names, err := policies.ParseList(*policyList)
	if err != nil {
		return fmt.Errorf("%w: hetgpu sim --policies: %v", errUsage, err)
	}
	level := hclog.LevelFromString(*logLevel)
	if level == hclog.NoLevel {
		return fmt.Errorf("%w: hetgpu sim --log-level = %q, expected trace, debug, info, warn or error", errUsage, *logLevel)
	}
	logger := hclog.New(&hclog.LoggerOptions{Name: "sim", Level: level, Output: stderr})

	opts := policies.CompareOptions{Cluster: *clusterRef, Trace: *traceRef, Policies: names, Seed: *seed,
		Parallel: *parallel, Logger: logger, RestartPenaltyS: *penalty}
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
	if *asJSON {
		if err := report.WriteJSON(stdout, cmp.Results); err != nil {
			return err
		}
	} else {
		st := cmp.Trace.Stats()
		fmt.Fprintf(stdout, "cluster %s (%d GPUs: %s), trace %s (%d jobs, %d multi-GPU, span %.1f h)\n\n",
			cmp.Spec.Name, cmp.Spec.TotalGPUs(), strings.Join(cmp.Spec.GPUTypes(), ", "), cmp.Trace.Name, st.Jobs, st.MultiGPU, st.SpanS/3600)
		if err := report.WriteTable(stdout, cmp.Results); err != nil {
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
