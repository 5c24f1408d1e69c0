// Package servicetest has small, predictable pipeline stages for tests of the sidecar: the FIFO
// ranker, a fixed-table predictor and a first-fit placer that prefers the fastest GPU type.
// They stand in for sidecar/stages/rank, sidecar/stages/predict and sidecar/stages/place so the service can be
// tested on its own.
package servicetest

import (
	"context"
	"math"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/hetgpu/hetgpu/model/cluster"
	"github.com/hetgpu/hetgpu/sidecar/sched"
	"github.com/hetgpu/hetgpu/sidecar/stages/place"
)

// FIFO ranks oldest first (place.FIFO, the baselines' ranker); score = jobs behind it.
type FIFO = place.FIFO

// Speeds is a per-GPU throughput (steps/s) and power (W) per type.
var Speeds = map[string][2]float64{
	"t4": {100, 70}, "v100": {300, 250}, "a100": {700, 300}, "h100": {1400, 500}, "k80": {40, 150}, "p100": {150, 200},
}

// Table predicts throughput = per-GPU speed x GPUs (x 0.9 per extra node is the placer's
// business, not modelled), power = per-GPU power x GPUs. It records what it learned.
type Table struct {
	mu       sync.Mutex
	Observed []cluster.Observation
	// NaN makes every estimate's uncertainty NaN, as a predictor may for an unknown workload.
	NaN bool
	// Partial makes the table take partial runs (service.PartialLearner), as the predictor does.
	Partial bool
}

// LearnsPartial implements service.PartialLearner.
func (t *Table) LearnsPartial() bool { return t.Partial }

// Predict implements sched.Predictor.
func (t *Table) Predict(_ *cluster.Job, gpuType string, gpus int) sched.Estimate {
	s, ok := Speeds[gpuType]
	if !ok {
		return sched.Estimate{Source: "test-table"}
	}
	u := 0.1
	if t.NaN {
		u = math.NaN()
	}
	return sched.Estimate{Throughput: s[0] * float64(gpus), PowerW: s[1] * float64(gpus), Uncertainty: u, Source: "test-table"}
}

// Observe implements sched.Learner.
func (t *Table) Observe(_ context.Context, o cluster.Observation) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.Observed = append(t.Observed, o)
	return nil
}

// Learned returns the observations received.
func (t *Table) Learned() []cluster.Observation {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]cluster.Observation(nil), t.Observed...)
}

// FirstFit places each ranked job, in order, on the fastest GPU type with a node that has
// enough free healthy GPUs (or, for data-parallel jobs, GPUsPerNode on each of enough
// nodes); jobs that do not fit wait. T_min is respected.
type FirstFit struct{ Pred sched.Predictor }

// Place implements sched.Placer.
func (f FirstFit) Place(_ context.Context, _ *sched.RoundState, snap *cluster.Snapshot, ranked []sched.Ranked, pred sched.Predictor) ([]cluster.Decision, sched.PlaceStats, error) {
	t0 := time.Now()
	groups := slices.Clone(snap.Free().Groups())
	sort.SliceStable(groups, func(a, b int) bool { return Speeds[groups[a].Group.GPUType][0] > Speeds[groups[b].Group.GPUType][0] })
	used := map[string]bool{} // taken by this round's decisions
	free := func(fg *cluster.FreeGroup) []string {
		var ids []string
		for _, id := range fg.IDs {
			if !used[id] {
				ids = append(ids, id)
			}
		}
		return ids
	}
	var out []cluster.Decision
	for rank, r := range ranked {
		j := r.Job
		per, nodes := j.GPUs, 1
		if j.GPUsPerNode > 0 {
			per, nodes = j.GPUsPerNode, j.GPUs/j.GPUsPerNode
		}
		var d *cluster.Decision
		for gi := 0; gi < len(groups) && d == nil; gi++ {
			typ := groups[gi].Group.GPUType
			e := pred.Predict(j, typ, j.GPUs)
			if e.Throughput <= 0 || e.Throughput < j.Hetgpu.MinThroughput {
				continue
			}
			var as []cluster.Assignment
			for gj := gi; gj < len(groups) && len(as) < nodes; gj++ {
				if groups[gj].Group.GPUType != typ {
					continue
				}
				ids := free(&groups[gj])
				if len(ids) >= per {
					as = append(as, cluster.Assignment{NodeID: groups[gj].Node.ID, DeviceGroup: groups[gj].Group.ID(), InstanceIDs: ids[:per]})
				}
			}
			if len(as) == nodes {
				d = &cluster.Decision{Namespace: j.Namespace, JobID: j.ID, Group: j.Group, Assign: as, GPUType: typ,
					PredThroughput: e.Throughput, PredPowerW: e.PowerW, Score: r.Score, Rank: rank + 1,
					Explanation: "first fit on the fastest type"}
			}
		}
		if d == nil {
			continue
		}
		for _, a := range d.Assign {
			for _, id := range a.InstanceIDs {
				used[id] = true
			}
		}
		out = append(out, *d)
	}
	return out, sched.PlaceStats{Candidates: len(ranked), Solver: "greedy", SolveTime: time.Since(t0)}, nil
}
