package baselines

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

// gavelVar is a column of Gavel's LP: job j (index in the active jobs) on GPU type t, whose
// throughput there is thr.
type gavelVar struct {
	j   int
	t   string
	thr float64
}

// solve computes Gavel's max-min allocation X with HiGHS. Variables: X[j][t] for the pairs a
// job can run on (it fits the type's nodes within its distribution degree and the predictor
// gives a throughput), then z. Rows: per job sum_t X <= 1; per type sum_j gpus_j X <= cap; per
// job sum_t thr X / equal_j - z >= 0.
func (g *Gavel) solve(snap *cluster.Snapshot, jobs []activeJob, pred sched.Predictor) error {
	// The last allocation's rows, emptied, hold this one's (only Rank reads them, under g.mu).
	for _, row := range g.alloc {
		clear(row)
		g.spareRows = append(g.spareRows, row)
	}
	g.alloc = reset(g.alloc)
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
	vars := g.lpVars[:0]
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
			vars = append(vars, gavelVar{ji, t, thr})
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
	// Rows list their columns in ascending order (vars are in job order, z comes last), as
	// HiGHS is given them.
	row := 0
	add := func(lb, ub float64, cols []int, val func(c int) float64) {
		m.RowLower = append(m.RowLower, lb)
		m.RowUpper = append(m.RowUpper, ub)
		for _, c := range cols {
			m.ConstMatrix = append(m.ConstMatrix, highs.Nonzero{Row: row, Col: c, Val: val(c)})
		}
		row++
	}
	byType := map[string][]int{}
	for i, x := range vars {
		byType[x.t] = append(byType[x.t], i)
	}
	// vars are in job order: each job's columns follow the last job's (one scratch array).
	cols := make([]int, 0, len(types)+1)
	next := 0
	// HiGHS copies the matrix (ToRawModel): the next solve reuses the arrays.
	g.lpVars = vars
	m.ConstMatrix = g.lpNZ[:0]
	defer func() { g.lpNZ = m.ConstMatrix }()
	one := func(int) float64 { return 1 }
	for ji := range jobs {
		cols = cols[:0]
		for ; next < len(vars) && vars[next].j == ji; next++ {
			cols = append(cols, next)
		}
		if len(cols) == 0 {
			continue // it cannot run on any type: no share to be fair about
		}
		add(math.Inf(-1), 1, cols, one)
		add(0, math.Inf(1), append(cols, z), func(c int) float64 {
			if c == z {
				return -1
			}
			return vars[c].thr / equal[ji]
		})
	}
	for _, t := range types {
		if cols := byType[t]; cols != nil {
			add(math.Inf(-1), float64(capacity[t]), cols, func(c int) float64 { return float64(jobs[vars[c].j].GPUs) })
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
			if n := len(g.spareRows); n > 0 {
				g.alloc[k], g.spareRows = g.spareRows[n-1], g.spareRows[:n-1]
			} else {
				g.alloc[k] = map[string]float64{}
			}
		}
		g.alloc[k][x.t] = val
	}
	return nil
}
