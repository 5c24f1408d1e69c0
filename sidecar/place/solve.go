package place

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/lanl/highs"
)

// fits reports whether option o can be applied to state st.
func (m *model) fits(o *option, st *state) bool {
	j := &m.jobs[o.job]
	for _, p := range o.parts {
		if !o.coloc && st.domFree[p.dom] < p.count {
			return false
		}
		for _, ii := range p.insts {
			if o.coloc {
				if st.instUsed[ii] >= m.cfg.MaxShare {
					return false
				}
			} else if st.instUsed[ii] != 0 {
				return false
			}
		}
		if iso := m.doms[p.dom].iso; iso >= 0 && st.isoNS[iso] != -1 && st.isoNS[iso] != j.ns {
			return false
		}
	}
	if cap := m.cfg.MaxJobsPerNode; cap > 0 {
		for _, u := range o.units {
			if st.nodeJobs[m.units[u].node] >= cap {
				return false
			}
		}
	}
	if c := m.nsCap[j.ns]; c >= 0 && st.nsGPUs[j.ns]+j.g > c {
		return false
	}
	return m.capsFit(o, st)
}

// apply books option o in state st.
func (m *model) apply(o *option, st *state) {
	j := &m.jobs[o.job]
	for _, p := range o.parts {
		if !o.coloc {
			st.domFree[p.dom] -= p.count
		}
		for _, ii := range p.insts {
			st.instUsed[ii]++
		}
		if iso := m.doms[p.dom].iso; iso >= 0 {
			st.isoNS[iso] = j.ns
		}
	}
	for _, u := range o.units {
		st.nodeJobs[m.units[u].node]++
	}
	st.nsGPUs[j.ns] += j.g
	m.capsApply(o, st)
}

// scope is one optimisation problem: jobs, the units they may use, their classes and the
// class-level candidate options.
type scope struct {
	jobs   []int
	cs     *classSet
	opts   []option
	byJob  map[int][]int
	budget []int
	// noPolish skips the full MILP (step 4): the second pass keeps its latency low. A round
	// deadline cut there is not a fallback: the round keeps the first pass's solution.
	noPolish bool
	// greedy, when set, is greedyRealize of the scope's jobs against the state it is solved
	// against (computed once by the caller).
	greedy []option
}

// prepareScope builds classes and class-level options for jobs (in rank order) over the units
// allow admits. It uses the model's caches, so scopes are prepared one at a time.
func (m *model) prepareScope(jobs []int, allow func(u int) bool, st *state, budget []int) *scope {
	sc := &scope{jobs: jobs, byJob: make(map[int][]int, len(jobs)), budget: budget}
	if !m.cfg.exhaustive {
		sc.opts = make([]option, 0, len(jobs)*min(m.cfg.MaxOptionsPerJob, 32))
	}
	sc.cs = m.buildClasses(st, allow, jobs)
	for _, ji := range jobs {
		var opts []option
		if m.cfg.exhaustive {
			opts = m.exhaustiveOptions(ji, st)
		} else {
			opts = m.classOptions(ji, sc.cs, st)
		}
		for _, o := range opts {
			sc.add(o)
		}
	}
	return sc
}

// add appends a column (options of one job are distinct by construction) and returns its
// index; options outside the scope's classes are dropped (-1).
func (sc *scope) add(o option) int {
	for _, p := range o.parts {
		if sc.cs.classOf[p.dom] < 0 && !o.coloc {
			return -1
		}
	}
	i := len(sc.opts)
	o.col = i
	sc.opts = append(sc.opts, o)
	sc.byJob[o.job] = append(sc.byJob[o.job], i)
	return i
}

// sub is a view of the scope: some of its jobs, the columns keep admits, its own namespace
// budget. Column indices stay those of the scope.
func (sc *scope) sub(jobs []int, keep func(o *option) bool, budget []int) *scope {
	out := &scope{jobs: jobs, cs: sc.cs, opts: sc.opts, byJob: map[int][]int{}, budget: budget}
	for _, ji := range jobs {
		for _, c := range sc.byJob[ji] {
			if keep == nil || keep(&sc.opts[c]) {
				out.byJob[ji] = append(out.byJob[ji], c)
			}
		}
	}
	return out
}

