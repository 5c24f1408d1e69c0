package rltrain

import (
	"context"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/hashicorp/go-hclog"

	"github.com/hetgpu/hetgpu/model/throughput"
	"github.com/hetgpu/hetgpu/model/trace"
	"github.com/hetgpu/hetgpu/sidecar/backends/sim"
	"github.com/hetgpu/hetgpu/sidecar/policies"
	"github.com/hetgpu/hetgpu/sidecar/stages/rank"
)

// Heuristics are the queue-ordering baselines the bounded-slowdown target is measured against;
// SimBaselines the simulator issue's baselines for the JCT target.
var (
	Heuristics   = []string{"fifo", "sjf", "tiresias", "slurm", "f1"}
	SimBaselines = []string{"fifo", "sjf", "tiresias", "gavel", "rltune", "gogh"}
)

// HeldOutTraces are the bundled windows no training run uses.
func HeldOutTraces() []string {
	return []string{"bundled:heldout-0", "bundled:heldout-1", "bundled:heldout-2"}
}

// HeuristicVariant is the hetgpu pipeline with the fallback heuristic ranker instead of the
// learned one, to show what the learned ranking adds (a registered simulator policy now,
// policies.HetgpuHeuristic).
const HeuristicVariant = policies.HetgpuHeuristic

// EvalOptions configure an evaluation.
type EvalOptions struct {
	// Policies are registered names (HeuristicVariant among them).
	Clusters, Traces, Policies []string
	// Policy, when set, is the prioritiser "hetgpu" runs instead of the bundled one.
	Policy   *rank.Policy
	Seed     uint64
	Parallel int
	Logger   hclog.Logger
	// EstimateReplay: how runtime estimates are replayed (sim.Config).
	sim.EstimateReplay
	// Progress gets (cluster index, trace index) before each comparison.
	Progress func(c, t int)
	// Starvation is the hetgpu rankers' starvation guard (policies.Options.Starvation; 0 off).
	Starvation float64
}

// Pooled are one policy's figures over every job of every held-out trace on one cluster.
type Pooled struct {
	Policy        string  `json:"policy"`
	Jobs          int     `json:"jobs"`
	Unfinished    int     `json:"unfinished"`
	AvgJCTS       float64 `json:"avg_jct_s"`
	AvgQueueS     float64 `json:"avg_queue_s"`
	BSLD          float64 `json:"bounded_slowdown"`
	Util          float64 `json:"gpu_util"`
	EnergyKWh     float64 `json:"energy_kwh"`
	EnergyPerWork float64 `json:"energy_per_work_kwh"`
}

// Target is one checked target.
type Target struct {
	Cluster string  `json:"cluster"`
	Name    string  `json:"name"`
	Value   float64 `json:"value"`
	Limit   float64 `json:"limit"`
	Against string  `json:"against"`
	Met     bool    `json:"met"`
}

// ClusterEval is the evaluation on one cluster.
type ClusterEval struct {
	Cluster  string                   `json:"cluster"`
	PerTrace map[string][]*sim.Result `json:"per_trace"`
	Pooled   []Pooled                 `json:"pooled"`
	Targets  []Target                 `json:"targets"`
}

// Eval is a full evaluation.
type Eval struct {
	Traces   []string      `json:"traces"`
	Clusters []ClusterEval `json:"clusters"`
	// Regime is the estimate regime the evaluation replayed (rank.RegimeEstimates, ...).
	Regime string `json:"regime,omitempty"`
	// PolicyVerdicts are the held-out verdicts per regime stored in the evaluated policy's
	// checkpoint (what the sidecar chooses by), shown beside this evaluation's own figures.
	PolicyVerdicts rank.Verdicts `json:"policy_verdicts,omitempty"`
}

// RegimeOfReplay is the estimate regime a replay stands for: none, partial (any share) or
// estimates (every job carries one, however the errors are modelled).
func RegimeOfReplay(r sim.EstimateReplay) string {
	switch {
	case r.NoEstimates:
		return rank.RegimeNone
	case r.PartialEstimates > 0:
		return rank.RegimePartial
	}
	return rank.RegimeEstimates
}

