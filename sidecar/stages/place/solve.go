package place

import "slices"

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
		if r, ok := m.realizeBest(sc, ji, st, base); ok {
			out = append(out, r)
		}
	}
	return out
}

// realizeBest realizes job ji's best column that fits cur (mutated; base is the state before
// the round's choices). Columns of a job are sorted best first.
func (m *model) realizeBest(sc *scope, ji int, cur, base *state) (option, bool) {
	for _, oi := range sc.byJob[ji] {
		if r, ok := m.realize(sc.cs, &sc.opts[oi], cur, base, sc.budget); ok {
			return r, true
		}
	}
	return option{}, false
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
