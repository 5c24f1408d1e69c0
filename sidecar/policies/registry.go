// Package policies is the name -> constructor registry of scheduling policies that `hetgpu sim`
// compares. Each policy documents its source. Native baselines drive the simulator's State
// directly; production-pipeline policies (rltune, gogh, hetgpu) are sim.PipelinePolicy values that
// run sched.Pipeline unchanged against the engine's Snapshot and Pin.
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

	"github.com/hetgpu/hetgpu/sidecar/queue"
	"github.com/hetgpu/hetgpu/sidecar/sim"
	"github.com/hetgpu/hetgpu/sidecar/throughput"
)

// Options is what a constructor may use. Each run gets a fresh policy value.
type Options struct {
	Spec       *sim.Spec
	Throughput *throughput.Table
	Seed       uint64
	Logger     hclog.Logger
	// Queues, when enabled, gives the hetgpu pipelines a queue stage and measures the queues
	// (sim.QueueMeter); other policies ignore it.
	Queues queue.Config
}

// Constructor builds a policy for one simulation run.
type Constructor func(o Options) (sim.Policy, error)

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

// New builds a registered policy.
func New(name string, o Options) (sim.Policy, error) {
	if o.Logger == nil {
		o.Logger = hclog.NewNullLogger()
	}
	for _, e := range registry() {
		if e.Name == name {
			p, err := e.New(o)
			if err != nil {
				return nil, fmt.Errorf("policy %s: %w", name, err)
			}
			return p, nil
		}
	}
	return nil, fmt.Errorf("unknown policy %q; known: %s, all", name, strings.Join(Names(), ", "))
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