// Evaluate runs every policy on every (cluster, trace) pair and checks the targets.
func Evaluate(ctx context.Context, o EvalOptions) (*Eval, error) {
	if o.Logger == nil {
		o.Logger = hclog.NewNullLogger()
	}
	out := &Eval{Traces: o.Traces}
	for ci, c := range o.Clusters {
		ce := ClusterEval{Cluster: c, PerTrace: map[string][]*sim.Result{}}
		acc := map[string]*poolAcc{}
		for ti, t := range o.Traces {
			if o.Progress != nil {
				o.Progress(ci, ti)
			}
			cmp, err := o.compare(ctx, c, t)
			if err != nil {
				return nil, fmt.Errorf("cluster %s, trace %s: %w", c, t, err)
			}
			ce.PerTrace[t] = cmp.Results
			for _, r := range cmp.Results {
				a := acc[r.Policy]
				if a == nil {
					a = &poolAcc{}
					acc[r.Policy] = a
				}
				a.add(r, cmp.Spec.TotalGPUs())
			}
		}
		for _, p := range o.Policies {
			if a := acc[p]; a != nil {
				ce.Pooled = append(ce.Pooled, a.pooled(p))
			}
		}
		ce.Targets = targets(c, ce.Pooled)
		out.Clusters = append(out.Clusters, ce)
	}
	return out, nil
}

// comparison is one (cluster, trace) run of every policy.
type comparison struct {
	Spec    *sim.Spec
	Results []*sim.Result
}

func (o EvalOptions) compare(ctx context.Context, cluster, traceRef string) (*comparison, error) {
	tab, err := throughput.Bundled()
	if err != nil {
		return nil, fmt.Errorf("throughput table: %w", err)
	}
	spec, err := sim.LoadSpec(cluster)
	if err != nil {
		return nil, err
	}
	tr, err := trace.Load(traceRef, sim.TraceOptions(tab, o.Seed))
	if err != nil {
		return nil, err
	}
	ps := make([]*sim.PipelinePolicy, 0, len(o.Policies))
	for _, name := range o.Policies {
		po := policies.Options{Spec: spec, Throughput: tab, Seed: o.Seed, Logger: o.Logger.Named(name), Starvation: o.Starvation}
		var p *sim.PipelinePolicy
		switch {
		case name == "hetgpu" && o.Policy != nil:
			r, err := rank.New(o.Policy, rank.WithExplain(false), rank.WithHeuristic(rank.Heuristic{Starvation: o.Starvation}))
			if err != nil {
				return nil, err
			}
			if p, err = policies.HetgpuPipeline(po, r); err != nil {
				return nil, err
			}
		default:
			if p, err = policies.New(name, po); err != nil {
				return nil, err
			}
		}
		ps = append(ps, p)
	}
	res, err := sim.SimulateAll(ctx, sim.Setup{Spec: spec, Throughput: tab, Trace: tr, Logger: o.Logger,
		RestartPenaltyS: policies.DefaultRestartPenaltyS, NoSeries: true, EstimateReplay: o.EstimateReplay}, ps, o.Parallel, nil)
	if err != nil {
		return nil, err
	}
	return &comparison{Spec: spec, Results: res}, nil
}

type poolAcc struct {
	jobs, unfinished                       int
	jct, queue, bsld, busy, cap, kwh, work float64
}

func (a *poolAcc) add(r *sim.Result, gpus int) {
	n := float64(r.Jobs)
	a.jobs += r.Jobs
	a.unfinished += r.Unfinished
	a.jct += r.AvgJCTS * n
	a.queue += r.AvgQueueS * n
	a.bsld += r.BoundedSlowdown * n
	a.busy += r.GPUUtil * float64(gpus) * r.MakespanS
	a.cap += float64(gpus) * r.MakespanS
	a.kwh += r.EnergyKWh
	if r.EnergyPerWork > 0 {
		a.work += r.EnergyKWh / r.EnergyPerWork
	}
}

