package rltrain

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/hashicorp/go-hclog"

	"github.com/hetgpu/hetgpu/internal/parallel"
	"github.com/hetgpu/hetgpu/model/throughput"
	"github.com/hetgpu/hetgpu/model/trace"
	"github.com/hetgpu/hetgpu/sidecar/backends/sim"
	"github.com/hetgpu/hetgpu/sidecar/policies"
	"github.com/hetgpu/hetgpu/sidecar/stages/rank"
)

// ValidationTraces are the bundled windows that choose which trained policy training keeps: from
// virtual clusters neither the training nor the held-out windows use, so the held-out verdict
// stays a test that no training decision saw.
func ValidationTraces() []string {
	var out []string
	for _, w := range trace.ValidateWindows() {
		out = append(out, "bundled:"+w)
	}
	return out
}

// DefaultValidateTop is how many of the best greedy-evaluated epochs are validated.
const DefaultValidateTop = 3

// Validator judges candidate policies against the fallback heuristic on validation windows,
// with the held-out verdict's rule (HeldOutVerdict): every (cluster, window) pair replays the
// same jobs under both orders (common random numbers), and the heuristic's run is simulated
// once and shared by every candidate.
type Validator struct {
	Clusters, Traces []string
	Seed             uint64
	Workers          int
	Logger           hclog.Logger
	// EstimateReplay is the regime both orders are replayed in.
	EstimateReplay sim.EstimateReplay

	tab   *throughput.Table
	specs []*sim.Spec
	trs   []*trace.Trace
	// heur[c*len(Traces)+t] is the heuristic's result on cluster c, window t.
	heur []*sim.Result
}

// NewValidator loads the clusters and windows and simulates the heuristic on each pair.
func NewValidator(ctx context.Context, clusters, traces []string, seed uint64, workers int, logger hclog.Logger, replay sim.EstimateReplay) (*Validator, error) {
	if len(clusters) == 0 || len(traces) == 0 {
		return nil, fmt.Errorf("validation: %d clusters and %d traces, expected at least one of each", len(clusters), len(traces))
	}
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	tab, err := throughput.Bundled()
	if err != nil {
		return nil, fmt.Errorf("throughput table: %w", err)
	}
	v := &Validator{Clusters: clusters, Traces: traces, Seed: seed, Workers: workers, Logger: logger, tab: tab, EstimateReplay: replay}
	for _, c := range clusters {
		spec, err := sim.LoadSpec(c)
		if err != nil {
			return nil, fmt.Errorf("validation cluster: %w", err)
		}
		v.specs = append(v.specs, spec)
	}
	for _, t := range traces {
		tr, err := trace.Load(t, sim.TraceOptions(tab, seed))
		if err != nil {
			return nil, fmt.Errorf("validation trace: %w", err)
		}
		v.trs = append(v.trs, tr)
	}
	v.heur, err = v.simulate(ctx, func(po policies.Options) (*sim.PipelinePolicy, error) { return policies.New(HeuristicVariant, po) })
	if err != nil {
		return nil, fmt.Errorf("validation: %s: %w", HeuristicVariant, err)
	}
	return v, nil
}

// simulate runs the policy build makes on every (cluster, window) pair, Workers at a time;
// results are in pair order whatever the parallelism.
func (v *Validator) simulate(ctx context.Context, build func(policies.Options) (*sim.PipelinePolicy, error)) ([]*sim.Result, error) {
	n := len(v.specs) * len(v.trs)
	out := make([]*sim.Result, n)
	errs := make([]error, n)
	parallel.For(n, max(1, v.Workers), func(i int) {
		spec, tr := v.specs[i/len(v.trs)], v.trs[i%len(v.trs)]
		p, err := build(policies.Options{Spec: spec, Throughput: v.tab, Seed: v.Seed, Logger: v.Logger})
		if err != nil {
			errs[i] = err
			return
		}
		out[i], errs[i] = sim.Simulate(ctx, sim.Setup{Spec: spec, Throughput: v.tab, Trace: tr, Logger: v.Logger,
			RestartPenaltyS: policies.DefaultRestartPenaltyS, NoSeries: true, EstimateReplay: v.EstimateReplay}, p, nil)
		if errs[i] != nil {
			errs[i] = fmt.Errorf("cluster %s, trace %s: %w", spec.Name, tr.Name, errs[i])
		}
	})
	return out, errors.Join(errs...)
}

