package place

import (
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/lanl/highs"
)

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
	s := m.newScopeSolve(sc, st, deadline)
	for _, step := range []func() bool{s.withoutLP, s.relaxation, s.restrictedMILP, s.fullMILP} {
		if step() {
			break
		}
	}
	return s.best, s.ss
}

// scopeSolve is one solveScope: the best solution so far and what the steps found. A step
// returns true when the solve is over (s.best and s.ss are then the result).
type scopeSolve struct {
	m        *model
	sc       *scope
	st       *state
	deadline time.Time
	ss       solveStats
	best     []option
	bestObj  float64
	// all are the scope's columns; mod (with the isolation indicators zIndex) is the full
	// MILP over them.
	all    []int
	mod    highs.Model
	zIndex map[zKey]int
	// lpX is the LP relaxation's solution by scope column.
	lpX []float64
	// improveEnd ends steps 3 and 4; byDeadline says it is the round deadline (counted as a
	// deadline hit) rather than the polish limit.
	improveEnd time.Time
	byDeadline bool
}

// newScopeSolve starts from the greedy solution (step 1).
func (m *model) newScopeSolve(sc *scope, st *state, deadline time.Time) *scopeSolve {
	s := &scopeSolve{m: m, sc: sc, st: st, deadline: deadline}
	for _, ji := range sc.jobs {
		s.ss.cands += len(sc.byJob[ji])
	}
	s.best = sc.greedy
	if s.best == nil {
		s.best = m.greedyRealize(sc, sc.jobs, st.clone())
	}
	s.bestObj = sumOpts(s.best)
	s.ss.greedyObjective, s.ss.objective = s.bestObj, s.bestObj
	return s
}

// fallback ends the solve on the best solution at hand, flagged as a fallback.
func (s *scopeSolve) fallback(reason string) bool {
	s.ss.fallback, s.ss.reason, s.ss.objective = true, reason, s.bestObj
	return true
}

// done ends the solve on the best solution, its gap to the LP bound and status.
func (s *scopeSolve) done(status string) bool {
	s.ss.gap, s.ss.objective, s.ss.status = relGap(s.ss.bound, s.bestObj), s.bestObj, status
	return true
}

// stopped ends the solve when the improvement budget ran out during (or before) step what:
// at the polish limit the best solution stands; at the round deadline it counts as a
// deadline hit, and as a fallback when nothing better than greedy was found.
func (s *scopeSolve) stopped(what string) bool {
	if !s.byDeadline {
		return s.done(what + " stopped at the polish limit")
	}
	s.ss.deadlineHit = true
	if s.bestObj <= s.ss.greedyObjective+1e-9 && !s.sc.noPolish {
		s.ss.gap = relGap(s.ss.bound, s.bestObj)
		return s.fallback("round deadline before HiGHS found a better solution than greedy")
	}
	return s.done(what + " stopped at the round deadline")
}

// consider keeps sol when it beats the best solution; it reports whether it did.
func (s *scopeSolve) consider(sol []option) bool {
	if sumOpts(sol) > s.bestObj {
		s.best, s.bestObj = sol, sumOpts(sol)
		return true
	}
	return false
}

// considerIntegral realizes a MILP solution x over model columns cols and considers it.
func (s *scopeSolve) considerIntegral(cols []int, x []float64) {
	xs := make([]float64, len(s.sc.opts))
	for k, c := range cols {
		if x[k] > 0.5 {
			xs[c] = 1
		}
	}
	s.consider(s.m.realizeColumns(s.sc, s.sc.jobs, s.st, xs))
}

// bestColumns are the scope columns of the best solution.
func (s *scopeSolve) bestColumns() []int {
	var cols []int
	for i := range s.best {
		if s.best[i].col >= 0 {
			cols = append(cols, s.best[i].col)
		}
	}
	return cols
}

// withoutLP ends the solve when there is nothing to solve, or when greedy is within MIPGap
// of every job on its best column, capacity aside (an upper bound of the optimum; typically
// a second pass with room for every job left).
func (s *scopeSolve) withoutLP() bool {
	s.all = s.sc.columns()
	if len(s.all) == 0 {
		s.ss.status = "empty"
		return true
	}
	trivial := 0.0
	for _, ji := range s.sc.jobs {
		b := 0.0
		for _, c := range s.sc.byJob[ji] {
			b = max(b, s.sc.opts[c].value)
		}
		trivial += b
	}
	if relGap(trivial, s.bestObj) <= s.m.cfg.MIPGap {
		s.ss.bound, s.ss.gap, s.ss.status = trivial, relGap(trivial, s.bestObj), "greedy within gap of the best columns"
		return true
	}
	return false
}

