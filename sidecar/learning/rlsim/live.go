package rlsim

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/hashicorp/hcl/v2/hclwrite"
	"github.com/zclconf/go-cty/cty"

	"github.com/hetgpu/hetgpu/model/cluster"
	"github.com/hetgpu/hetgpu/model/throughput"
	"github.com/hetgpu/hetgpu/model/trace"
	"github.com/hetgpu/hetgpu/sidecar/backends/sim"
	"github.com/hetgpu/hetgpu/sidecar/learning/ppo"
)

// TraceFromObservations rebuilds a replayable trace from measured runs: one job per
// (namespace, job, group) with the steps it did (throughput x runtime, summed over its runs),
// its GPU count and its job type (model and batch size), arriving when its first run started
// (the queueing it saw is not in an observation, so the replay starts from the arrival order).
// Runs whose job type the throughput table cannot price are skipped.
func TraceFromObservations(name string, obs []cluster.Observation, tab *throughput.Table) (*trace.Trace, error) {
	type acc struct {
		job   trace.Job
		start float64
	}
	jobs := map[string]*acc{}
	var keys []string
	for _, o := range obs {
		if o.ModelName == "" || o.GPUs <= 0 || o.RuntimeS <= 0 || o.Throughput <= 0 {
			continue
		}
		jt := throughput.JobType(o.ModelName, o.BatchSize)
		if v, _, ok := tab.Throughput(jt, o.GPUType, o.GPUs); !ok || v <= 0 {
			continue
		}
		start := float64(o.Time.UnixNano())/1e9 - o.RuntimeS
		k := o.Key()
		a := jobs[k]
		if a == nil {
			ns := o.Namespace
			if ns == "" {
				ns = "default"
			}
			a = &acc{start: start, job: trace.Job{ID: o.JobID, Namespace: ns, JobType: jt, Model: o.ModelName,
				BatchSize: o.BatchSize, GPUs: o.GPUs, Priority: 1, Source: "observation " + k}}
			jobs[k] = a
			keys = append(keys, k)
		}
		a.start = min(a.start, start)
		a.job.TotalSteps += o.Throughput * o.RuntimeS
	}
	if len(keys) == 0 {
		return nil, errors.New("no usable observations (need model, GPUs, runtime and throughput)")
	}
	sort.Slice(keys, func(i, j int) bool {
		a, b := jobs[keys[i]], jobs[keys[j]]
		if a.start != b.start {
			return a.start < b.start
		}
		return keys[i] < keys[j]
	})
	t := &trace.Trace{Name: name}
	first := jobs[keys[0]].start
	seen := map[string]int{}
	for _, k := range keys {
		j := jobs[k].job
		j.ArrivalS = jobs[k].start - first
		// Job IDs must be unique in a trace; namespaces may reuse them.
		if n := seen[j.ID]; n > 0 {
			j.ID = fmt.Sprintf("%s-%d", j.ID, n)
		}
		seen[jobs[k].job.ID]++
		t.Jobs = append(t.Jobs, j)
	}
	if err := t.Validate(); err != nil {
		return nil, err
	}
	return t, nil
}

