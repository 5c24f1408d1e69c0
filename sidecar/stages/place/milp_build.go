package place

import (
	"math"
	"slices"

	"github.com/lanl/highs"
)

type zKey struct{ iso, ns int }

// buildMILP writes the scope's model: binary x per column (maximise the sum of values), and
// binary z per (PCIe switch, namespace) where tenant isolation must pick one namespace.
// Only the columns cols of the scope are used (column k of the model is sc.opts[cols[k]]).
// Rows: one column per job; per class, the GPUs its items take <= its free GPUs, and for
// every item size s, items of >= s GPUs <= sum over its domains of floor(free/s) (a domain
// holds at most that many; with power-of-two sizes these rows make first-fit decreasing
// always succeed);
// named instances at most once (or MaxShare holders); node caps; namespace caps; queue caps
// (queues.go); isolation.
//
// The order of rows and columns is part of the result: HiGHS's path, and so the solution
// among equal optima, depends on it.
func (m *model) buildMILP(sc *scope, cols []int, st *state) (highs.Model, map[zKey]int) {
	b := m.newMILPBuilder(sc, cols, st)
	b.oneColumnPerJob()
	u := b.collectUses()
	b.capacityRows(u.items)
	b.instanceRows(u)
	b.nodeRows(u)
	b.namespaceRows()
	m.capRows(b.byJob, b.opt, st, b.entry, b.end)
	zIndex := b.isolationRows(u)
	b.binaries()
	return b.mod, zIndex
}

// milpBuilder writes one model: rows go straight into ConstMatrix (begin a row, add
// entries, end it).
type milpBuilder struct {
	m    *model
	sc   *scope
	cols []int
	st   *state
	mod  highs.Model
	row  int
	// byJob are the model columns grouped by job (jobs ascending, columns ascending within
	// a job).
	byJob []int
	// perJob is scratch per job index: the most a job's columns ask of the row being built;
	// touched are the jobs it holds.
	perJob  []int
	touched []int
}

// newMILPBuilder sets up the x variables and the objective (each column's value).
func (m *model) newMILPBuilder(sc *scope, cols []int, st *state) *milpBuilder {
	b := &milpBuilder{m: m, sc: sc, cols: cols, st: st}
	n := len(cols)
	b.mod.Maximize = true
	b.mod.ColCosts = make([]float64, n, n+8)
	nnz := 0
	for k := range cols {
		o := b.opt(k)
		b.mod.ColCosts[k] = o.value
		nnz += 2 + 2*len(o.parts)
	}
	b.mod.ConstMatrix = make([]highs.Nonzero, 0, nnz)
	b.mod.RowLower = make([]float64, 0, n/4+16)
	b.mod.RowUpper = make([]float64, 0, n/4+16)
	b.byJob = make([]int, n)
	for k := range b.byJob {
		b.byJob[k] = k
	}
	slices.SortStableFunc(b.byJob, func(x, y int) int { return b.opt(x).job - b.opt(y).job })
	b.perJob = make([]int, len(m.jobs))
	return b
}

// opt is model column k's option.
func (b *milpBuilder) opt(k int) *option { return &b.sc.opts[b.cols[k]] }

// entry adds a coefficient to the row being built.
func (b *milpBuilder) entry(col int, v float64) {
	b.mod.ConstMatrix = append(b.mod.ConstMatrix, highs.Nonzero{Row: b.row, Col: col, Val: v})
}

// end closes the row being built with upper bound ub.
func (b *milpBuilder) end(ub float64) {
	b.mod.RowLower = append(b.mod.RowLower, math.Inf(-1))
	b.mod.RowUpper = append(b.mod.RowUpper, ub)
	b.row++
}

// addRow writes a whole row.
func (b *milpBuilder) addRow(ub float64, entries []highs.Nonzero) {
	for _, e := range entries {
		e.Row = b.row
		b.mod.ConstMatrix = append(b.mod.ConstMatrix, e)
	}
	b.end(ub)
}

// oneColumnPerJob writes "at most one column" for every job with two or more.
func (b *milpBuilder) oneColumnPerJob() {
	n := len(b.byJob)
	for lo := 0; lo < n; {
		hi := lo + 1
		for hi < n && b.opt(b.byJob[hi]).job == b.opt(b.byJob[lo]).job {
			hi++
		}
		if hi-lo >= 2 {
			for _, k := range b.byJob[lo:hi] {
				b.entry(k, 1)
			}
			b.end(1)
		}
		lo = hi
	}
}

// classItem is a column's GPUs in one class.
type classItem struct{ class, col, count int }

