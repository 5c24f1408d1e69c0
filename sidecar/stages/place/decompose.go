package place

import (
	"errors"
	"math"
	"runtime"
	"sort"
	"sync"
	"time"

	"github.com/lanl/highs"
)

// The decomposition for large clusters, in two steps on the full model's columns:
//
//  1. Types: a small MILP gives each window job one GPU type (or none), maximising the job's best
//     column value on that type, subject to per-type free GPUs, per-type "big job" packing
//     rows (jobs needing s GPUs on a node <= nodes with s free, counted per node they need)
//     and namespace caps.
//  2. Per type: the jobs given that type and only their columns of that type form one model,
//     solved like the full one (greedy, LP, restricted MILP, MILP), all types in parallel.
//     Types share no GPU, node or switch; namespace caps are split by what step 1 gave each
//     type.
//
// Jobs left out are then backfilled greedily, as after the full MILP. If the result is worth
// less than the greedy solution of the full model, the greedy solution is kept. The price is
// optimality: a job only sees its step-1 type. TestDecompositionGap measures it against the
// full MILP; the README reports the numbers.

// decompose applies the chosen options to st and returns them.
func (m *model) decompose(full *scope, st *state, deadline time.Time, agg *Stats) []option {
	order := full.jobs
	st0 := st.clone()
	warm := full.greedy
	if warm == nil {
		warm = m.greedyRealize(full, order, st0.clone())
	}
	typeOf := m.assignTypes(full.opts, full.byJob, order, st, deadline, agg)

	type sub struct {
		sc     *scope
		chosen []option
		ss     solveStats
	}
	var subs []*sub
	for t := range m.types {
		var jobs []int
		budget := make([]int, len(m.nsNames))
		for ns := range budget {
			budget[ns] = -1
			if m.nsCap[ns] >= 0 {
				budget[ns] = 0
			}
		}
		for _, ji := range order {
			if typeOf[ji] == t {
				jobs = append(jobs, ji)
				if ns := m.jobs[ji].ns; budget[ns] >= 0 {
					budget[ns] += m.jobs[ji].g
				}
			}
		}
		if len(jobs) == 0 {
			continue
		}
		subs = append(subs, &sub{sc: full.sub(jobs, func(o *option) bool { return o.typ == t }, budget)})
	}
	agg.Subproblems = len(subs)
	par := m.cfg.Parallelism
	if par <= 0 {
		par = runtime.GOMAXPROCS(0)
	}
	sem := make(chan struct{}, par)
	var wg sync.WaitGroup
	for _, s := range subs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			s.chosen, s.ss = m.solveScope(s.sc, st, deadline)
		}()
	}
	wg.Wait()
	var out []option
	for _, s := range subs {
		agg.add(s.ss)
		for i := range s.chosen {
			if m.fits(&s.chosen[i], st) { // types are disjoint; this only guards against surprises
				m.apply(&s.chosen[i], st)
				out = append(out, s.chosen[i])
			}
		}
	}
	// Repair: window jobs left out by their type get any column that still fits.
	placed := map[int]bool{}
	for _, o := range out {
		placed[o.job] = true
	}
	var left []int
	for _, ji := range order {
		if !placed[ji] {
			left = append(left, ji)
		}
	}
	out = append(out, m.greedyRealize(full.sub(left, nil, nil), left, st)...)
	if sumOpts(out) < sumOpts(warm) {
		*st = *st0.clone()
		for i := range warm {
			m.apply(&warm[i], st)
		}
		agg.GreedyKept = true
		return warm
	}
	return out
}

