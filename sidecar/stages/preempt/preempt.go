// Package preempt is the pipeline's optional preemption stage (sched.Preemptor): with every
// active job ranked together, it decides which running jobs to stop so that better-ranked
// waiting jobs can start, and which running jobs to move to much faster GPUs. Only jobs the
// snapshot lists as Preemptible (annotation hetgpu.preemptible: the job checkpoints) are ever
// stopped; a stopped job waits again with its attained service and is placed by the placement
// MILP like any other.
//
// The plan is a virtual packing of the whole cluster in rank order (Tiresias' and Gavel's
// round structure, with hetgpu's ranker and predictor):
//
//  1. GPUs held by jobs that may not be stopped (not preemptible, or started less than
//     MinRun ago) are taken first.
//  2. Jobs are visited best first. A running job keeps its GPUs when nobody better took them
//     and no GPU type the job could move to is at least Hysteresis times faster for it
//     (predicted throughput). Otherwise the job gets the fastest GPU type with room: one node
//     (best fit, preferring GPUs that are free now, so that fewer jobs are stopped) or, up to
//     its distribution degree, several.
//  3. Running jobs that did not keep their GPUs are preempted.
//
// Long-job guard: a job whose estimated remaining time is at least the time the whole backlog
// needs to drain (sum over active jobs of GPUs x remaining time, divided by the cluster's GPUs)
// goes first. Smallest-work-first rankers otherwise leave the longest job for last, where it
// runs alone on an idle cluster: a long makespan and idle power for hours. Starting it early
// costs the short jobs little and saves that energy.
package preempt

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/hetgpu/hetgpu/model/cluster"
	"github.com/hetgpu/hetgpu/sidecar/sched"
)

// Config tunes the planner. The zero value is not useful: start from Default.
type Config struct {
	// Hysteresis is how much faster (predicted) another GPU type must be before a running job
	// is moved there (> 1; math.Inf(1) never migrates).
	Hysteresis float64
	// MinRun protects a job that started less than this ago from being stopped, so that a
	// restart's checkpoint cost is repaid before the next one.
	MinRun time.Duration
	// MinRunHistory, when longer than MinRun, is MinRun for the jobs ranked by the history of
	// similar jobs (no hetgpu.runtime or hetgpu.steps): their rank tells that they are not
	// one of the many short ones only once they have run a while, and stopping each after
	// MinRun serves a burst of such jobs in turns that are all restarts. Measured on the
	// held-out windows without estimates (docs/results/estimate-free.md): 30 min, 1 h, 2 h.
	MinRunHistory time.Duration
	// MinRunFirst, when > 0, is the first turn of a job ranked by its history; each later
	// turn lasts as long as the job has run before, up to MinRunHistory.
	MinRunFirst time.Duration
	// LongJobGuard enables the long-job guard (see the package comment).
	LongJobGuard bool
	// CrossNodeEfficiency multiplies the predicted throughput of a job spread over nodes (as
	// the placer's).
	CrossNodeEfficiency float64
}

// Default is hetgpu's configuration.
func Default() Config {
	return Config{Hysteresis: 1.3, MinRun: 30 * time.Minute, MinRunHistory: time.Hour, MinRunFirst: 6 * time.Minute, LongJobGuard: true, CrossNodeEfficiency: 0.75}
}

// Validate names the first unusable field.
func (c Config) Validate() error {
	switch {
	case !(c.Hysteresis >= 1):
		return fmt.Errorf("preemption config: hysteresis = %v, expected a factor >= 1", c.Hysteresis)
	case c.MinRun < 0:
		return fmt.Errorf("preemption config: min_run = %v, expected >= 0", c.MinRun)
	case c.MinRunFirst < 0:
		return fmt.Errorf("preemption config: min_run_first = %v, expected >= 0", c.MinRunFirst)
	case c.MinRunHistory < 0:
		return fmt.Errorf("preemption config: min_run_history = %v, expected >= 0", c.MinRunHistory)
	case !(c.CrossNodeEfficiency > 0 && c.CrossNodeEfficiency <= 1):
		return fmt.Errorf("preemption config: cross_node_efficiency = %v, expected a factor in (0, 1]", c.CrossNodeEfficiency)
	}
	return nil
}

// historyTurn is how long a job ranked by its history runs before it may be stopped, given
// the time ran in earlier allocations: turns double from MinRunFirst up to MinRunHistory.
func (p *Planner) historyTurn(ran time.Duration) time.Duration {
	if p.cfg.MinRunFirst <= 0 {
		return p.cfg.MinRunHistory
	}
	return min(p.cfg.MinRunHistory, max(p.cfg.MinRunFirst, ran))
}

