// Package policies is the one registry of scheduling policies: every policy, the baselines
// included, is a composition of pipeline stages (sched.Stages) built by name. `hetgpu sim`
// compares them on the simulator (each run through sim.PipelinePolicy, the one adapter), and the
// live sidecar runs any of them (config `policy = "tiresias"`), so an operator can see in shadow
// mode what a baseline would have done on their own cluster. Each policy documents its source.
//
// Adding a policy is one line in registry():
//
//	{Name: "mine", Summary: "what it does (source)", New: newMine},
//
// where newMine is a Constructor (it may live in any package that does not import this one).
package policies

import (
	"fmt"
	"sort"
	"strings"

	"github.com/hashicorp/go-hclog"

	"github.com/hetgpu/hetgpu/model/history"
	"github.com/hetgpu/hetgpu/model/throughput"
	"github.com/hetgpu/hetgpu/sidecar/backends/sim"
	"github.com/hetgpu/hetgpu/sidecar/sched"
	"github.com/hetgpu/hetgpu/sidecar/stages/preempt"
	"github.com/hetgpu/hetgpu/sidecar/stages/queue"
)

// Options is what a constructor may use. Each run gets a fresh policy value.
type Options struct {
	Spec *sim.Spec
	// Throughput is the measured table (throughput.Bundled when nil).
	Throughput *throughput.Table
	Seed       uint64
	Logger     hclog.Logger
	// Queues, when enabled, gives the hetgpu pipelines a queue stage and measures the queues
	// (QueueMeter); other policies ignore it.
	Queues queue.Config
	// Predictor, when set, is the predictor of the policies that only use one to tell the GPU
	// types a job can run on (the first-fit baselines): the live sidecar's. When nil they use
	// the simulator's oracle (sim.TablePredictor on Throughput).
	Predictor sched.Predictor
	// Live says the stages drive the live sidecar (Live sets it): production placement limits,
	// no co-location on whole GPUs.
	Live bool
	// Placement is the hetgpu policy's placement preset (place.Preset; "" is hetgpu), Preempt
	// its preemption settings (preempt.Default when nil) and NoPreempt turns its preemption
	// stage off: the live sidecar's placement and preempt blocks.
	Placement string
	Preempt   *preempt.Config
	NoPreempt bool
	// Ranker, when set, is the hetgpu policy's ranker instead of the bundled learned one (the
	// live sidecar's choice, app.StagesWithRanker).
	Ranker sched.Ranker
	// Starvation is the hetgpu rankers' starvation guard (rank.Heuristic.Starvation: a job
	// that waited more than this many times its expected runtime is boosted; 0 off), over the
	// heuristic order and the learned one alike. Live, the sidecar's ranker.starvation.
	Starvation float64
	// History, when set, is the runtime history of the hetgpu policies' estimates step (the
	// live sidecar's, durable across restarts); each run gets a fresh one otherwise.
	History *history.Model
}

// Policy is what a constructor builds: the stages, and what the simulator shows them.
type Policy struct {
	Name   string
	Stages sched.Stages
	// Estimates are the runtime estimates the policy sees in simulation (user estimates with
	// their error, exact ones, or none).
	Estimates sim.Estimates
}

// Sim is the policy as the simulator runs it; a policy with a queue stage has its queues
// measured (QueueMeter).
func (p Policy) Sim() *sim.PipelinePolicy {
	sp := &sim.PipelinePolicy{PolicyName: p.Name, Stages: p.Stages, Estimates: p.Estimates}
	if qs, ok := p.Stages.Queues.(*queue.Set); ok {
		sp.Meter = MeterQueues(qs)
	}
	return sp
}

// Constructor builds a policy for one run.
type Constructor func(o Options) (Policy, error)

// Entry is one registered policy.
type Entry struct {
	Name    string
	Summary string
	New     Constructor
	// Explicit policies run only when named: "all" leaves them out (a comparison variant that
	// would double the slowest run of every `hetgpu sim --policies all`).
	Explicit bool
}