// LiveBuilder returns the ppo.EnvBuilder of online fine-tuning on the simulator: the recent
// runs become a trace replayed on the cluster's layout; the older three quarters of it are the
// training episodes, the newest quarter the evaluation episodes that judge the tuned policy.
func LiveBuilder(cfg EnvConfig) ppo.EnvBuilder {
	return func(recent []cluster.Observation) (ppo.Env, ppo.Env, []int, error) {
		t, err := TraceFromObservations("live", recent, cfg.Throughput)
		if err != nil {
			return nil, nil, nil, err
		}
		cut := len(t.Jobs) * 3 / 4
		if cut < 1 || cut >= len(t.Jobs) {
			return nil, nil, nil, fmt.Errorf("%d usable jobs are too few to train and evaluate on", len(t.Jobs))
		}
		trainT, err := t.Window("live-train", 0, cut)
		if err != nil {
			return nil, nil, nil, err
		}
		evalT, err := t.Window("live-eval", cut, 0)
		if err != nil {
			return nil, nil, nil, err
		}
		tc, ec := cfg, cfg
		tc.Trace, ec.Trace = trainT, evalT
		if tc.EpisodeJobs <= 0 || tc.EpisodeJobs > len(trainT.Jobs) {
			tc.EpisodeJobs = len(trainT.Jobs)
		}
		ec.EpisodeJobs = min(max(1, tc.EpisodeJobs), len(evalT.Jobs))
		ec.Stride = ec.EpisodeJobs
		train, err := NewEnv(tc)
		if err != nil {
			return nil, nil, nil, err
		}
		eval, err := NewEnv(ec)
		if err != nil {
			return nil, nil, nil, err
		}
		eps := make([]int, eval.Episodes())
		for i := range eps {
			eps[i] = i
		}
		return train, eval, eps, nil
	}
}

// SpecFromSnapshot describes the ready, eligible nodes of a snapshot as a simulator cluster:
// one node class per (GPU model, healthy GPUs per node, interconnect), the simulator's default
// network and power model. Online fine-tuning replays recent jobs on it.
func SpecFromSnapshot(name string, snap *cluster.Snapshot) (*sim.Spec, error) {
	type class struct {
		gpu          string
		gpus         int
		interconnect string
	}
	count := map[class]int{}
	var order []class
	for i := range snap.Nodes {
		n := &snap.Nodes[i]
		if !n.Ready() {
			continue
		}
		for _, g := range n.Devices {
			healthy := g.Healthy()
			if healthy == 0 || g.GPUType == "" {
				continue
			}
			c := class{g.Name, healthy, n.Interconnect}
			if count[c] == 0 {
				order = append(order, c)
			}
			count[c]++
		}
	}
	if len(order) == 0 {
		return nil, fmt.Errorf("cluster spec from a snapshot of %d nodes: no ready node with healthy GPUs", len(snap.Nodes))
	}
	f := hclwrite.NewEmptyFile()
	body := f.Body()
	body.SetAttributeValue("name", cty.StringVal(name))
	for i, c := range order {
		b := body.AppendNewBlock("node_class", []string{fmt.Sprintf("c%d", i)}).Body()
		b.SetAttributeValue("gpu", cty.StringVal(c.gpu))
		b.SetAttributeValue("gpus_per_node", cty.NumberIntVal(int64(c.gpus)))
		b.SetAttributeValue("count", cty.NumberIntVal(int64(count[c])))
		if c.interconnect != "" {
			b.SetAttributeValue("interconnect", cty.StringVal(c.interconnect))
		}
	}
	return sim.ParseSpec(f.Bytes(), name+".hcl")
}

// LiveTuner is online fine-tuning for the sidecar (service.Tuner): it keeps the recent runs
// (ppo.OnlineTuner) and, at each step, replays them on the cluster's current layout.
type LiveTuner struct {
	Online *ppo.OnlineTuner
	// Env is the template of the episodes: Throughput, Score, Policy, Baseline, EpisodeJobs
	// (Spec and Trace are filled in each step).
	Env EnvConfig
}

// Observe implements sched.Learner.
func (l *LiveTuner) Observe(ctx context.Context, obs cluster.Observation) error {
	return l.Online.Observe(ctx, obs)
}

// Tune runs one guarded fine-tuning step when enough new runs arrived.
func (l *LiveTuner) Tune(ctx context.Context, snap *cluster.Snapshot) (ran, adopted bool, err error) {
	spec, err := SpecFromSnapshot("live", snap)
	if err != nil {
		return false, false, err
	}
	cfg := l.Env
	cfg.Spec = spec
	l.Online.Build = LiveBuilder(cfg)
	ran, res, err := l.Online.Tune(ctx)
	return ran, res.Accepted, err
}
