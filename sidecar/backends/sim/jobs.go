// Job lifecycle: submission, validation of a placement, start, completion, preemption and
// the pending queue.

package sim

import (
	"container/heap"
	"fmt"
	"math"
	"sort"

	"github.com/hetgpu/hetgpu/model/cluster"
	"github.com/hetgpu/hetgpu/model/gpuspec"
	"github.com/hetgpu/hetgpu/model/trace"
)

// Submit adds jobs; arrivals in the past are moved to now. Jobs no GPU type can run are marked
// unschedulable and counted. IDs must be unique.
func (e *Engine) Submit(jobs ...trace.Job) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.submit(jobs)
}

func (e *Engine) submit(jobs []trace.Job) error {
	for _, tj := range jobs {
		j, err := e.newJob(tj)
		if err != nil {
			return err
		}
		best := e.bestRate(j)
		if ref := e.rate(tj.JobType, gpuspec.ReferenceGPU, tj.GPUs, false); ref > 0 {
			j.RefS = tj.TotalSteps / ref
			j.RefGPUHours = j.RefS * float64(tj.GPUs) / 3600
		}
		e.jobs = append(e.jobs, j)
		e.byKey[j.Key] = j
		if best == 0 {
			j.Status = StatusUnschedulable
			e.unschedulble++
			e.log.Debug("job can never run on this cluster", "job", j.Key, "type", tj.JobType, "gpus", tj.GPUs)
			continue
		}
		j.IdealS = tj.TotalSteps / best
		heap.Push(&e.future, j)
	}
	return nil
}

// newJob checks a submitted job and builds its state; arrivals in the past move to now.
func (e *Engine) newJob(tj trace.Job) (*JobState, error) {
	ns := tj.Namespace
	if ns == "" {
		ns = "default"
	}
	key := cluster.GroupKey(ns, tj.ID, JobGroup)
	if _, dup := e.byKey[key]; dup {
		return nil, fmt.Errorf("sim: job %s submitted twice", key)
	}
	if tj.GPUs <= 0 || !(tj.TotalSteps > 0) {
		return nil, fmt.Errorf("sim: job %s: gpus = %d, total_steps = %v, expected both positive (resolve durations with trace.ResolveWork)", key, tj.GPUs, tj.TotalSteps)
	}
	if tj.ArrivalS < e.now {
		tj.ArrivalS = e.now
	}
	j := &JobState{Job: tj, Key: key, Seq: len(e.jobs), FirstStart: math.NaN(), Finish: math.NaN(),
		remaining: tj.TotalSteps, heapIdx: -1, runIdx: -1}
	j.Namespace = ns
	j.MaxNodes = max(1, (tj.GPUs+e.maxPerNode-1)/e.maxPerNode)
	switch {
	case e.namespaces == 0:
		e.namespaces, e.firstNS = 1, ns
	case e.namespaces == 1 && ns != e.firstNS:
		e.namespaces = 2
	}
	return j, nil
}

// bestRate is the job's isolated speed on the fastest GPU type that can hold it within its
// node limit; 0 when none can run it.
func (e *Engine) bestRate(j *JobState) float64 {
	best := 0.0
	for _, g := range e.cfg.Spec.GPUTypes() {
		k := e.minNodes(g, j.GPUs)
		if k == 0 || k > j.MaxNodes {
			continue
		}
		best = math.Max(best, e.rate(j.JobType, g, j.GPUs, k > 1))
	}
	return best
}

// settle brings a running job's lazy counters up to now.
func (e *Engine) settle(j *JobState) {
	dt := e.now - j.lastUpdate
	if j.Status == StatusRunning && dt > 0 {
		j.remaining = math.Max(0, j.remaining-j.Rate*dt)
		j.attained += float64(j.GPUs) * dt
		j.runTime += dt
		j.energyJ += j.powerW * dt
	}
	j.lastUpdate = e.now
}

