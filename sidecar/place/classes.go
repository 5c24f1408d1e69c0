package place

import (
	"slices"
	"sort"
	"strconv"

	"github.com/hetgpu/hetgpu/sidecar/constraint"
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
		if singleton || pinUnits[u] {
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
	j := &m.jobs[o.job]
	out := *o
	out.parts = make([]part, len(o.parts))
	copy(out.parts, o.parts)
	out.units = nil
	order := make([]int, len(o.parts))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return o.parts[order[a]].count > o.parts[order[b]].count })
	// A job uses one device group per node: parts from different units of the option must land
	// on different nodes; parts of one unit (its PCIe-switch domains) share it.
	nodeOwner := map[int]int{} // node -> unit of the option that took it
	taken := map[int]int{}
	place := func(pi, d int) bool {
		srcUnit := m.doms[o.parts[pi].dom].unit
		nd := m.units[m.doms[d].unit].node
		if owner, ok := nodeOwner[nd]; ok && owner != srcUnit {
			return false
		}
		if st.domFree[d]-taken[d] < o.parts[pi].count {
			return false
		}
		nodeOwner[nd] = srcUnit
		taken[d] += o.parts[pi].count
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
			left := st.domFree[d] - taken[d] - p.count
			if owner, ok := nodeOwner[nd]; left < 0 || ok && owner != m.doms[p.dom].unit {
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
	seenU := map[int]bool{}
	for _, p := range out.parts {
		u := m.doms[p.dom].unit
		if !seenU[u] {
			seenU[u] = true
			out.units = append(out.units, u)
		}
	}
	if !m.fits(&out, st) || !m.withinBudget(&out, st, nsBase, nsBudget) {
		return option{}, false
	}
	_ = j
	m.apply(&out, st)
	return out, true
}