// Planner implements sched.Preemptor.
type Planner struct{ cfg Config }

var _ sched.Preemptor = (*Planner)(nil)

// New validates cfg and returns a planner.
func New(cfg Config) (*Planner, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Planner{cfg: cfg}, nil
}

// unit is one device group on one schedulable node: the granularity GPUs are counted at.
type unit struct {
	node    *cluster.Node
	nodeID  string
	group   *cluster.DeviceGroup
	gpuType string
	// virt is what the virtual packing has left; now is what is free at this moment and not
	// yet claimed by the plan.
	virt, now int
	// res is what the job being visited may not take: GPUs of other queues' guaranteed jobs
	// not visited yet (queues.go).
	res int
}

// spot is a job's share of one unit.
type spot struct{ unit, gpus int }

type state struct {
	// rs is the round's state: each job's constraints compiled once (nil compiles afresh).
	rs    *sched.RoundState
	units []unit
	// byInst finds a unit by node ID and instance ID: a node may hold several groups of one GPU
	// type (a slot group per shared GPU next to its whole GPUs), each counted on its own.
	byInst map[[2]string]int
	types  []string
}

// unitOf is the unit an allocation's GPUs belong to (its first instance's group).
func (st *state) unitOf(a *cluster.Alloc) (int, bool) {
	for _, id := range a.DeviceIDs {
		if u, ok := st.byInst[[2]string{a.NodeID, id}]; ok {
			return u, true
		}
	}
	return 0, false
}

// Plan implements sched.Preemptor.
func (p *Planner) Plan(ctx context.Context, rs *sched.RoundState, snap *cluster.Snapshot, ranked []sched.Ranked, pred sched.Predictor) (sched.Plan, error) {
	st := newState(snap)
	st.rs = rs
	total := st.gpus()
	pending := make(map[string]bool, len(snap.Pending))
	for i := range snap.Pending {
		pending[snap.Pending[i].Key()] = true
	}
	running := map[string]bool{}
	for i := range snap.Preemptible {
		running[snap.Preemptible[i].Key()] = true
	}
	// A job with any allocation younger than MinRun may not be stopped at all.
	// young are the jobs MinRun protects that a queue owed its guarantee may still reclaim
	// (borrowed ones, see guard); they never move.
	young := map[string]bool{}
	if p.cfg.MinRun > 0 || p.cfg.MinRunHistory > 0 {
		fromHistory := map[string]time.Duration{}
		if p.cfg.MinRunHistory > p.cfg.MinRun {
			for i := range snap.Preemptible {
				if j := &snap.Preemptible[i]; j.Hetgpu.Est.Source == cluster.EstHistory {
					fromHistory[j.Key()] = p.historyTurn(j.Hetgpu.Ran)
				}
			}
		}
		for _, a := range snap.Running {
			k := a.Key()
			minRun := p.cfg.MinRun
			if t, ok := fromHistory[k]; ok {
				minRun = t
			}
			if snap.Now.Sub(a.StartTime) < minRun {
				if reclaimable(snap.Tenancy, k) && running[k] {
					young[k] = true
					continue
				}
				delete(running, k)
			}
		}
		for k := range young {
			if !running[k] {
				delete(young, k)
			}
		}
	}
	// A GPU k jobs share (co-location) counts as k slots, as the device plugin's GPU slots
	// do: each job holds one, and stopping it frees one for a job that shares.
	free := snap.Free()
	counted := map[string]bool{}
	held := map[string][]spot{} // running preemptible job -> its GPUs
	for _, a := range snap.Running {
		k := a.Key()
		u, ok := st.unitOf(&a)
		if !ok {
			// A node that takes no new work: nothing to plan there, and a job partly on it
			// stays where it is.
			delete(running, k)
			continue
		}
		n := len(a.DeviceIDs)
		for _, id := range a.DeviceIDs {
			key := a.NodeID + "\x00" + id
			if h := free.Holders(a.NodeID, id); h > 1 && !counted[key] {
				counted[key] = true
				st.units[u].virt += h - 1
				st.units[u].now += h - 1
			}
		}
		st.units[u].now -= n
		held[k] = append(held[k], spot{u, n})
	}
	for k, spots := range held {
		if !running[k] {
			st.claim(spots, false) // fixed
			delete(held, k)
		}
	}
	for k := range running {
		if _, ok := held[k]; !ok {
			delete(running, k)
		}
	}

	order := p.order(ranked, total, snap.Tenancy)
	plan := sched.Plan{Order: make([]sched.Ranked, 0, len(order))}
	moves := map[string]string{}
	guard := newGuard(snap, held, running, young)
	jobs := make(map[string]*cluster.Job, len(order))
	for _, r := range order {
		jobs[r.Job.Key()] = r.Job
	}
	relocated := map[string]string{}
	var multi map[string]bool
	if snap.Tenancy != nil {
		multi = multiGroupGangs(snap)
	}
	for _, r := range order {
		if err := ctx.Err(); err != nil {
			return sched.Plan{}, err
		}
		j := r.Job
		k := j.Key()
		cur, isRunning := held[k]
		isRunning = isRunning && running[k]
		if !isRunning && !pending[k] {
			continue // runs on GPUs the plan may not take
		}
		guard.visit(st, j, k)
		keepOK := isRunning
		for _, s := range cur {
			if st.units[s.unit].virt-st.units[s.unit].res < s.gpus {
				keepOK = false
			}
		}
		if reason, ok := relocated[k]; ok {
			plan.Preempt = append(plan.Preempt, cluster.Preemption{Namespace: j.Namespace, JobID: j.ID, Group: j.Group, Reason: reason, Relocated: true})
			plan.Order = append(plan.Order, r)
			continue
		}
		feas := st.feasible(j)
		best, bestRate := p.bestFit(st, j, feas, pred)
		if best == nil && !isRunning {
			// Other queues' guaranteed jobs may move to make room (relocate.go).
			rate := func(t string) float64 { return p.rate(j, t, 1, pred) }
			if moves, ok := guard.relocation(st, j, feas, jobs, multi, rate); ok {
				guard.apply(st, moves)
				guard.visit(st, j, k)
				for _, m := range moves {
					relocated[m.key] = relocateReason(m, st, j)
				}
				best, bestRate = p.bestFit(st, j, feas, pred)
			}
		}
		switch {
		case keepOK && (young[k] || best == nil || bestRate < p.cfg.Hysteresis*p.rate(j, st.units[cur[0].unit].gpuType, len(cur), pred)):
			st.claim(cur, false)
			continue // keeps running: not in the placement order
		case best != nil:
			st.claim(best, true)
			if isRunning {
				moves[k] = st.units[best[0].unit].gpuType
			}
		}
		if isRunning {
			reason := "a better-ranked job needs its GPUs"
			if t, ok := moves[k]; ok {
				reason = fmt.Sprintf("moving to %s, predicted %.1fx faster", t, bestRate/p.rate(j, st.units[cur[0].unit].gpuType, len(cur), pred))
			}
			plan.Preempt = append(plan.Preempt, cluster.Preemption{Namespace: j.Namespace, JobID: j.ID, Group: j.Group, Reason: reason})
		}
		plan.Order = append(plan.Order, r)
	}
	return plan, nil
}