// milpUses is what the columns take, gathered in one pass: class items, and per named
// instance, node and (isolation group, namespace) the columns that use it.
type milpUses struct {
	// items are sorted by class, columns ascending within a class.
	items    []classItem
	instUse  map[int][]highs.Nonzero
	nodeUse  map[int][]highs.Nonzero
	nodeJobs map[int]map[int]bool
	isoUse   map[zKey][]highs.Nonzero
	isoJobs  map[zKey]map[int]bool
	isoNS    map[int]map[int]bool
}

func (b *milpBuilder) collectUses() *milpUses {
	m, n := b.m, len(b.cols)
	u := &milpUses{items: make([]classItem, 0, n+n/2)}
	for k := range b.cols {
		o := b.opt(k)
		j := &m.jobs[o.job]
		for _, p := range o.parts {
			if !o.coloc {
				u.items = append(u.items, classItem{b.sc.cs.classOf[p.dom], k, p.count})
			}
			for _, ii := range p.insts {
				if u.instUse == nil {
					u.instUse = map[int][]highs.Nonzero{}
				}
				u.instUse[ii] = append(u.instUse[ii], highs.Nonzero{Col: k, Val: 1})
			}
			if iso := m.doms[p.dom].iso; iso >= 0 {
				if u.isoUse == nil {
					u.isoUse, u.isoJobs, u.isoNS = map[zKey][]highs.Nonzero{}, map[zKey]map[int]bool{}, map[int]map[int]bool{}
				}
				zk := zKey{iso, j.ns}
				if u.isoJobs[zk] == nil {
					u.isoJobs[zk] = map[int]bool{}
					if u.isoNS[iso] == nil {
						u.isoNS[iso] = map[int]bool{}
					}
				}
				u.isoUse[zk] = append(u.isoUse[zk], highs.Nonzero{Col: k, Val: 1})
				u.isoJobs[zk][o.job] = true
				u.isoNS[iso][j.ns] = true
			}
		}
		if m.cfg.MaxJobsPerNode > 0 {
			if u.nodeUse == nil {
				u.nodeUse, u.nodeJobs = map[int][]highs.Nonzero{}, map[int]map[int]bool{}
			}
			for _, unit := range o.units {
				nd := m.units[unit].node
				u.nodeUse[nd] = append(u.nodeUse[nd], highs.Nonzero{Col: k, Val: 1})
				if u.nodeJobs[nd] == nil {
					u.nodeJobs[nd] = map[int]bool{}
				}
				u.nodeJobs[nd][o.job] = true
			}
		}
	}
	slices.SortStableFunc(u.items, func(a, c classItem) int { return a.class - c.class })
	return u
}

// capacityRows writes, per class, the GPU row and the per-size rows.
func (b *milpBuilder) capacityRows(items []classItem) {
	var sizes []int
	for lo := 0; lo < len(items); {
		hi := lo
		for hi < len(items) && items[hi].class == items[lo].class {
			hi++
		}
		its := items[lo:hi]
		lo = hi
		cl := &b.sc.cs.classes[its[0].class]
		free := 0
		for _, d := range cl.doms {
			free += b.st.domFree[d]
		}
		sizes = sizes[:0]
		for _, it := range its {
			if !slices.Contains(sizes, it.count) {
				sizes = append(sizes, it.count)
			}
		}
		b.rowIfBinding(its, func(c int) int { return c }, free)
		slices.Sort(sizes)
		for si, s := range sizes {
			// Weighted: when every larger size is a multiple of s (powers of two), the items
			// of >= s GPUs fill at most s x floor(free/s) of each domain; this is what makes
			// the rows exact for first-fit decreasing.
			divisible := true
			for _, t := range sizes[si:] {
				divisible = divisible && t%s == 0
			}
			if divisible && s > 1 {
				limit := 0
				for _, d := range cl.doms {
					limit += s * (b.st.domFree[d] / s)
				}
				b.rowIfBinding(its, func(c int) int {
					if c >= s {
						return c
					}
					return 0
				}, limit)
			}
			limit := 0
			for _, d := range cl.doms {
				limit += b.st.domFree[d] / s
			}
			b.rowIfBinding(its, func(c int) int {
				if c >= s {
					return 1
				}
				return 0
			}, limit)
		}
	}
}

// rowIfBinding writes the row "sum of weight over each column's items <= limit" unless no
// choice of one column per job can exceed the limit.
func (b *milpBuilder) rowIfBinding(its []classItem, weight func(count int) int, limit int) {
	colSum(its, weight, func(col, v int) { b.jobMax(b.opt(col).job, v) })
	if b.jobSum() <= limit {
		return
	}
	colSum(its, weight, func(col, v int) { b.entry(col, float64(v)) })
	b.end(float64(limit))
}

func (b *milpBuilder) jobMax(job, v int) {
	if b.perJob[job] == 0 {
		b.touched = append(b.touched, job)
	}
	b.perJob[job] = max(b.perJob[job], v)
}

