package policies

import (
	"context"
	"sort"
	"time"

	"github.com/hetgpu/hetgpu/sidecar/cluster"
	"github.com/hetgpu/hetgpu/sidecar/gpuspec"
	"github.com/hetgpu/hetgpu/sidecar/sched"
	"github.com/hetgpu/hetgpu/sidecar/sim"
	"github.com/hetgpu/hetgpu/sidecar/throughput"
)

// TablePredictor is a sched.Predictor that answers from the ground-truth throughput table (an
// oracle: the simulator's own speeds) and the datasheet power model at full utilisation. It is
// the reference the real predictor (sidecar/predict) is measured against, and what the pipeline
// FIFO uses to skip GPU types a job cannot run on.
type TablePredictor struct {
	Table *throughput.Table
	Specs *gpuspec.Table
	Alpha float64
}

// Predict implements sched.Predictor.
func (p TablePredictor) Predict(job *cluster.Job, gpuType string, gpus int) sched.Estimate {
	jt := throughput.JobType(job.Hetgpu.ModelName, job.Hetgpu.BatchSize)
	v, src, ok := p.Table.Throughput(jt, gpuType, gpus)
	if !ok || v <= 0 {
		return sched.Estimate{Source: "table"}
	}
	e := sched.Estimate{Throughput: v, Source: "table-" + string(src)}
	specs := p.Specs
	if specs == nil {
		specs = gpuspec.Default()
	}
	if s, ok := specs.Lookup(gpuType); ok {
		alpha := p.Alpha
		if alpha == 0 {
			alpha = gpuspec.PowerAlpha
		}
		e.PowerW = float64(gpus) * s.Power(gpuspec.BusyUtil, alpha)
	}
	return e
}

// fifoRanker keeps the snapshot's order (oldest submission first).
type fifoRanker struct{}

func (fifoRanker) Rank(_ context.Context, snap *cluster.Snapshot, _ sched.Predictor) ([]sched.Ranked, error) {
	out := make([]sched.Ranked, len(snap.Pending))
	for i := range snap.Pending {
		out[i] = sched.Ranked{Job: &snap.Pending[i], Score: float64(-i)}
	}
	return out, nil
}

// firstFitPlacer is Nomad-style bin-packing on a snapshot: each ranked job in turn goes to the
// node with the fewest free GPUs that fits it (lowest free instance IDs), or, if it may span
// nodes, to the fewest nodes of one type, fullest-free first; it stops at the first job that
// does not fit (head-of-line blocking). It mirrors sim.State.BestFit decision for decision.
type firstFitPlacer struct{}

func (firstFitPlacer) Place(_ context.Context, snap *cluster.Snapshot, ranked []sched.Ranked, pred sched.Predictor) ([]cluster.Decision, sched.PlaceStats, error) {
	t0 := time.Now()
	busy := map[string]bool{}
	for _, a := range snap.Running {
		for _, id := range a.DeviceIDs {
			busy[id] = true
		}
	}
	type node struct {
		n    *cluster.Node
		g    *cluster.DeviceGroup
		free []string
	}
	nodes := make([]node, 0, len(snap.Nodes))
	for i := range snap.Nodes {
		n := &snap.Nodes[i]
		if !n.Ready() {
			continue
		}
		for k := range n.Devices {
			g := &n.Devices[k]
			nd := node{n: n, g: g}
			for _, in := range g.Instances {
				if in.Healthy && !busy[in.ID] {
					nd.free = append(nd.free, in.ID)
				}
			}
			nodes = append(nodes, nd)
		}
	}
	var types []string
	seen := map[string]bool{}
	for _, nd := range nodes {
		if !seen[nd.g.GPUType] {
			seen[nd.g.GPUType] = true
			types = append(types, nd.g.GPUType)
		}
	}
	sort.Strings(types)
	var out []cluster.Decision
	for _, r := range ranked {
		j := r.Job
		take := func(nd *node, k int) cluster.Assignment {
			ids := append([]string(nil), nd.free[:k]...)
			nd.free = nd.free[k:]
			return cluster.Assignment{NodeID: nd.n.ID, DeviceGroup: nd.g.ID(), InstanceIDs: ids}
		}
		best := -1
		for i := range nodes {
			nd := &nodes[i]
			if len(nd.free) < j.GPUs || (best >= 0 && len(nd.free) >= len(nodes[best].free)) {
				continue
			}
			if pred.Predict(j, nd.g.GPUType, j.GPUs).Throughput <= 0 {
				continue
			}
			best = i
			if len(nd.free) == j.GPUs {
				break
			}
		}
		d := cluster.Decision{Namespace: j.Namespace, JobID: j.ID, Group: j.Group}
		if best >= 0 {
			d.GPUType = nodes[best].g.GPUType
			d.Assign = []cluster.Assignment{take(&nodes[best], j.GPUs)}
			out = append(out, d)
			continue
		}
		placed := false
		for _, t := range types {
			if j.MaxNodes() <= 1 || pred.Predict(j, t, j.GPUs).Throughput <= 0 {
				continue
			}
			var idx []int
			total := 0
			for i := range nodes {
				if nodes[i].g.GPUType == t && len(nodes[i].free) > 0 {
					idx = append(idx, i)
					total += len(nodes[i].free)
				}
			}
			if total < j.GPUs {
				continue
			}
			sort.SliceStable(idx, func(a, b int) bool { return len(nodes[idx[a]].free) > len(nodes[idx[b]].free) })
			need, used := j.GPUs, 0
			for _, i := range idx {
				if used == j.MaxNodes() || need == 0 {
					break
				}
				need -= min(need, len(nodes[i].free))
				used++
			}
			if need > 0 {
				continue
			}
			need = j.GPUs
			for _, i := range idx {
				if need == 0 {
					break
				}
				k := min(need, len(nodes[i].free))
				d.Assign = append(d.Assign, take(&nodes[i], k))
				need -= k
			}
			d.GPUType = t
			out = append(out, d)
			placed = true
			break
		}
		if !placed {
			break
		}
	}
	return out, sched.PlaceStats{Candidates: len(ranked), Solver: "greedy", SolveTime: time.Since(t0)}, nil
}

// PipelineFIFO is FIFO expressed as production pipeline stages (a ranker and a placer on the
// snapshot) and run through sched.Pipeline against the engine. Tests use it to prove the
// Snapshot/Pin path schedules exactly as the native fifo does.
func PipelineFIFO() *sim.PipelinePolicy {
	tab, err := throughput.Bundled()
	if err != nil {
		panic(err)
	}
	return &sim.PipelinePolicy{PolicyName: "fifo-pipeline", Ranker: fifoRanker{}, Placer: firstFitPlacer{},
		Predictor: TablePredictor{Table: tab}}
}