// bestFit is the unit(s) of the GPU type with the highest predicted rate that job j fits now.
func (p *Planner) bestFit(st *state, j *cluster.Job, feas []bool, pred sched.Predictor) ([]spot, float64) {
	best, bestRate := []spot(nil), 0.0
	for _, t := range st.types {
		sp, ok := st.fit(j, t, feas)
		if !ok {
			continue
		}
		rate := p.rate(j, t, len(sp), pred)
		if rate > bestRate {
			best, bestRate = sp, rate
		}
	}
	return best, bestRate
}

// order is the ranker's order with the long-job guard applied: jobs whose estimated
// remaining time is at least the backlog's drain time move to the front, in rank order. With
// queues (tenancy) they move ahead of the jobs of their own queue only, so that the queue
// stage's order across queues (guarantees first) stands.
func (p *Planner) order(ranked []sched.Ranked, gpus int, t *cluster.Tenancy) []sched.Ranked {
	out := slices.Clone(ranked)
	if !p.cfg.LongJobGuard || len(out) < 2 || gpus == 0 {
		return out
	}
	var work float64
	for _, r := range out {
		work += r.Job.Hetgpu.EstRuntime.Seconds() * float64(r.Job.GPUs)
	}
	drain := work / float64(gpus)
	long := func(r sched.Ranked) bool {
		// A queue owed its guarantee keeps the queue stage's order: its admitted jobs lead it,
		// and a long running job of its own must not take their places.
		if t != nil && t.Owed[t.QueueOf(r.Job.Namespace)] > 0 {
			return false
		}
		// Only a declared amount of work (hetgpu.runtime, hetgpu.steps) counts: a history
		// estimate is the mean residual life of similar jobs, which grows as a job runs, so
		// promoting it would hand the cluster to whichever job has run longest.
		if src := r.Job.Hetgpu.Est.Source; src == cluster.EstHistory {
			return false
		}
		rem := r.Job.Hetgpu.EstRuntime.Seconds()
		return rem > 0 && rem >= drain
	}
	byLong := func(a, b sched.Ranked) int {
		la, lb := long(a), long(b)
		switch {
		case la && !lb:
			return -1
		case lb && !la:
			return 1
		}
		return 0
	}
	if t == nil {
		slices.SortStableFunc(out, byLong)
		return out
	}
	return withinQueues(out, t, byLong)
}