func (a *poolAcc) pooled(name string) Pooled {
	p := Pooled{Policy: name, Jobs: a.jobs, Unfinished: a.unfinished, EnergyKWh: a.kwh}
	if a.jobs > 0 {
		n := float64(a.jobs)
		p.AvgJCTS, p.AvgQueueS, p.BSLD = a.jct/n, a.queue/n, a.bsld/n
	}
	if a.cap > 0 {
		p.Util = a.busy / a.cap
	}
	if a.work > 0 {
		p.EnergyPerWork = a.kwh / a.work
	}
	return p
}

// targets checks the targets for policy "hetgpu" against the pooled figures.
func targets(cluster string, ps []Pooled) []Target {
	get := func(name string) (Pooled, bool) {
		for _, p := range ps {
			if p.Policy == name {
				return p, true
			}
		}
		return Pooled{}, false
	}
	h, ok := get("hetgpu")
	if !ok {
		return nil
	}
	best := func(names []string, f func(Pooled) float64) (float64, string) {
		v, who := math.Inf(1), ""
		for _, n := range names {
			if p, ok := get(n); ok && f(p) < v {
				v, who = f(p), n
			}
		}
		return v, who
	}
	var out []Target
	bs, who := best(Heuristics, func(p Pooled) float64 { return p.BSLD })
	if who != "" {
		out = append(out, Target{cluster, "bounded slowdown <= 0.90 x best heuristic", h.BSLD, 0.9 * bs, who, h.BSLD <= 0.9*bs})
	}
	if f, ok := get("fifo"); ok {
		out = append(out, Target{cluster, "avg JCT <= 0.30 x FIFO", h.AvgJCTS, 0.3 * f.AvgJCTS, "fifo", h.AvgJCTS <= 0.3*f.AvgJCTS})
		out = append(out, Target{cluster, "energy per work <= 0.85 x FIFO", h.EnergyPerWork, 0.85 * f.EnergyPerWork, "fifo", h.EnergyPerWork <= 0.85*f.EnergyPerWork})
	}
	bj, who := best(SimBaselines, func(p Pooled) float64 { return p.AvgJCTS })
	if who != "" {
		out = append(out, Target{cluster, "avg JCT <= 0.85 x best simulator baseline", h.AvgJCTS, 0.85 * bj, who, h.AvgJCTS <= 0.85*bj})
	}
	if h.Unfinished > 0 {
		out = append(out, Target{cluster, "every job finishes", float64(h.Unfinished), 0, "", false})
	}
	return out
}

// WriteTable prints the pooled comparison and the targets, then the evaluated policy's stored
// held-out verdicts per regime.
func (e *Eval) WriteTable(w io.Writer) error {
	if err := e.writeClusters(w); err != nil {
		return err
	}
	if e.Regime != "" {
		fmt.Fprintf(w, "estimate regime of this evaluation: %s\n", e.Regime)
	}
	if e.PolicyVerdicts != nil {
		fmt.Fprintln(w, "held-out verdicts stored in the policy (learned vs heuristic), per estimate regime:")
		for _, r := range rank.Regimes() {
			v := e.PolicyVerdicts[r]
			if v == nil {
				fmt.Fprintf(w, "  %-9s  none recorded (hetgpu train verdict --estimates ...)\n", r)
				continue
			}
			est := v.Estimates
			if est == "" {
				est = "scaled"
			}
			fmt.Fprintf(w, "  %-9s  (--estimates %s) %s\n", r, est, v)
		}
	}
	return nil
}