// columns lists the scope's columns of its jobs, ascending.
func (sc *scope) columns() []int {
	var cols []int
	for _, ji := range sc.jobs {
		cols = append(cols, sc.byJob[ji]...)
	}
	slices.Sort(cols)
	return cols
}

// greedyRealize takes jobs in order and gives each its best column that can be realized in
// st (mutated). Columns of a job are sorted best first.
func (m *model) greedyRealize(sc *scope, order []int, st *state) []option {
	base := st.clone()
	var out []option
	for _, ji := range order {
		if !m.anyCapacity(st) {
			break
		}
		for _, oi := range sc.byJob[ji] {
			if r, ok := m.realize(sc.cs, &sc.opts[oi], st, base, sc.budget); ok {
				out = append(out, r)
				break
			}
		}
	}
	return out
}

// solveScope optimises a prepared scope against st (not modified) and returns the chosen,
// realized options. It stops at the first step whose solution is within MIPGap of the LP
// bound:
//
//  1. greedy: jobs in rank order, each its best realizable column (also done, without an LP,
//     when within MIPGap of every job on its best column);
//  2. the LP relaxation (the bound), and its rounding (columns by LP value, realized while
//     they fit, then the greedy for the jobs left);
//  3. a restricted MILP (RENS-like): each job keeps the columns the LP uses plus its best
//     one, or its best six if the LP places it fractionally or not at all; warm-started from
//     the greedy solution, it is small and nearly integral;
//  4. the full MILP, warm-started from the best solution so far.
//
// Steps 3 and 4 together get at most PolishLimit; steps 2 to 4 end at the round deadline
// (Config.RoundDeadline).
//
// Every MILP solution is realized (first fit decreasing into concrete domains); jobs whose
// column cannot be realized get their best realizable one. On error or time limit the best
// solution at hand is used and the solve is flagged as a fallback.
func (m *model) solveScope(sc *scope, st *state, deadline time.Time) ([]option, solveStats) {
	var ss solveStats
	for _, ji := range sc.jobs {
		ss.cands += len(sc.byJob[ji])
	}
	best := sc.greedy
	if best == nil {
		best = m.greedyRealize(sc, sc.jobs, st.clone())
	}
	bestObj := sumOpts(best)
	ss.greedyObjective, ss.objective = bestObj, bestObj
	all := sc.columns()
	if len(all) == 0 {
		ss.status = "empty"
		return best, ss
	}
	// Every job on its best column, capacity aside, bounds the optimum: when the greedy
	// solution is within MIPGap of that, no LP is needed (typically a second pass with room
	// for every job left).
	trivial := 0.0
	for _, ji := range sc.jobs {
		b := 0.0
		for _, c := range sc.byJob[ji] {
			b = max(b, sc.opts[c].value)
		}
		trivial += b
	}
	if relGap(trivial, bestObj) <= m.cfg.MIPGap {
		ss.bound, ss.gap, ss.status = trivial, relGap(trivial, bestObj), "greedy within gap of the best columns"
		return best, ss
	}
	fallback := func(reason string) ([]option, solveStats) {
		ss.fallback, ss.reason, ss.objective = true, reason, bestObj
		return best, ss
	}
	mod, zIndex := m.buildMILP(sc, all, st)
	ss.cols, ss.rows = len(mod.ColCosts), len(mod.RowUpper)

	// 1. LP relaxation: the bound, and a guide.
	t0 := time.Now()
	lp := mod
	lp.VarTypes = nil
	lpEnd, lpCut := deadline, !m.roundEnd.IsZero() && m.roundEnd.Before(deadline)
	if lpCut {
		lpEnd = m.roundEnd
	}
	lpRes, err := m.runHiGHS(lp, lpEnd, nil)
	ss.lpTime = time.Since(t0)
	ss.lpIters += lpRes.LPIters
	if lpCut && (errors.Is(err, errNoTime) || err == nil && lpRes.ModelStatus == highsModelTimeLimit) {
		ss.deadlineHit = true
		if sc.noPolish { // the second pass keeps its greedy solution; the round keeps the first's
			ss.status = "greedy (second pass; round deadline before its LP relaxation ended)"
			return best, ss
		}
		return fallback("round deadline before the LP relaxation ended")
	}
	if err != nil {
		return fallback(err.Error())
	}
	if lpRes.ModelStatus != highsModelOptimal || !lpRes.HasPrimal {
		return fallback("LP relaxation: HiGHS status " + highsModelStatusNames[lpRes.ModelStatus])
	}
	bound := lpRes.Objective
	ss.bound = bound
	lpX := make([]float64, len(sc.opts)) // by scope column
	for k, c := range all {
		lpX[c] = lpRes.X[k]
	}
	done := func(sol []option, obj float64, status string) ([]option, solveStats) {
		ss.gap, ss.objective, ss.status = relGap(bound, obj), obj, status
		return sol, ss
	}
	if relGap(bound, bestObj) <= m.cfg.MIPGap {
		return done(best, bestObj, "greedy within gap")
	}
	if r := m.realizeColumns(sc, sc.jobs, st, lpX); sumOpts(r) > bestObj {
		best, bestObj = r, sumOpts(r)
		if relGap(bound, bestObj) <= m.cfg.MIPGap {
			return done(best, bestObj, "rounded LP within gap")
		}
	}

	// 2. Restricted MILP (RENS-like): each job keeps only the columns the LP uses plus its
	// best one. The model is a fraction of the full one and nearly integral, so HiGHS solves
	// it quickly; its optimum is usually within a fraction of a percent of the full MILP's.
	var restricted []int
	{
		keep := make([]bool, len(sc.opts))
		for _, c := range all {
			keep[c] = lpX[c] > 1e-6
		}
		for _, ji := range sc.jobs {
			cols := sc.byJob[ji]
			mass := 0.0
			for _, c := range cols {
				mass += lpX[c]
			}
			// Jobs the LP places fractionally or not at all are the contested ones: they keep
			// more of their best columns than the others.
			n := restrictKeep
			if mass < 1-1e-6 || lpFractional(lpX, cols) {
				n = restrictKeepContested
			}
			for k := 0; k < min(n, len(cols)); k++ {
				keep[cols[k]] = true
			}
		}
		for i, k := range keep {
			if k {
				restricted = append(restricted, i)
			}
		}
	}
	// Steps 3 and 4 only improve on a solution at hand, so together they get at most
	// PolishLimit: on a hard round HiGHS's branching could otherwise take most of the
	// deadline for a fraction of a percent.
	improveEnd := deadline
	if m.cfg.PolishLimit > 0 && time.Now().Add(m.cfg.PolishLimit).Before(deadline) {
		improveEnd = time.Now().Add(m.cfg.PolishLimit)
	}
	// The round deadline, when it comes first, ends the MILP steps; unlike the polish limit
	// it is counted (deadline hit), and as a fallback when HiGHS found nothing better than
	// the greedy solution by then.
	byDeadline := !m.roundEnd.IsZero() && m.roundEnd.Before(improveEnd)
	if byDeadline {
		improveEnd = m.roundEnd
	}
	stopped := func(what string) ([]option, solveStats) {
		if !byDeadline {
			return done(best, bestObj, what+" stopped at the polish limit")
		}
		ss.deadlineHit = true
		if bestObj <= ss.greedyObjective+1e-9 && !sc.noPolish {
			ss.gap = relGap(bound, bestObj)
			return fallback("round deadline before HiGHS found a better solution than greedy")
		}
		return done(best, bestObj, what+" stopped at the round deadline")
	}
	if byDeadline && !time.Now().Before(improveEnd) {
		return stopped("rounded LP")
	}
	if len(restricted) < len(all) {
		sub, _ := m.buildMILP(sc, restricted, st)
		var bestCols []int
		for i := range best {
			if best[i].col >= 0 {
				bestCols = append(bestCols, best[i].col)
			}
		}
		var x []float64
		if m.cfg.WarmStart {
			x = m.startFor(sc, restricted, bestCols, len(sub.ColCosts))
		}
		t0 := time.Now()
		res, err := m.runHiGHS(sub, improveEnd, x)
		ss.milpTime += time.Since(t0)
		if byDeadline && (errors.Is(err, errNoTime) || res.ModelStatus == highsModelTimeLimit) {
			ss.deadlineHit = true
		}
		ss.nodes += res.Nodes
		ss.lpIters += res.LPIters
		ss.subCols = len(sub.ColCosts)
		if err == nil && res.HasPrimal {
			xs := make([]float64, len(sc.opts))
			for k, c := range restricted {
				if res.X[k] > 0.5 {
					xs[c] = 1
				}
			}
			if cand := m.realizeColumns(sc, sc.jobs, st, xs); sumOpts(cand) > bestObj {
				best, bestObj = cand, sumOpts(cand)
			}
		}
	}
	ss.restrictedObjective = bestObj
	if relGap(bound, bestObj) <= m.cfg.MIPGap {
		return done(best, bestObj, "restricted MILP within gap")
	}

	if sc.noPolish {
		return done(best, bestObj, "restricted MILP (second pass, no polish)")
	}
	if improveEnd.Before(deadline) && !time.Now().Before(improveEnd) {
		return stopped("restricted MILP")
	}
	// 3. The full MILP, warm-started from the best solution so far.
	var x []float64
	if m.cfg.WarmStart {
		var cols []int
		for i := range best {
			if best[i].col >= 0 {
				cols = append(cols, best[i].col)
			}
		}
		x = m.startFor(sc, all, cols, len(mod.ColCosts))
		var local []int
		pos := map[int]int{}
		for k, c := range all {
			pos[c] = k
		}
		for _, c := range cols {
			if k, ok := pos[c]; ok {
				local = append(local, k)
			}
		}
		m.warmZ(mod, sc, all, local, zIndex, x)
	}
	polishEnd := improveEnd
	t0 = time.Now()
	res, err := m.runHiGHS(mod, polishEnd, x)
	ss.milpTime += time.Since(t0)
	ss.nodes, ss.lpIters = ss.nodes+res.Nodes, ss.lpIters+res.LPIters
	ss.status = highsModelStatusNames[res.ModelStatus]
	if errors.Is(err, errNoTime) && polishEnd.Before(deadline) {
		// The budget ran out between the check above and the call.
		return stopped("restricted MILP")
	}
	if err != nil {
		return fallback(err.Error())
	}
	if res.HasPrimal {
		xs := make([]float64, len(sc.opts))
		for k, c := range all {
			if res.X[k] > 0.5 {
				xs[c] = 1
			}
		}
		if r := m.realizeColumns(sc, sc.jobs, st, xs); sumOpts(r) > bestObj {
			best, bestObj = r, sumOpts(r)
		}
	}
	switch res.ModelStatus {
	case highsModelOptimal:
		sol, st := done(best, bestObj, "optimal")
		st.gap = min(st.gap, max(res.Gap, 0))
		return sol, st
	case highsModelTimeLimit:
		if polishEnd.Before(deadline) {
			// Only the polishing budget (or the round deadline) ran out: the best solution so
			// far stands.
			return stopped("MILP")
		}
		ss.gap = relGap(bound, bestObj)
		return fallback("time limit")
	}
	return fallback("HiGHS status " + ss.status)
}