// Judge compares p with the heuristic on every validation pair and returns the verdict with
// the given thresholds (see rank.JudgeVerdict).
func (v *Validator) Judge(ctx context.Context, p *rank.Policy, pooledMax, windowMax float64) (*rank.Verdict, error) {
	learned, err := v.simulate(ctx, func(po policies.Options) (*sim.PipelinePolicy, error) {
		r, err := rank.New(p, rank.WithExplain(false))
		if err != nil {
			return nil, err
		}
		return policies.HetgpuPipeline(po, r)
	})
	if err != nil {
		return nil, fmt.Errorf("validation: %w", err)
	}
	ev := &Eval{Traces: v.Traces}
	for c, spec := range v.specs {
		ce := ClusterEval{Cluster: v.Clusters[c], PerTrace: map[string][]*sim.Result{}}
		acc := map[string]*poolAcc{"hetgpu": {}, HeuristicVariant: {}}
		for t, name := range v.Traces {
			l, h := learned[c*len(v.trs)+t], v.heur[c*len(v.trs)+t]
			ce.PerTrace[name] = []*sim.Result{l, h}
			acc["hetgpu"].add(l, spec.TotalGPUs())
			acc[HeuristicVariant].add(h, spec.TotalGPUs())
		}
		for _, name := range VerdictPolicies() {
			ce.Pooled = append(ce.Pooled, acc[name].pooled(name))
		}
		ev.Clusters = append(ev.Clusters, ce)
	}
	verdict, err := HeldOutVerdict(ev, v.Seed, pooledMax, windowMax)
	if err != nil {
		return nil, fmt.Errorf("validation: %w", err)
	}
	verdict.Traces = strings.Join(v.Traces, ",")
	return verdict, nil
}

// selectValidated returns the checkpoint training keeps when validation traces are set: of the
// ValidateTop evaluated epochs with the best greedy reward above 0 (better than the baseline on
// the training evaluation episodes), the one whose validation verdict beats the heuristic with
// the lowest worst pooled ratio. When none beats it, a residual run keeps start (exactly the
// heuristic's order) and any other run its best evaluated epoch. The choice and every
// candidate's verdict go into meta.
func selectValidated(ctx context.Context, o TrainOptions, specs []*sim.Spec, evaluated []*rank.Checkpoint, start *rank.Checkpoint, meta map[string]string) (*rank.Checkpoint, error) {
	top := o.ValidateTop
	if top <= 0 {
		top = DefaultValidateTop
	}
	pooledMax := o.ValidateMax
	if pooledMax <= 0 {
		pooledMax = rank.VerdictPooledMax
	}
	reward := func(c *rank.Checkpoint) float64 { return c.Training.Curve[len(c.Training.Curve)-1].EvalReward }
	cands := slices.Clone(evaluated)
	// Best reward first; an earlier epoch wins a tie (stable sort).
	slices.SortStableFunc(cands, func(a, b *rank.Checkpoint) int { return cmp.Compare(reward(b), reward(a)) })
	cands = slices.DeleteFunc(cands, func(c *rank.Checkpoint) bool { return !(reward(c) > 0) })
	cands = cands[:min(top, len(cands))]
	meta["validation_traces"] = strings.Join(o.ValidateTraces, ",")
	meta["validation_rule"] = fmt.Sprintf("of the %d best greedy-evaluated epochs with a reward above 0, the one with the lowest worst pooled ratio whose validation verdict beats the heuristic (pooled at most %g, windows at most %g)",
		top, pooledMax, rank.VerdictWindowMax)
	var clusters []string
	for _, s := range specs {
		clusters = append(clusters, s.Name)
	}
	var best *rank.Checkpoint
	var bestV *rank.Verdict
	var notes []string
	if len(cands) > 0 {
		v, err := NewValidator(ctx, clusters, o.ValidateTraces, o.Seed, max(1, o.Workers), o.Logger, o.EstimateReplay)
		if err != nil {
			return nil, err
		}
		for _, c := range cands {
			p, err := c.Policy()
			if err != nil {
				return nil, err
			}
			verdict, err := v.Judge(ctx, p, pooledMax, rank.VerdictWindowMax)
			if err != nil {
				return nil, fmt.Errorf("validate epoch %d: %w", c.Training.Epoch, err)
			}
			o.Logger.Info("validated", "epoch", c.Training.Epoch, "eval_reward", reward(c), "verdict", verdict.String())
			notes = append(notes, fmt.Sprintf("epoch %d: %s (%s)", c.Training.Epoch, verdict.Result, verdict.Ratios))
			if verdict.Beats() && (bestV == nil || verdict.WorstPooled < bestV.WorstPooled) {
				best, bestV = c, verdict
			}
		}
	}
	meta["validation_candidates"] = strings.Join(notes, " | ")
	if best != nil {
		meta["validation_epoch"] = fmt.Sprint(best.Training.Epoch)
		meta["validation_verdict"] = bestV.String()
		return best, nil
	}
	if o.Residual || len(evaluated) == 0 {
		meta["validation_epoch"] = "0"
		meta["validation_verdict"] = "no trained epoch beat the heuristic on the validation windows: kept the start, the heuristic's order"
		return start, nil
	}
	best = cands0(evaluated, reward)
	meta["validation_epoch"] = fmt.Sprint(best.Training.Epoch)
	meta["validation_verdict"] = "no trained epoch beat the heuristic on the validation windows: kept the best greedy-evaluated epoch"
	return best, nil
}

// cands0 is the evaluated checkpoint with the best reward (the earliest on a tie).
func cands0(evaluated []*rank.Checkpoint, reward func(*rank.Checkpoint) float64) *rank.Checkpoint {
	best := evaluated[0]
	for _, c := range evaluated[1:] {
		if reward(c) > reward(best) {
			best = c
		}
	}
	return best
}