func (e *Eval) writeClusters(w io.Writer) error {
	for _, c := range e.Clusters {
		fmt.Fprintf(w, "cluster %s, held-out traces %s (pooled over all their jobs)\n\n", c.Cluster, strings.Join(e.Traces, ", "))
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "policy\tjobs\tavg JCT h\tavg wait h\tBSLD\tGPU util\tkWh/V100-h\tJCT/FIFO\t")
		var fifo float64
		for _, p := range c.Pooled {
			if p.Policy == "fifo" {
				fifo = p.AvgJCTS
			}
		}
		for _, p := range c.Pooled {
			rel := "-"
			if fifo > 0 {
				rel = fmt.Sprintf("%.2f", p.AvgJCTS/fifo)
			}
			fmt.Fprintf(tw, "%s\t%d\t%.2f\t%.2f\t%.2f\t%.1f%%\t%.3f\t%s\t\n", p.Policy, p.Jobs, p.AvgJCTS/3600, p.AvgQueueS/3600,
				p.BSLD, 100*p.Util, p.EnergyPerWork, rel)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		fmt.Fprintln(w)
		for _, t := range c.Targets {
			mark := "MISSED"
			if t.Met {
				mark = "met"
			}
			v, l, unit := t.Value, t.Limit, ""
			if strings.Contains(t.Name, "JCT") {
				v, l, unit = v/3600, l/3600, " h"
			}
			fmt.Fprintf(w, "  %-6s %-45s hetgpu %.4g%s vs limit %.4g%s (%s)\n", mark, t.Name, v, unit, l, unit, t.Against)
		}
		// Per-trace detail for the most important columns.
		fmt.Fprintln(w)
		traces := make([]string, 0, len(c.PerTrace))
		for t := range c.PerTrace {
			traces = append(traces, t)
		}
		slices.Sort(traces)
		for _, t := range traces {
			fmt.Fprintf(w, "  %s:", t)
			for _, r := range c.PerTrace[t] {
				fmt.Fprintf(w, " %s JCT %.2fh BSLD %.1f;", r.Policy, r.AvgJCTS/3600, r.BoundedSlowdown)
			}
			fmt.Fprintln(w)
		}
		fmt.Fprintln(w)
	}
	return nil
}

// VerdictPolicies are the two policies a held-out verdict compares.
func VerdictPolicies() []string { return []string{"hetgpu", HeuristicVariant} }

// HeldOutVerdict judges the learned order against the fallback heuristic from an evaluation of
// VerdictPolicies: the learned/heuristic ratios of average JCT and mean bounded slowdown, pooled
// per cluster and per window (rank.JudgeVerdict). It is deterministic given the evaluation.
func HeldOutVerdict(ev *Eval, seed uint64, pooledMax, windowMax float64) (*rank.Verdict, error) {
	var ratios []rank.VerdictRatio
	var clusters []string
	for _, c := range ev.Clusters {
		clusters = append(clusters, c.Cluster)
		var learned, heur *Pooled
		for i := range c.Pooled {
			switch c.Pooled[i].Policy {
			case "hetgpu":
				learned = &c.Pooled[i]
			case HeuristicVariant:
				heur = &c.Pooled[i]
			}
		}
		if learned == nil || heur == nil {
			return nil, fmt.Errorf("verdict: cluster %s: the evaluation lacks %s, expected both", c.Cluster, strings.Join(VerdictPolicies(), " and "))
		}
		ratios = append(ratios, rank.VerdictRatio{Cluster: c.Cluster, Metric: "jct", Ratio: learned.AvgJCTS / heur.AvgJCTS},
			rank.VerdictRatio{Cluster: c.Cluster, Metric: "bsld", Ratio: learned.BSLD / heur.BSLD})
		for _, t := range ev.Traces {
			var l, h *sim.Result
			for _, r := range c.PerTrace[t] {
				switch r.Policy {
				case "hetgpu":
					l = r
				case HeuristicVariant:
					h = r
				}
			}
			if l == nil || h == nil {
				return nil, fmt.Errorf("verdict: cluster %s, trace %s: the evaluation lacks %s, expected both", c.Cluster, t, strings.Join(VerdictPolicies(), " and "))
			}
			name := strings.TrimPrefix(t, "bundled:")
			ratios = append(ratios, rank.VerdictRatio{Cluster: c.Cluster, Trace: name, Metric: "jct", Ratio: l.AvgJCTS / h.AvgJCTS},
				rank.VerdictRatio{Cluster: c.Cluster, Trace: name, Metric: "bsld", Ratio: l.BoundedSlowdown / h.BoundedSlowdown})
		}
	}
	v, err := rank.JudgeVerdict(ratios, pooledMax, windowMax)
	if err != nil {
		return nil, err
	}
	v.Clusters, v.Traces, v.Seed = strings.Join(clusters, ","), strings.Join(ev.Traces, ","), fmt.Sprint(seed)
	return v, nil
}