// startFor builds a start vector for a model over cols from chosen scope columns.
func (m *model) startFor(sc *scope, cols []int, chosen []int, n int) []float64 {
	pos := make(map[int]int, len(cols))
	for k, c := range cols {
		pos[c] = k
	}
	x := make([]float64, n)
	for _, c := range chosen {
		if k, ok := pos[c]; ok {
			x[k] = 1
		}
	}
	return x
}

// realizeColumns realizes columns in decreasing order of x (named instances first at equal
// x, then larger jobs), one per job, in a copy of st, then gives the jobs left their best
// realizable column.
func (m *model) realizeColumns(sc *scope, jobs []int, st *state, x []float64) []option {
	idx := make([]int, 0, len(sc.opts))
	for i := range sc.opts {
		if x[i] > 1e-6 {
			idx = append(idx, i)
		}
	}
	sort.SliceStable(idx, func(a, b int) bool {
		oa, ob := &sc.opts[idx[a]], &sc.opts[idx[b]]
		if x[idx[a]] != x[idx[b]] {
			return x[idx[a]] > x[idx[b]]
		}
		if oa.concrete != ob.concrete {
			return oa.concrete
		}
		if ga, gb := m.jobs[oa.job].g, m.jobs[ob.job].g; ga != gb {
			return ga > gb
		}
		return oa.value > ob.value
	})
	cur := st.clone()
	base := st.clone()
	done := map[int]bool{}
	var out []option
	for _, oi := range idx {
		o := &sc.opts[oi]
		if done[o.job] {
			continue
		}
		if r, ok := m.realize(sc.cs, o, cur, base, sc.budget); ok {
			done[o.job] = true
			out = append(out, r)
		}
	}
	for _, ji := range jobs {
		if done[ji] {
			continue
		}
		for _, oi := range sc.byJob[ji] {
			if r, ok := m.realize(sc.cs, &sc.opts[oi], cur, base, sc.budget); ok {
				out = append(out, r)
				break
			}
		}
	}
	return out
}