// gpus counts the healthy GPUs the plan can use.
func (st *state) gpus() int {
	n := 0
	for _, u := range st.units {
		n += u.virt
	}
	return n
}

// rate is the job's predicted throughput on n nodes of a GPU type.
func (p *Planner) rate(j *cluster.Job, gpuType string, nodes int, pred sched.Predictor) float64 {
	if pred == nil {
		return 1
	}
	v := pred.Predict(j, gpuType, j.GPUs).Throughput
	if nodes > 1 {
		v *= p.cfg.CrossNodeEfficiency
	}
	if math.IsNaN(v) || v < 0 {
		return 0
	}
	return v
}

func newState(snap *cluster.Snapshot) *state {
	st := &state{byInst: map[[2]string]int{}}
	seen := map[string]bool{}
	// The groups of the nodes open to new work; running allocations are subtracted by Plan.
	for _, fg := range snap.Free().Groups() {
		n, g := fg.Node, fg.Group
		healthy := g.Healthy()
		if healthy == 0 || g.GPUType == "" {
			continue
		}
		for _, in := range g.Instances {
			st.byInst[[2]string{n.ID, in.ID}] = len(st.units)
		}
		st.units = append(st.units, unit{node: n, nodeID: n.ID, group: g, gpuType: g.GPUType, virt: healthy, now: healthy})
		if !seen[g.GPUType] {
			seen[g.GPUType] = true
			st.types = append(st.types, g.GPUType)
		}
	}
	slices.Sort(st.types)
	return st
}

// feasible marks the units a job's device request and constraints allow, compiled as the
// placer compiles them (the round state's compiled constraints). A constraint or affinity that does not compile
// makes every unit infeasible: the placer reports it, and the plan never stops a job for one
// it cannot judge.
func (st *state) feasible(j *cluster.Job) []bool {
	ok := make([]bool, len(st.units))
	cj, err := st.rs.Compiled(j) // once a round, shared with the placer
	if err != nil {
		return ok
	}
	for i := range st.units {
		u := &st.units[i]
		ok[i] = cj.NodeFeasible(u.node) && cj.GroupFeasible(u.group)
	}
	return ok
}

// fit finds room for a job on a GPU type: the best-fitting single unit (free now preferred),
// else the emptiest units up to the job's distribution degree.
func (st *state) fit(j *cluster.Job, gpuType string, feas []bool) ([]spot, bool) {
	// A group with count > 1 (GPUsPerNode below GPUs) needs GPUsPerNode on each of several
	// units (cluster.Job.FitsFree).
	spans := j.GPUsPerNode > 0 && j.GPUsPerNode < j.GPUs
	best, bestScore := -1, math.MaxInt
	for i := range st.units {
		u := &st.units[i]
		if spans || !feas[i] || u.gpuType != gpuType || u.virt-u.res < j.GPUs {
			continue
		}
		score := u.virt - u.res - j.GPUs
		if u.now < j.GPUs {
			score += 1 << 20 // someone would have to stop
		}
		if score < bestScore {
			best, bestScore = i, score
		}
	}
	if best >= 0 {
		return []spot{{best, j.GPUs}}, true
	}
	if j.MaxNodes() <= 1 && !spans {
		return nil, false
	}
	var idx []int
	for i := range st.units {
		if feas[i] && st.units[i].gpuType == gpuType && st.units[i].virt-st.units[i].res > 0 {
			idx = append(idx, i)
		}
	}
	slices.SortStableFunc(idx, func(a, b int) int {
		return cmp.Compare(st.units[b].virt-st.units[b].res, st.units[a].virt-st.units[a].res)
	})
	room := make([]int, len(idx))
	for k, i := range idx {
		room[k] = st.units[i].virt - st.units[i].res
	}
	if !j.FitsFree(room) {
		return nil, false
	}
	var out []spot
	need := j.GPUs
	for k, i := range idx {
		if need == 0 {
			break
		}
		take := min(need, room[k])
		if spans {
			take = min(need, j.GPUsPerNode) // the first GPUs/GPUsPerNode units hold that many
		}
		out = append(out, spot{i, take})
		need -= take
	}
	return out, true
}

// claim takes GPUs in the virtual packing; fresh claims also use up GPUs free now.
func (st *state) claim(sp []spot, fresh bool) {
	for _, s := range sp {
		st.units[s.unit].virt -= s.gpus
		if fresh {
			st.units[s.unit].now -= s.gpus
		}
	}
}