// jobSum is the most the jobs can ask of the row, and clears the scratch.
func (b *milpBuilder) jobSum() int {
	t := 0
	for _, job := range b.touched {
		t += b.perJob[job]
		b.perJob[job] = 0
	}
	b.touched = b.touched[:0]
	return t
}

// colSum calls f(col, sum of weight over the column's items) for each column of its in
// ascending order, skipping zero sums.
func colSum(its []classItem, weight func(count int) int, f func(col, v int)) {
	for lo := 0; lo < len(its); {
		hi, v := lo, 0
		for hi < len(its) && its[hi].col == its[lo].col {
			v += weight(its[hi].count)
			hi++
		}
		if v > 0 {
			f(its[lo].col, v)
		}
		lo = hi
	}
}

// instanceRows caps each named instance at one holder, or MaxShare when it is already
// shared.
func (b *milpBuilder) instanceRows(u *milpUses) {
	for _, ii := range sortedKeys(u.instUse) {
		capacity := 1 - b.st.instUsed[ii]
		if b.m.insts[ii].used > 0 {
			capacity = b.m.cfg.MaxShare - b.st.instUsed[ii]
		}
		if len(u.instUse[ii]) > capacity {
			b.addRow(float64(max(capacity, 0)), u.instUse[ii])
		}
	}
}

// nodeRows caps the jobs per node (MaxJobsPerNode).
func (b *milpBuilder) nodeRows(u *milpUses) {
	for _, nd := range sortedKeys(u.nodeUse) {
		room := b.m.cfg.MaxJobsPerNode - b.st.nodeJobs[nd]
		if len(u.nodeJobs[nd]) > room {
			b.addRow(float64(max(room, 0)), u.nodeUse[nd])
		}
	}
}

// namespaceRows caps each namespace's new GPUs at its budget or quota.
func (b *milpBuilder) namespaceRows() {
	m := b.m
	nsWorst := make([]int, len(m.nsNames))
	seenJob := -1
	for _, k := range b.byJob {
		if o := b.opt(k); o.job != seenJob {
			seenJob = o.job
			nsWorst[m.jobs[o.job].ns] += m.jobs[o.job].g
		}
	}
	for ns := range nsWorst {
		room := -1
		if b.sc.budget != nil {
			room = b.sc.budget[ns]
		} else if m.nsCap[ns] >= 0 {
			room = max(m.nsCap[ns]-b.st.nsGPUs[ns], 0)
		}
		if nsWorst[ns] == 0 || room < 0 || nsWorst[ns] <= room {
			continue
		}
		for _, k := range b.byJob {
			if j := &m.jobs[b.opt(k).job]; j.ns == ns {
				b.entry(k, float64(j.g))
			}
		}
		b.end(float64(room))
	}
}

// isolationRows adds a z column per (isolation group, namespace) where several namespaces
// compete, links the x columns to it, and lets one z per group be set.
func (b *milpBuilder) isolationRows(u *milpUses) map[zKey]int {
	zIndex := map[zKey]int{}
	for _, iso := range sortedKeys(u.isoNS) {
		if len(u.isoNS[iso]) < 2 {
			continue
		}
		var zs []highs.Nonzero
		for _, ns := range sortedKeys(u.isoNS[iso]) {
			k := zKey{iso, ns}
			col := len(b.mod.ColCosts)
			b.mod.ColCosts = append(b.mod.ColCosts, 0)
			zIndex[k] = col
			e := append([]highs.Nonzero(nil), u.isoUse[k]...)
			e = append(e, highs.Nonzero{Col: col, Val: -float64(len(u.isoJobs[k]))})
			b.addRow(0, e)
			zs = append(zs, highs.Nonzero{Col: col, Val: 1})
		}
		b.addRow(1, zs)
	}
	return zIndex
}

// binaries makes every column, x and z, binary.
func (b *milpBuilder) binaries() {
	nc := len(b.mod.ColCosts)
	b.mod.ColLower = make([]float64, nc)
	b.mod.ColUpper = make([]float64, nc)
	b.mod.VarTypes = make([]highs.VariableType, nc)
	for i := range b.mod.ColUpper {
		b.mod.ColUpper[i] = 1
		b.mod.VarTypes[i] = highs.IntegerType
	}
}

// warmZ sets the isolation indicators consistent with chosen model columns (indices into
// cols).
func (m *model) warmZ(_ highs.Model, sc *scope, cols []int, chosen []int, zIndex map[zKey]int, x []float64) {
	for _, k := range chosen {
		o := &sc.opts[cols[k]]
		for _, p := range o.parts {
			if iso := m.doms[p.dom].iso; iso >= 0 {
				if col, ok := zIndex[zKey{iso, m.jobs[o.job].ns}]; ok {
					x[col] = 1
				}
			}
		}
	}
}

func sortedKeys[V any](mp map[int]V) []int {
	keys := make([]int, 0, len(mp))
	for k := range mp {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