// registry lists every policy, in the order `all` runs them.
func registry() []Entry {
	return []Entry{
		{Name: "fifo", Summary: "arrival order, head-of-line blocking, bin-packing placement (plain Nomad)", New: newFIFO},
		{Name: "sjf", Summary: "shortest job first with oracle runtimes, backfilling, non-preemptive", New: newSJF},
		{Name: "tiresias", Summary: "2D least-attained-service, discretised queues, preemptive (Tiresias, NSDI 2019)", New: newTiresias},
		{Name: "gavel", Summary: "heterogeneity-aware max-min fairness LP + 6-minute rounds (Gavel, OSDI 2020)", New: newGavel},
		{Name: "rltune", Summary: "PPO-ranked queue + MILP placement, production pipeline (RLTune, arXiv 2512.10271)", New: newRLTune},
		{Name: "gogh", Summary: "P1/P2 predicted throughput + energy-minimising ILP with T_min, production pipeline (GOGH, arXiv 2510.15652)", New: newGOGH},
		{Name: "slurm", Summary: "Slurm multifactor priority (age, job size, fair-share), backfilling, bin-packing placement", New: newSlurm},
		{Name: "f1", Summary: "learned priority F1 = log10(r)*n + 870*log10(s) on user runtime estimates (Carastan-Santos & de Camargo, SC 2017)", New: newF1},
		{Name: "hetgpu", Summary: "learned prioritiser (PPO) + GOGH predictor + preemption planner + placement MILP, hetgpu preset (this project)", New: newHetgpu},
		{Name: HetgpuHeuristic, Summary: "hetgpu with the ranker's fallback heuristic order instead of the learned one (comparison; not in all)", New: newHetgpuHeuristic, Explicit: true},
		{Name: HetgpuOracle, Summary: "hetgpu-heuristic shown exact runtimes in simulation, the ceiling of what better runtime knowledge gives a ranker (comparison; not in all)", New: newHetgpuOracle, Explicit: true},
		{Name: HetgpuHindsight, Summary: "hetgpu-heuristic whose runtime history knows every group of similar jobs' runtimes in hindsight (not each job's own), the ceiling of ranking from history without estimates (comparison; not in all)", New: newHetgpuHindsight, Explicit: true},
	}
}

// Entries returns the registered policies.
func Entries() []Entry { return registry() }

// Names lists registered policy names in registry order, explicit ones included.
func Names() []string {
	var out []string
	for _, e := range registry() {
		out = append(out, e.Name)
	}
	return out
}

// Build builds a registered policy.
func Build(name string, o Options) (Policy, error) {
	if o.Logger == nil {
		o.Logger = hclog.NewNullLogger()
	}
	if o.Throughput == nil {
		tab, err := throughput.Bundled()
		if err != nil {
			return Policy{}, fmt.Errorf("policy %s: throughput table: %w", name, err)
		}
		o.Throughput = tab
	}
	for _, e := range registry() {
		if e.Name == name {
			p, err := e.New(o)
			if err != nil {
				return Policy{}, fmt.Errorf("policy %s: %w", name, err)
			}
			p.Name = name
			return p, nil
		}
	}
	return Policy{}, fmt.Errorf("unknown policy %q; known: %s, all", name, strings.Join(Names(), ", "))
}

// New builds a registered policy for the simulator (Policy.Sim).
func New(name string, o Options) (*sim.PipelinePolicy, error) {
	p, err := Build(name, o)
	if err != nil {
		return nil, err
	}
	return p.Sim(), nil
}

// Live builds a registered policy for the live sidecar, around its predictor (and learner).
func Live(name string, o Options) (sched.Stages, error) {
	o.Live = true
	p, err := Build(name, o)
	if err != nil {
		return sched.Stages{}, err
	}
	return p.Stages, nil
}

// ParseList expands "a,b,c" or "all" into registered names, rejecting unknown and duplicate
// names. "all" is every registered policy but the Explicit ones.
func ParseList(list string) ([]string, error) {
	known := map[string]bool{}
	for _, n := range Names() {
		known[n] = true
	}
	var out []string
	seen := map[string]bool{}
	for _, n := range strings.Split(list, ",") {
		n = strings.TrimSpace(n)
		switch {
		case n == "":
			continue
		case n == "all":
			for _, e := range registry() {
				if !e.Explicit && !seen[e.Name] {
					seen[e.Name] = true
					out = append(out, e.Name)
				}
			}
		case !known[n]:
			names := Names()
			sort.Strings(names)
			return nil, fmt.Errorf("policies: unknown policy %q; known: %s, all", n, strings.Join(names, ", "))
		case !seen[n]:
			seen[n] = true
			out = append(out, n)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("policies: empty list %q; known: %s, all", list, strings.Join(Names(), ", "))
	}
	return out, nil
}