func (e *Engine) complete(j *JobState) {
	e.settle(j)
	j.remaining = 0
	e.release(j)
	j.Status = StatusDone
	j.Finish = e.now
	e.lastFinish = e.now
	e.energyAtFinish, e.busyAtFinish = e.energyJ, e.busyGPUSeconds
	e.done++
	e.finished = append(e.finished, j)
}

// validate checks that a placement (a decision's GPUs) is legal for the job; it returns the GPU type.
func (e *Engine) validate(j *JobState, p Placement) (string, int, error) {
	if j.Status != StatusPending {
		return "", 0, fmt.Errorf("job %s is not pending", j.Key)
	}
	if len(p.GPUs) != j.GPUs {
		return "", 0, fmt.Errorf("job %s needs %d GPUs, placement has %d", j.Key, j.GPUs, len(p.GPUs))
	}
	typ := ""
	nodes := map[int]bool{}
	seen := map[GPURef]bool{}
	for _, r := range p.GPUs {
		if r.Node < 0 || r.Node >= len(e.nodes) || r.Index < 0 || r.Index >= len(e.nodes[r.Node].gpus) {
			return "", 0, fmt.Errorf("job %s: GPU %v does not exist", j.Key, r)
		}
		if seen[r] {
			return "", 0, fmt.Errorf("job %s: GPU %s listed twice", j.Key, instanceID(e.nodes[r.Node].id, r.Index))
		}
		seen[r] = true
		n := e.nodes[r.Node]
		if typ == "" {
			typ = n.gpuType
		} else if typ != n.gpuType {
			return "", 0, fmt.Errorf("job %s: placement mixes GPU types %s and %s", j.Key, typ, n.gpuType)
		}
		if err := e.canOccupy(j, p.Shared, n, r.Index); err != nil {
			return "", 0, err
		}
		nodes[r.Node] = true
	}
	if len(nodes) > j.MaxNodes {
		return "", 0, fmt.Errorf("job %s may span %d node(s), placement spans %d", j.Key, j.MaxNodes, len(nodes))
	}
	if e.rate(j.JobType, typ, j.GPUs, len(nodes) > 1) <= 0 {
		return "", 0, fmt.Errorf("job %s (%s) cannot run on %d x %s (out of memory or no throughput)", j.Key, j.JobType, j.GPUs, typ)
	}
	return typ, len(nodes), nil
}

// canOccupy reports why job j cannot take GPU i of node n: it is held, or it is held by one
// shared job and j may share (shared placement, no MIG) but the pair runs out of memory.
func (e *Engine) canOccupy(j *JobState, shared bool, n *simNode, i int) error {
	s := &n.gpus[i]
	switch {
	case s.n == 0:
	case s.n == 1 && shared && s.holders[0].Placement.Shared && !n.isMIG():
		if e.pairOOM(j, s.holders[0], n.gpuType) {
			return fmt.Errorf("job %s cannot share GPU %s with %s: the pair runs out of memory", j.Key, instanceID(n.id, i), s.holders[0].Key)
		}
	default:
		return fmt.Errorf("job %s: GPU %s is in use", j.Key, instanceID(n.id, i))
	}
	return nil
}

// start puts a pending job on a validated placement.
func (e *Engine) start(j *JobState, p Placement, typ string, nodes int) {
	j.Placement = Placement{GPUs: append([]GPURef(nil), p.GPUs...), Shared: p.Shared}
	j.allocs = nil
	j.GPUType, j.Nodes, j.lastType = typ, nodes, typ
	j.Status = StatusRunning
	j.lastUpdate = e.now
	if math.IsNaN(j.FirstStart) {
		j.FirstStart = e.now
	} else if e.cfg.RestartPenaltyS > 0 {
		// Lost work: the penalty in seconds at the new consolidated rate.
		j.remaining = math.Min(j.TotalSteps, j.remaining+e.cfg.RestartPenaltyS*e.rate(j.JobType, typ, j.GPUs, nodes > 1))
	}
	j.segStart, j.segSteps, j.segEnergy, j.coRunner = e.now, j.remaining, j.energyJ, ""
	partners := e.occupy(j)
	j.runIdx = len(e.running)
	e.running = append(e.running, j)
	e.nPending--
	e.pendingDirty = true
	e.refresh(j)
	e.rerate(partners)
	e.updatePower(j)
	for p := range partners {
		e.updatePower(p)
	}
}

