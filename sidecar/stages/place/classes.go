package place

import (
	"slices"
	"strconv"

	"github.com/hetgpu/hetgpu/model/constraint"
)

// A class is a set of capacity domains no job can tell apart: same GPU type, free GPUs, group
// and node size, node load, NVLink topology of the free GPUs, and the same answer to every
// job's constraints, affinities and distinct_property attributes. The MILP decides how many
// GPUs of which jobs go into a class; which node of the class gets which job is decided after
// solving, first-fit decreasing (realize). This removes the symmetry between identical nodes
// that makes a node-level model slow, and lets every job use every node of a class.
//
// Domains become classes of their own (singletons) where identity matters: under tenant
// isolation or per-node job caps, on units holding instances that some job pins with
// ${device.ids}, and in exhaustive mode.
type classInfo struct {
	doms []int
	typ  int
	f    int
	// reps are up to R units of the class on which candidate options are built.
	reps []int
}

type classSet struct {
	classOf []int // per domain; -1 outside the scope or without free GPUs
	classes []classInfo
	isRep   map[int]bool
}

// buildClasses groups the domains of the units allow admits (nil: all), given state st and
// the jobs that will be placed (their shapes decide what tells nodes apart).
func (m *model) buildClasses(st *state, allow func(u int) bool, jobs []int) *classSet {
	cs := &classSet{classOf: make([]int, len(m.doms)), isRep: map[int]bool{}}
	for i := range cs.classOf {
		cs.classOf[i] = -1
	}
	// Shapes of the jobs, and what of a node they look at.
	var shapes []*shape
	var affJobs []*jobInfo
	var propTargets []string
	pinUnits := map[int]bool{}
	seen := map[*shape]bool{}
	maxK := 1
	for _, ji := range jobs {
		j := &m.jobs[ji]
		sh := m.shapeOf(j)
		maxK = max(maxK, j.k)
		if !seen[sh] {
			seen[sh] = true
			shapes = append(shapes, sh)
			if len(j.cj.NodeAff) > 0 || len(j.cj.DeviceAff) > 0 {
				affJobs = append(affJobs, j)
			}
			for _, dp := range j.cj.DistinctBy {
				if !slices.Contains(propTargets, dp.Target) {
					propTargets = append(propTargets, dp.Target)
				}
			}
			if j.cj.PinsInstances() {
				for _, us := range sh.byType {
					for _, u := range us {
						pinUnits[u] = true
					}
				}
			}
		}
	}
	admits := make([][]bool, len(shapes))
	for si, sh := range shapes {
		admits[si] = make([]bool, len(m.units))
		for _, us := range sh.byType {
			for _, u := range us {
				admits[si][u] = true
			}
		}
	}
	singleton := m.cfg.TenantIsolation || m.cfg.MaxJobsPerNode > 0 || m.cfg.exhaustive
	R := max(m.cfg.NodesPerClass, min(maxK, 8))
	index := map[string]int{}
	var key []byte
	num := func(v int) { key = strconv.AppendInt(key, int64(v), 10); key = append(key, '|') }
	for d := range m.doms {
		u := m.doms[d].unit
		if st.domFree[d] == 0 || (allow != nil && !allow(u)) {
			continue
		}
		un := &m.units[u]
		nd := &m.nodes[un.node]
		key = key[:0]
		num(un.typ)
		num(st.domFree[d])
		num(un.size)
		num(m.nodeFree(un.node, st))
		num(nd.healthy)
		if singleton || pinUnits[u] || m.occupiedSlotUnit(u) {
			key = append(key, 'd')
			num(d)
		}
		if un.peers != nil {
			for k, ii := range m.doms[d].insts {
				if m.insts[ii].used == 0 {
					key = strconv.AppendInt(key, int64(k), 10)
					key = append(key, ',')
				}
			}
			key = append(key, '|')
		} else if un.nvAll {
			key = append(key, "nv|"...)
		}
		for si := range shapes {
			if admits[si][u] {
				key = append(key, '1')
			} else {
				key = append(key, '0')
			}
		}
		key = append(key, '|')
		for _, j := range affJobs {
			key = strconv.AppendFloat(key, j.cj.NodeAffinity(nd.n), 'g', 6, 64)
			key = append(key, ',')
			key = strconv.AppendFloat(key, j.cj.DeviceAffinity(un.g), 'g', 6, 64)
			key = append(key, ';')
		}
		for _, t := range propTargets {
			v, ok := constraint.ResolveNode(t, nd.n)
			key = strconv.AppendQuote(key, v)
			key = strconv.AppendBool(key, ok)
			key = append(key, ';')
		}
		c, ok := index[string(key)]
		if !ok {
			c = len(cs.classes)
			index[string(key)] = c
			cs.classes = append(cs.classes, classInfo{typ: un.typ, f: st.domFree[d]})
		}
		cl := &cs.classes[c]
		cl.doms = append(cl.doms, d)
		cs.classOf[d] = c
		if len(cl.reps) < R && !slices.Contains(cl.reps, u) {
			cl.reps = append(cl.reps, u)
			cs.isRep[u] = true
		}
	}
	return cs
}