// relaxation is step 2: the LP relaxation (the bound, and a guide) and its rounding.
func (s *scopeSolve) relaxation() bool {
	m, sc := s.m, s.sc
	s.mod, s.zIndex = m.buildMILP(sc, s.all, s.st)
	s.ss.cols, s.ss.rows = len(s.mod.ColCosts), len(s.mod.RowUpper)

	t0 := time.Now()
	lp := s.mod
	lp.VarTypes = nil
	lpEnd, lpCut := s.deadline, !m.roundEnd.IsZero() && m.roundEnd.Before(s.deadline)
	if lpCut {
		lpEnd = m.roundEnd
	}
	lpRes, err := m.runHiGHS(lp, lpEnd, nil)
	s.ss.lpTime = time.Since(t0)
	s.ss.lpIters += lpRes.LPIters
	if lpCut && (errors.Is(err, errNoTime) || err == nil && lpRes.ModelStatus == highsModelTimeLimit) {
		s.ss.deadlineHit = true
		if sc.noPolish { // the second pass keeps its greedy solution; the round keeps the first's
			s.ss.status = "greedy (second pass; round deadline before its LP relaxation ended)"
			return true
		}
		return s.fallback("round deadline before the LP relaxation ended")
	}
	if err != nil {
		return s.fallback(err.Error())
	}
	if lpRes.ModelStatus != highsModelOptimal || !lpRes.HasPrimal {
		return s.fallback("LP relaxation: HiGHS status " + highsModelStatusNames[lpRes.ModelStatus])
	}
	s.ss.bound = lpRes.Objective
	s.lpX = make([]float64, len(sc.opts))
	for k, c := range s.all {
		s.lpX[c] = lpRes.X[k]
	}
	if relGap(s.ss.bound, s.bestObj) <= m.cfg.MIPGap {
		return s.done("greedy within gap")
	}
	if s.consider(m.realizeColumns(sc, sc.jobs, s.st, s.lpX)) && relGap(s.ss.bound, s.bestObj) <= m.cfg.MIPGap {
		return s.done("rounded LP within gap")
	}
	return false
}

// restrictedColumns are the columns of the restricted MILP: each job keeps the columns the
// LP uses plus its best ones.
func (s *scopeSolve) restrictedColumns() []int {
	keep := make([]bool, len(s.sc.opts))
	for _, c := range s.all {
		keep[c] = s.lpX[c] > 1e-6
	}
	for _, ji := range s.sc.jobs {
		cols := s.sc.byJob[ji]
		mass := 0.0
		for _, c := range cols {
			mass += s.lpX[c]
		}
		// Jobs the LP places fractionally or not at all are the contested ones: they keep
		// more of their best columns than the others.
		n := restrictKeep
		if mass < 1-1e-6 || lpFractional(s.lpX, cols) {
			n = restrictKeepContested
		}
		for k := 0; k < min(n, len(cols)); k++ {
			keep[cols[k]] = true
		}
	}
	var restricted []int
	for i, k := range keep {
		if k {
			restricted = append(restricted, i)
		}
	}
	return restricted
}

// setImproveEnd sets the end of steps 3 and 4. They only improve on a solution at hand, so
// together they get at most PolishLimit: on a hard round HiGHS's branching could otherwise
// take most of the deadline for a fraction of a percent. The round deadline, when it comes
// first, ends them; unlike the polish limit it is counted (deadline hit), and as a fallback
// when HiGHS found nothing better than the greedy solution by then.
func (s *scopeSolve) setImproveEnd() {
	s.improveEnd = s.deadline
	if s.m.cfg.PolishLimit > 0 && time.Now().Add(s.m.cfg.PolishLimit).Before(s.deadline) {
		s.improveEnd = time.Now().Add(s.m.cfg.PolishLimit)
	}
	s.byDeadline = !s.m.roundEnd.IsZero() && s.m.roundEnd.Before(s.improveEnd)
	if s.byDeadline {
		s.improveEnd = s.m.roundEnd
	}
}