// assignTypes is step 1. It returns each job's type, or -1. The rows are those of the type
// MILP described above; its LP relaxation is solved and rounded.
func (m *model) assignTypes(opts []option, byJob map[int][]int, order []int, st *state, deadline time.Time, agg *Stats) map[int]int {
	type pair struct{ job, typ int }
	best := map[pair]float64{}
	var pairs []pair
	for _, ji := range order {
		for _, oi := range byJob[ji] {
			k := pair{ji, opts[oi].typ}
			if v, ok := best[k]; !ok || opts[oi].value > v {
				if !ok {
					pairs = append(pairs, k)
				}
				best[k] = opts[oi].value
			}
		}
	}
	typeFree := make([]int, len(m.types))
	unitsWith := make([]map[int]int, len(m.types)) // threshold -> units with that many free
	need := func(ji int) (perNode, nodes int) {
		j := &m.jobs[ji]
		if j.p > 0 {
			return j.p, j.g / j.p
		}
		perNode = j.g
		if j.k > 1 {
			perNode = int(math.Ceil(float64(j.g) / float64(j.k)))
		}
		return perNode, int(math.Ceil(float64(j.g) / float64(perNode)))
	}
	thresholds := map[int]bool{}
	for _, p := range pairs {
		if s, _ := need(p.job); s > 1 {
			thresholds[s] = true
		}
	}
	for t := range unitsWith {
		unitsWith[t] = map[int]int{}
	}
	// unitsWith[t][s] is how many items of s GPUs fit on type t's nodes (sum of floor(f/s)).
	for u := range m.units {
		f := m.unitFree(u, st)
		t := m.units[u].typ
		typeFree[t] += f
		for s := range thresholds {
			unitsWith[t][s] += f / s
		}
	}

	// Greedy assignment: rank order, best type with room.
	left := append([]int(nil), typeFree...)
	nsLeft := make([]int, len(m.nsNames))
	for ns := range nsLeft {
		nsLeft[ns] = -1
		if m.nsCap[ns] >= 0 {
			nsLeft[ns] = max(m.nsCap[ns]-st.nsGPUs[ns], 0)
		}
	}
	slots := make([]map[int]int, len(m.types))
	for t := range slots {
		slots[t] = map[int]int{}
		for s, n := range unitsWith[t] {
			slots[t][s] = n
		}
	}
	greedy := map[int]int{}
	capLeft := m.capsLeft(st)
	for _, ji := range order {
		greedy[ji] = -1
		j := &m.jobs[ji]
		if nsLeft[j.ns] >= 0 && nsLeft[j.ns] < j.g {
			continue
		}
		bt, bv := -1, math.Inf(-1)
		s, k := need(ji)
		for t := range m.types {
			v, ok := best[pair{ji, t}]
			if !ok || left[t] < j.g || (s > 1 && slots[t][s] < k) || v <= bv || !m.capsFitOn(capLeft, ji, t, false) {
				continue
			}
			bt, bv = t, v
		}
		if bt < 0 {
			continue
		}
		greedy[ji] = bt
		m.capsFitOn(capLeft, ji, bt, true)
		left[bt] -= j.g
		for th := range slots[bt] {
			if th <= s {
				slots[bt][th] -= k * ((s + th - 1) / th)
			}
		}
		if nsLeft[j.ns] >= 0 {
			nsLeft[j.ns] -= j.g
		}
	}

	// The MILP.
	var mod highs.Model
	mod.Maximize = true
	col := map[pair]int{}
	for i, p := range pairs {
		col[p] = i
		mod.ColCosts = append(mod.ColCosts, best[p])
	}
	row := 0
	add := func(ub float64, e []highs.Nonzero) {
		if len(e) == 0 {
			return
		}
		for _, x := range e {
			x.Row = row
			mod.ConstMatrix = append(mod.ConstMatrix, x)
		}
		mod.RowLower = append(mod.RowLower, math.Inf(-1))
		mod.RowUpper = append(mod.RowUpper, ub)
		row++
	}
	perJob := map[int][]highs.Nonzero{}
	perType := make([][]highs.Nonzero, len(m.types))
	perNS := map[int][]highs.Nonzero{}
	perSlot := map[[2]int][]highs.Nonzero{}
	perSlotW := map[[2]int][]highs.Nonzero{}
	for i, p := range pairs {
		j := &m.jobs[p.job]
		perJob[p.job] = append(perJob[p.job], highs.Nonzero{Col: i, Val: 1})
		perType[p.typ] = append(perType[p.typ], highs.Nonzero{Col: i, Val: float64(j.g)})
		if m.nsCap[j.ns] >= 0 {
			perNS[j.ns] = append(perNS[j.ns], highs.Nonzero{Col: i, Val: float64(j.g)})
		}
		s, k := need(p.job)
		for th := range thresholds {
			if s > 1 && th <= s {
				key := [2]int{p.typ, th}
				perSlot[key] = append(perSlot[key], highs.Nonzero{Col: i, Val: float64(k)})
				if s%th == 0 {
					perSlotW[key] = append(perSlotW[key], highs.Nonzero{Col: i, Val: float64(k * s)})
				}
			}
		}
	}
	for _, ji := range order {
		if len(perJob[ji]) > 1 {
			add(1, perJob[ji])
		}
	}
	for t := range perType {
		add(float64(typeFree[t]), perType[t])
	}
	for _, ns := range sortedKeys(perNS) {
		add(float64(nsLeft0(m, st, ns)), perNS[ns])
	}
	for k := range m.caps { // queue caps (queues.go)
		var e []highs.Nonzero
		for i, p := range pairs {
			if m.capCountsOn(k, p.job, p.typ) {
				e = append(e, highs.Nonzero{Col: i, Val: float64(m.jobs[p.job].g)})
			}
		}
		add(float64(m.capRoom(k, st)), e)
	}
	slotKeys := make([][2]int, 0, len(perSlot))
	for k := range perSlot {
		slotKeys = append(slotKeys, k)
	}
	sort.Slice(slotKeys, func(a, b int) bool {
		if slotKeys[a][0] != slotKeys[b][0] {
			return slotKeys[a][0] < slotKeys[b][0]
		}
		return slotKeys[a][1] < slotKeys[b][1]
	})
	for _, k := range slotKeys {
		add(float64(unitsWith[k[0]][k[1]]), perSlot[k])
		add(float64(k[1]*unitsWith[k[0]][k[1]]), perSlotW[k])
	}
	n := len(mod.ColCosts)
	mod.ColLower = make([]float64, n)
	mod.ColUpper = make([]float64, n)
	mod.VarTypes = make([]highs.VariableType, n)
	for i := range mod.ColUpper {
		mod.ColUpper[i] = 1
		mod.VarTypes[i] = highs.IntegerType
	}
	agg.Cols += n
	agg.Rows += row
	if n == 0 {
		return greedy
	}
	// Its LP relaxation is enough: each job takes the type the LP gives it most of; jobs the LP
	// leaves out keep the greedy type and compete in that type's model.
	mod.VarTypes = nil
	end := deadline
	if !m.roundEnd.IsZero() && m.roundEnd.Before(end) {
		end = m.roundEnd
	}
	res, err := m.runHiGHS(mod, end, nil)
	agg.LPIterations += res.LPIters
	if end.Before(deadline) && (errors.Is(err, errNoTime) || err == nil && res.ModelStatus == highsModelTimeLimit) {
		agg.DeadlineHit = true
		agg.fallback("type assignment: round deadline before its LP relaxation ended")
		return greedy
	}
	if err != nil || !res.HasPrimal {
		reason := "no solution"
		if err != nil {
			reason = err.Error()
		}
		agg.fallback("type assignment: " + reason)
		return greedy
	}
	out := map[int]int{}
	bestY := map[int]float64{}
	for _, ji := range order {
		out[ji] = greedy[ji]
	}
	for i, p := range pairs {
		if y := res.X[i]; y > 1e-6 && y > bestY[p.job] {
			bestY[p.job] = y
			out[p.job] = p.typ
		}
	}
	return out
}

func nsLeft0(m *model, st *state, ns int) int { return max(m.nsCap[ns]-st.nsGPUs[ns], 0) }
