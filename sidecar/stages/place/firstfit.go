package place

import (
	"context"
	"sort"
	"time"

	"github.com/hetgpu/hetgpu/model/cluster"
	"github.com/hetgpu/hetgpu/sidecar/sched"
)

// FirstFit is Nomad-style bin-packing, heterogeneity-unaware: each ranked job in turn goes to
// the node with the fewest free GPUs that fits it (lowest free instance IDs) on a GPU type the
// predictor says it can run on, or, if it may span nodes, to the fewest nodes of one type,
// fullest-free first. Nodes and GPUs are those the job's constraints and device request allow
// (model/constraint, Nomad's semantics). It is the placer of the queue-order baselines (fifo, sjf, tiresias, slurm,
// f1): what plain Nomad would do with their order.
type FirstFit struct {
	// Backfill lets later jobs start when a job does not fit; without it the first job that
	// does not fit stops the round (head-of-line blocking, FIFO).
	Backfill bool
}

// Place implements sched.Placer.
func (f FirstFit) Place(_ context.Context, st *sched.RoundState, snap *cluster.Snapshot, ranked []sched.Ranked, pred sched.Predictor) ([]cluster.Decision, sched.PlaceStats, error) {
	t0 := time.Now()
	pk := NewPacker(snap).In(st)
	var out []cluster.Decision
	for _, r := range ranked {
		j := r.Job
		if j.GPUs > pk.Free() {
			if f.Backfill && pk.Free() > 0 {
				continue
			}
			break
		}
		d, ok, err := pk.Fit(j, RunsOn(pred, j))
		if err != nil {
			continue // it can never be placed (the service reports it); it blocks nobody
		}
		if ok {
			out = append(out, d)
		} else if !f.Backfill {
			break
		}
	}
	return out, sched.PlaceStats{Candidates: len(ranked), Solver: "greedy", SolveTime: time.Since(t0)}, nil
}

// RunsOn is whether the predictor says the job runs on a GPU type (a throughput above zero),
// asked once per type.
func RunsOn(pred sched.Predictor, j *cluster.Job) func(gpuType string) bool {
	runs := map[string]bool{}
	return func(t string) bool {
		ok, seen := runs[t]
		if !seen {
			ok = pred.Predict(j, t, j.GPUs).Throughput > 0
			runs[t] = ok
		}
		return ok
	}
}

// Packer is first-fit's view of the free GPUs during one placement: FirstFit places ranked
// jobs through it one at a time, and placers that bind a job to a GPU type (Gavel's grants)
// place (job, type) pairs through it, so there is one bin-packing rule.
type Packer struct {
	nodes  []packNode
	types  []string       // GPU types of the groups, sorted
	free   int            // GPUs left: a job that needs more cannot fit anywhere
	byType map[string]int // GPUs left per GPU type
	rs     *sched.RoundState
}

// In makes the packer read the jobs' compiled constraints from the round's state (nil:
// compile afresh) and returns it.
func (p *Packer) In(st *sched.RoundState) *Packer {
	p.rs = st
	return p
}

type packNode struct {
	n    *cluster.Node
	g    *cluster.DeviceGroup
	typ  string   // the group's canonical GPU type
	free []string // what is left of the index's IDs (never written into)
}

// NewPacker is the snapshot's free healthy GPUs, from its free-capacity index.
func NewPacker(snap *cluster.Snapshot) *Packer {
	idx := snap.Free()
	p := &Packer{nodes: make([]packNode, len(idx.Groups())), free: idx.GPUs(), byType: map[string]int{}}
	for i, fg := range idx.Groups() {
		p.nodes[i] = packNode{n: fg.Node, g: fg.Group, typ: fg.Type, free: fg.IDs}
		if _, seen := p.byType[fg.Type]; !seen {
			p.types = append(p.types, fg.Type)
		}
		p.byType[fg.Type] += len(fg.IDs)
	}
	sort.Strings(p.types)
	return p
}

// Free is the number of free GPUs left.
func (p *Packer) Free() int { return p.free }

// FreeOf is the number of free GPUs of a type left (whether a job may use them or not).
func (p *Packer) FreeOf(gpuType string) int { return p.byType[gpuType] }