func relGap(bound, obj float64) float64 {
	if bound <= 1e-12 {
		return 0
	}
	return max(0, (bound-obj)/bound)
}

// withinBudget checks a namespace's new GPUs against nsBudget (chk already holds the earlier
// choices; base is the state before any).
func (m *model) withinBudget(o *option, chk, base *state, nsBudget []int) bool {
	j := &m.jobs[o.job]
	if nsBudget == nil || nsBudget[j.ns] < 0 {
		return true
	}
	return chk.nsGPUs[j.ns]-base.nsGPUs[j.ns]+j.g <= nsBudget[j.ns]
}

// runHiGHS solves mod within the deadline, optionally from a start.
func (m *model) runHiGHS(mod highs.Model, deadline time.Time, startX []float64) (highsResult, error) {
	raw, err := m.newHiGHS(&mod, deadline)
	if err != nil {
		return highsResult{}, err
	}
	if startX != nil {
		if err := highsSetStart(raw, startX); err != nil {
			return highsResult{}, err
		}
	}
	res, err := highsRun(raw)
	if err != nil {
		return res, fmt.Errorf("HiGHS: %w", err)
	}
	return res, nil
}

// newHiGHS passes mod to a new HiGHS object with the solver options set.
func (m *model) newHiGHS(mod *highs.Model, deadline time.Time) (*highs.RawModel, error) {
	left := time.Until(deadline)
	if left <= 0 {
		return nil, errNoTime
	}
	raw, err := highsModel(mod)
	if err != nil {
		return nil, fmt.Errorf("build HiGHS model: %w", err)
	}
	for _, o := range []struct {
		name string
		set  func() error
	}{
		{"time_limit", func() error { return raw.SetFloat64Option("time_limit", left.Seconds()) }},
		{"mip_rel_gap", func() error { return raw.SetFloat64Option("mip_rel_gap", m.cfg.MIPGap) }},
		{"random_seed", func() error { return raw.SetIntOption("random_seed", 1) }},
	} {
		if err := o.set(); err != nil {
			return nil, fmt.Errorf("set HiGHS option %s: %w", o.name, err)
		}
	}
	if mod.VarTypes == nil {
		// The relaxations here are small and nearly integral: HiGHS's presolve costs more
		// than it saves (about 10 % of the decision time at 256 jobs / 1024 GPUs).
		if err := raw.SetStringOption("presolve", "off"); err != nil {
			return nil, fmt.Errorf("set HiGHS option presolve: %w", err)
		}
	}
	return raw, nil
}

// solveStats is what one scope's solve reports.
type solveStats struct {
	restrictedObjective float64
	// lpTime and milpTime are the wall time of the LP relaxation and of the MILP solves.
	lpTime, milpTime time.Duration
	cands            int
	subCols          int
	bound            float64
	rows, cols       int
	nodes, lpIters   int64
	gap              float64
	status           string
	fallback         bool
	deadlineHit      bool
	reason           string
	greedyObjective  float64
	objective        float64
}

var errNoTime = errors.New("time budget spent before the solve")

// restrictKeep is how many of its best columns a job the LP places integrally keeps in the
// restricted MILP.
const restrictKeep = 1

// restrictKeepContested is the same for jobs the LP places fractionally or not at all.
const restrictKeepContested = 6

func lpFractional(x []float64, cols []int) bool {
	for _, c := range cols {
		if x[c] > 1e-6 && x[c] < 1-1e-6 {
			return true
		}
	}
	return false
}
