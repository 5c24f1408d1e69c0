package place

import (
	"fmt"
	"math"
	"runtime"
	"sort"

	"github.com/lanl/highs"

	"github.com/hetgpu/hetgpu/model/cluster"
	"github.com/hetgpu/hetgpu/sidecar/sched"
)

// SpreadPredictor is a predictor that also knows a job's throughput spread over several nodes
// (the simulator's measured table does). Gavel's allocation uses it for a type whose nodes
// are too small for the job; other predictors are taken as they are.
type SpreadPredictor interface {
	PredictSpread(job *cluster.Job, gpuType string, gpus, nodes int) sched.Estimate
}

// solve computes Gavel's max-min allocation X with HiGHS. Variables: X[j][t] for the pairs a
// job can run on (it fits the type's nodes within its distribution degree and the predictor
// gives a throughput), then z. Rows: per job sum_t X <= 1; per type sum_j gpus_j X <= cap; per
// job sum_t thr X / equal_j - z >= 0.
func (g *Gavel) solve(snap *cluster.Snapshot, jobs []activeJob, pred sched.Predictor) error {
	g.alloc = map[string]map[string]float64{}
	if len(jobs) == 0 {
		return nil
	}
	capacity := typeCapacity(snap)
	// The largest node per type (live, nodes come and go).
	perNode := map[string]int{}
	for i := range snap.Nodes {
		for _, d := range snap.Nodes[i].Devices {
			perNode[d.GPUType] = max(perNode[d.GPUType], len(d.Instances))
		}
	}
	types := make([]string, 0, len(capacity))
	total := 0.0
	for t, c := range capacity {
		types = append(types, t)
		total += float64(c)
	}
	sort.Strings(types)
	type v struct {
		j   int
		t   string
		thr float64
	}
	var vars []v
	equal := make([]float64, len(jobs))
	for ji, j := range jobs {
		for _, t := range types {
			per := perNode[t]
			if per == 0 {
				continue
			}
			nodes := (j.GPUs + per - 1) / per
			if nodes > j.MaxNodes() || j.GPUs > capacity[t] {
				continue
			}
			var thr float64
			if sp, ok := pred.(SpreadPredictor); ok {
				thr = sp.PredictSpread(j.Job, t, j.GPUs, nodes).Throughput
			} else {
				thr = pred.Predict(j.Job, t, j.GPUs).Throughput
			}
			if thr <= 0 {
				continue
			}
			vars = append(vars, v{ji, t, thr})
			equal[ji] += thr * float64(capacity[t]) / total
		}
	}
	nv := len(vars) + 1
	z := len(vars)
	m := highs.Model{Maximize: true, ColCosts: make([]float64, nv), ColLower: make([]float64, nv), ColUpper: make([]float64, nv)}
	for i := range vars {
		m.ColUpper[i] = 1
	}
	m.ColCosts[z] = 1
	m.ColUpper[z] = math.Inf(1)
	row := 0
	add := func(lb, ub float64, nz map[int]float64) {
		m.RowLower = append(m.RowLower, lb)
		m.RowUpper = append(m.RowUpper, ub)
		cols := make([]int, 0, len(nz))
		for c := range nz {
			cols = append(cols, c)
		}
		sort.Ints(cols)
		for _, c := range cols {
			m.ConstMatrix = append(m.ConstMatrix, highs.Nonzero{Row: row, Col: c, Val: nz[c]})
		}
		row++
	}
	byJob := make([]map[int]float64, len(jobs))
	fair := make([]map[int]float64, len(jobs))
	byType := map[string]map[int]float64{}
	for i, x := range vars {
		if byJob[x.j] == nil {
			byJob[x.j], fair[x.j] = map[int]float64{}, map[int]float64{z: -1}
		}
		byJob[x.j][i] = 1
		fair[x.j][i] = x.thr / equal[x.j]
		if byType[x.t] == nil {
			byType[x.t] = map[int]float64{}
		}
		byType[x.t][i] = float64(jobs[x.j].GPUs)
	}
	for ji := range jobs {
		if byJob[ji] == nil {
			continue // it cannot run on any type: no share to be fair about
		}
		add(math.Inf(-1), 1, byJob[ji])
		add(0, math.Inf(1), fair[ji])
	}
	for _, t := range types {
		if byType[t] != nil {
			add(math.Inf(-1), float64(capacity[t]), byType[t])
		}
	}
	if len(vars) == 0 {
		return nil // nothing can run anywhere: an empty allocation
	}
	raw, err := m.ToRawModel()
	if err != nil {
		return fmt.Errorf("gavel LP: %w", err)
	}
	// lanl/highs v1.0.0's RawModel.Solve hands the Highs object to the solution and stops
	// referencing the model, whose finalizer then may free that object while the solution is
	// still read (a SIGSEGV seen with policies simulated in parallel): keep it alive.
	defer runtime.KeepAlive(raw)
	if err := raw.SetBoolOption("output_flag", false); err != nil {
		return fmt.Errorf("gavel LP: %w", err)
	}
	if err := raw.SetIntOption("threads", 1); err != nil {
		return fmt.Errorf("gavel LP: %w", err)
	}
	sol, err := raw.Solve()
	if err != nil {
		return fmt.Errorf("gavel LP over %d jobs: %w", len(jobs), err)
	}
	if sol.Status != highs.Optimal {
		return fmt.Errorf("gavel LP over %d jobs: status %s", len(jobs), sol.Status)
	}
	for i, x := range vars {
		val := sol.ColumnPrimal[i]
		if val <= 1e-9 {
			continue
		}
		k := jobs[x.j].key
		if g.alloc[k] == nil {
			g.alloc[k] = map[string]float64{}
		}
		g.alloc[k][x.t] = val
	}
	return nil
}