// restrictedMILP is step 3 (RENS-like): each job keeps only the columns the LP uses plus
// its best one. The model is a fraction of the full one and nearly integral, so HiGHS solves
// it quickly; its optimum is usually within a fraction of a percent of the full MILP's.
func (s *scopeSolve) restrictedMILP() bool {
	m, sc := s.m, s.sc
	restricted := s.restrictedColumns()
	s.setImproveEnd()
	if s.byDeadline && !time.Now().Before(s.improveEnd) {
		return s.stopped("rounded LP")
	}
	if len(restricted) < len(s.all) {
		sub, _ := m.buildMILP(sc, restricted, s.st)
		var x []float64
		if m.cfg.WarmStart {
			x = m.startFor(sc, restricted, s.bestColumns(), len(sub.ColCosts))
		}
		t0 := time.Now()
		res, err := m.runHiGHS(sub, s.improveEnd, x)
		s.ss.milpTime += time.Since(t0)
		if s.byDeadline && (errors.Is(err, errNoTime) || res.ModelStatus == highsModelTimeLimit) {
			s.ss.deadlineHit = true
		}
		s.ss.nodes += res.Nodes
		s.ss.lpIters += res.LPIters
		s.ss.subCols = len(sub.ColCosts)
		if err == nil && res.HasPrimal {
			s.considerIntegral(restricted, res.X)
		}
	}
	s.ss.restrictedObjective = s.bestObj
	if relGap(s.ss.bound, s.bestObj) <= m.cfg.MIPGap {
		return s.done("restricted MILP within gap")
	}
	if sc.noPolish {
		return s.done("restricted MILP (second pass, no polish)")
	}
	if s.improveEnd.Before(s.deadline) && !time.Now().Before(s.improveEnd) {
		return s.stopped("restricted MILP")
	}
	return false
}

// fullMILP is step 4: the full MILP, warm-started from the best solution so far.
func (s *scopeSolve) fullMILP() bool {
	m, sc := s.m, s.sc
	var x []float64
	if m.cfg.WarmStart {
		cols := s.bestColumns()
		x = m.startFor(sc, s.all, cols, len(s.mod.ColCosts))
		var local []int
		pos := map[int]int{}
		for k, c := range s.all {
			pos[c] = k
		}
		for _, c := range cols {
			if k, ok := pos[c]; ok {
				local = append(local, k)
			}
		}
		m.warmZ(s.mod, sc, s.all, local, s.zIndex, x)
	}
	polishEnd := s.improveEnd
	t0 := time.Now()
	res, err := m.runHiGHS(s.mod, polishEnd, x)
	s.ss.milpTime += time.Since(t0)
	s.ss.nodes, s.ss.lpIters = s.ss.nodes+res.Nodes, s.ss.lpIters+res.LPIters
	s.ss.status = highsModelStatusNames[res.ModelStatus]
	if errors.Is(err, errNoTime) && polishEnd.Before(s.deadline) {
		// The budget ran out between the check above and the call.
		return s.stopped("restricted MILP")
	}
	if err != nil {
		return s.fallback(err.Error())
	}
	if res.HasPrimal {
		s.considerIntegral(s.all, res.X)
	}
	switch res.ModelStatus {
	case highsModelOptimal:
		s.done("optimal")
		s.ss.gap = min(s.ss.gap, max(res.Gap, 0))
		return true
	case highsModelTimeLimit, highsModelSolutionLimit:
		// (The node limit, Config.NodeLimit, ends a MILP with "solution limit".)
		if polishEnd.Before(s.deadline) {
			// Only the polishing budget (or the round deadline) ran out: the best solution so
			// far stands.
			return s.stopped("MILP")
		}
		s.ss.gap = relGap(s.ss.bound, s.bestObj)
		return s.fallback("time limit")
	}
	return s.fallback("HiGHS status " + s.ss.status)
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
		if r, ok := m.realizeBest(sc, ji, cur, base); ok {
			out = append(out, r)
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
	if m.cfg.NodeLimit > 0 && mod.VarTypes != nil {
		if err := raw.SetIntOption("mip_max_nodes", m.cfg.NodeLimit); err != nil {
			return nil, fmt.Errorf("set HiGHS option mip_max_nodes: %w", err)
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