// Fit places j by first-fit on the GPU types canRun accepts and takes its GPUs; ok is false
// when nothing fits now. The error says the job's constraints do not compile: it can never be
// placed.
func (p *Packer) Fit(j *cluster.Job, canRun func(gpuType string) bool) (d cluster.Decision, ok bool, err error) {
	if j.GPUs > p.free {
		return d, false, nil
	}
	cj, err := p.rs.Compiled(j)
	if err != nil {
		return d, false, err
	}
	// avail are the free GPUs of a node the job may use: none where its constraints or
	// device request rule the node out, only the instances it names when it pins some.
	avail := func(nd *packNode) []string {
		if !cj.NodeFeasible(nd.n) || !cj.GroupFeasible(nd.g) {
			return nil
		}
		if !cj.PinsInstances() {
			return nd.free
		}
		var ids []string
		for _, id := range nd.free {
			if cj.InstanceAllowed(nd.g, id) {
				ids = append(ids, id)
			}
		}
		return ids
	}
	take := func(nd *packNode, k int) cluster.Assignment {
		ids := append([]string(nil), avail(nd)[:k]...)
		nd.free = without(nd.free, ids)
		p.free -= k
		p.byType[nd.typ] -= k
		return cluster.Assignment{NodeID: nd.n.ID, DeviceGroup: nd.g.ID(), InstanceIDs: ids}
	}
	nodes := p.nodes
	// A group with count > 1 (GPUsPerNode below GPUs) needs its GPUs on several nodes, as
	// cluster.Job.FitsFree and the placement MILP read it.
	spans := j.GPUsPerNode > 0 && j.GPUsPerNode < j.GPUs
	best, bestFree := -1, 0
	for i := range nodes {
		nd := &nodes[i]
		n := len(avail(nd))
		if spans || n < j.GPUs || (best >= 0 && n >= bestFree) {
			continue
		}
		if !canRun(nd.typ) {
			continue
		}
		best, bestFree = i, n
		if n == j.GPUs {
			break
		}
	}
	d = cluster.Decision{Namespace: j.Namespace, JobID: j.ID, Group: j.Group}
	if best >= 0 {
		d.GPUType = nodes[best].typ
		d.Assign = []cluster.Assignment{take(&nodes[best], j.GPUs)}
		return d, true, nil
	}
	for _, t := range p.types {
		if j.MaxNodes() <= 1 && !spans || cj.Distinct || !canRun(t) {
			continue
		}
		var idx []int
		for i := range nodes {
			if n := len(avail(&nodes[i])); nodes[i].typ == t && n > 0 {
				idx = append(idx, i)
			}
		}
		sort.SliceStable(idx, func(a, b int) bool { return len(avail(&nodes[idx[a]])) > len(avail(&nodes[idx[b]])) })
		free := make([]int, len(idx))
		for k, i := range idx {
			free[k] = len(avail(&nodes[i]))
		}
		if !j.FitsFree(free) {
			continue
		}
		need := j.GPUs
		for _, i := range idx {
			if need == 0 {
				break
			}
			k := min(need, len(avail(&nodes[i])))
			if p := j.GPUsPerNode; p > 0 {
				// FitsFree holds for the first GPUs/p nodes, each with p free.
				k = min(need, p)
			}
			d.Assign = append(d.Assign, take(&nodes[i], k))
			need -= k
		}
		d.GPUType = t
		return d, true, nil
	}
	return d, false, nil
}

// without is ids less drop (drop's IDs are in ids, in order).
func without(ids, drop []string) []string {
	if len(drop) > 0 && len(ids) >= len(drop) && ids[0] == drop[0] && ids[len(drop)-1] == drop[len(drop)-1] {
		return ids[len(drop):] // the usual case: the lowest free IDs were taken
	}
	gone := make(map[string]bool, len(drop))
	for _, id := range drop {
		gone[id] = true
	}
	out := make([]string, 0, len(ids)-len(drop))
	for _, id := range ids {
		if !gone[id] {
			out = append(out, id)
		}
	}
	return out
}