// realize turns a class-level option into concrete domains in state st (first fit decreasing
// within each class, best fit, one domain per node for the job) and applies it. It returns
// the domain-level option, or false without touching st when it does not fit.
func (m *model) realize(cs *classSet, o *option, st *state, nsBase *state, nsBudget []int) (option, bool) {
	if o.coloc || cs == nil {
		if m.fits(o, st) && m.withinBudget(o, st, nsBase, nsBudget) {
			m.apply(o, st)
			return *o, true
		}
		return option{}, false
	}
	out := *o
	out.parts = make([]part, len(o.parts))
	copy(out.parts, o.parts)
	out.units = nil
	// Parts, largest first (insertion sort: an option has a few parts).
	var orderBuf [8]int
	order := orderBuf[:0]
	for i := range o.parts {
		order = append(order, i)
		for k := len(order) - 1; k > 0 && o.parts[order[k]].count > o.parts[order[k-1]].count; k-- {
			order[k], order[k-1] = order[k-1], order[k]
		}
	}
	// A job uses one device group per node: parts from different units of the option must land
	// on different nodes; parts of one unit (its PCIe-switch domains) share it. owners maps a
	// node to the unit of the option that took it, taken a domain to the GPUs taken so far;
	// both are short, so they are slices.
	type owner struct{ node, unit int }
	type take struct{ dom, n int }
	var ownersBuf [8]owner
	var takenBuf [8]take
	owners, taken := ownersBuf[:0], takenBuf[:0]
	ownerOf := func(nd int) (int, bool) {
		for _, ow := range owners {
			if ow.node == nd {
				return ow.unit, true
			}
		}
		return 0, false
	}
	takenOf := func(d int) int {
		for _, t := range taken {
			if t.dom == d {
				return t.n
			}
		}
		return 0
	}
	place := func(pi, d int) bool {
		srcUnit := m.doms[o.parts[pi].dom].unit
		nd := m.units[m.doms[d].unit].node
		if ow, ok := ownerOf(nd); ok && ow != srcUnit {
			return false
		}
		if st.domFree[d]-takenOf(d) < o.parts[pi].count {
			return false
		}
		if _, ok := ownerOf(nd); !ok {
			owners = append(owners, owner{nd, srcUnit})
		}
		found := false
		for i := range taken {
			if taken[i].dom == d {
				taken[i].n += o.parts[pi].count
				found = true
			}
		}
		if !found {
			taken = append(taken, take{d, o.parts[pi].count})
		}
		out.parts[pi].dom = d
		return true
	}
	for _, pi := range order {
		p := o.parts[pi]
		if p.insts != nil { // pinned: the domain is fixed
			if !place(pi, p.dom) {
				return option{}, false
			}
			continue
		}
		c := cs.classOf[p.dom]
		best, bestLeft := -1, 1<<30
		for _, d := range cs.classes[c].doms {
			nd := m.units[m.doms[d].unit].node
			left := st.domFree[d] - takenOf(d) - p.count
			if left < 0 {
				continue
			}
			if ow, ok := ownerOf(nd); ok && ow != m.doms[p.dom].unit {
				continue
			}
			if left < bestLeft {
				best, bestLeft = d, left
			}
		}
		if best < 0 || !place(pi, best) {
			return option{}, false
		}
	}
	out.units = make([]int, 0, len(o.units))
	for _, p := range out.parts {
		if u := m.doms[p.dom].unit; !slices.Contains(out.units, u) {
			out.units = append(out.units, u)
		}
	}
	if !m.fits(&out, st) || !m.withinBudget(&out, st, nsBase, nsBudget) {
		return option{}, false
	}
	m.apply(&out, st)
	return out, true
}