// occupy adds a starting job to its GPUs' holders and returns the jobs it now shares with.
func (e *Engine) occupy(j *JobState) map[*JobState]bool {
	partners := map[*JobState]bool{}
	for _, r := range j.Placement.GPUs {
		n := e.nodes[r.Node]
		s := &n.gpus[r.Index]
		if s.n == 0 {
			n.free--
			e.busyGPUs++
		} else {
			partners[s.holders[0]] = true
		}
		s.holders[s.n] = j
		s.n++
	}
	return partners
}

// release frees a job's GPUs and updates partners.
func (e *Engine) release(j *JobState) {
	e.emitObservation(j)
	partners := e.vacate(j)
	e.dropRunning(j)
	j.Rate, j.powerW, j.util = 0, 0, 0
	e.rerate(partners)
	for _, r := range j.Placement.GPUs {
		e.gpuPower(r)
	}
	for p := range partners {
		e.updatePower(p)
	}
}

// vacate removes a job from its GPUs' holders and returns the jobs that shared them.
func (e *Engine) vacate(j *JobState) map[*JobState]bool {
	partners := map[*JobState]bool{}
	for _, r := range j.Placement.GPUs {
		n := e.nodes[r.Node]
		s := &n.gpus[r.Index]
		if s.holders[0] == j {
			s.holders[0], s.holders[1] = s.holders[1], nil
		} else {
			s.holders[1] = nil
		}
		s.n--
		if s.n == 0 {
			n.free++
			e.busyGPUs--
		} else {
			partners[s.holders[0]] = true
		}
	}
	return partners
}

// dropRunning takes a job out of the completion heap and the running list.
func (e *Engine) dropRunning(j *JobState) {
	if j.heapIdx >= 0 {
		heap.Remove(&e.completions, j.heapIdx)
	}
	last := e.running[len(e.running)-1]
	e.running[j.runIdx] = last
	last.runIdx = j.runIdx
	e.running = e.running[:len(e.running)-1]
	j.runIdx = -1
}

// rerate brings jobs whose GPU sharing changed up to now and recomputes their rates.
func (e *Engine) rerate(partners map[*JobState]bool) {
	for p := range partners {
		e.settle(p)
		e.refresh(p)
	}
}

// preempt stops a running job and returns it to the queue.
func (e *Engine) preempt(j *JobState) error {
	if j.Status != StatusRunning {
		return fmt.Errorf("job %s is not running", j.Key)
	}
	e.settle(j)
	e.release(j)
	j.Status = StatusPending
	j.Preemptions++
	j.Placement, j.GPUType, j.Nodes = Placement{}, "", 0
	i := sort.Search(len(e.pending), func(i int) bool { return e.pending[i].Seq >= j.Seq })
	if i < len(e.pending) && e.pending[i] == j {
		// Still in the (uncompacted) queue from before it started.
	} else {
		e.pending = append(e.pending, nil)
		copy(e.pending[i+1:], e.pending[i:])
		e.pending[i] = j
	}
	e.nPending++
	return nil
}

// compact drops started jobs from the pending queue.
func (e *Engine) compact() {
	if !e.pendingDirty {
		return
	}
	out := e.pending[:0]
	for _, j := range e.pending {
		if j.Status == StatusPending {
			out = append(out, j)
		}
	}
	for i := len(out); i < len(e.pending); i++ {
		e.pending[i] = nil
	}
	e.pending = out
	e.pendingDirty = false
}
