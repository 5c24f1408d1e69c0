package place

import (
	"math"
	"sort"
	"strings"

	"github.com/hetgpu/hetgpu/model/constraint"
)

// part is an option's use of one capacity domain: count GPUs, or exactly insts when the
// option names its instances (pinned by ${device.ids}, or co-located on busy GPUs).
type part struct {
	dom   int
	count int
	insts []int
}

// option is one way to place a job: GPUs of one type on up to k nodes.
type option struct {
	job int
	// col is the option's column in its scope (-1 outside any); realized copies keep it.
	col      int
	typ      int
	parts    []part
	units    []int
	nodes    int
	concrete bool
	coloc    bool
	nvlink   bool
	// Predicted throughput (with the placement's factors) and power of the whole job.
	T, P float64
	// Objective terms (see Config) and the option's value.
	S, E, F, L, A, Aff float64
	value              float64
}

// shape caches what jobs with the same rules share: the units that pass their constraints.
type shape struct {
	byType [][]int
	admit  []bool
}

// shapeOf computes (once per round) the units a job's constraints admit, per GPU type.
// Device-group feasibility is cached per (device request, group signature): groups with the
// same vendor, type, name and attributes answer every constraint not on ${device.ids} alike.
func (m *model) shapeOf(ji *jobInfo) *shape {
	if sh, ok := m.shapes[ji.shareKey]; ok {
		return sh
	}
	sh := &shape{byType: make([][]int, len(m.types)), admit: make([]bool, len(m.units))}
	nodeOK := make([]int8, len(m.nodes)) // 0 unknown, 1 ok, -1 not
	devSig := ""
	if !ji.cj.PinsInstances() {
		var b strings.Builder
		b.WriteString(ji.j.DeviceName)
		for _, c := range ji.j.DeviceConstraints {
			b.WriteString("\x00" + c.String())
		}
		devSig = b.String()
	}
	for u := range m.units {
		un := &m.units[u]
		if un.size == 0 {
			continue
		}
		ni := un.node
		if nodeOK[ni] == 0 {
			nodeOK[ni] = -1
			if m.nodeAdmits(ji, ni) {
				nodeOK[ni] = 1
			}
		}
		if nodeOK[ni] < 0 {
			continue
		}
		var ok bool
		if devSig != "" {
			k := groupFeasKey{devSig, un.groupSig}
			v, seen := m.groupFeas[k]
			if !seen {
				v = ji.cj.GroupFeasible(un.g)
				m.groupFeas[k] = v
			}
			ok = v
		} else {
			ok = ji.cj.GroupFeasible(un.g)
		}
		if !ok {
			continue
		}
		if ji.cj.PinsInstances() {
			any := false
			for _, ii := range un.insts {
				if ji.cj.InstanceAllowed(un.g, m.insts[ii].in.ID) {
					any = true
					break
				}
			}
			if !any {
				continue
			}
		}
		sh.byType[un.typ] = append(sh.byType[un.typ], u)
		sh.admit[u] = true
	}
	m.shapes[ji.shareKey] = sh
	return sh
}

type groupFeasKey struct {
	dev   string
	group int
}

// nodeAdmits checks readiness, node constraints, distinct_hosts against running allocations
// and that a distinct_property attribute is present with room under its limit.
func (m *model) nodeAdmits(ji *jobInfo, ni int) bool {
	nd := &m.nodes[ni]
	if !nd.ready || !ji.cj.NodeFeasible(nd.n) {
		return false
	}
	if ji.cj.Distinct && nd.jobs[allocKey(ji.j.Namespace, ji.j.ID)] {
		return false
	}
	for pi, dp := range ji.cj.DistinctBy {
		v, ok := constraint.ResolveNode(dp.Target, nd.n)
		if !ok || ji.propCounts[pi][v] >= dp.Limit {
			return false
		}
	}
	return true
}

// domCount is a domain and the GPUs a job could take from it now.
type domCount struct{ dom, n int }

// usable lists the domains of unit u the job may take GPUs from in state st, most free first.
func (m *model) usable(ji *jobInfo, u int, st *state) (int, []domCount) {
	total := 0
	var out []domCount
	for _, d := range m.units[u].doms {
		if n := m.domUsable(ji, u, d, st); n > 0 {
			out = append(out, domCount{d, n})
			total += n
		}
	}
	sort.SliceStable(out, func(a, b int) bool { return out[a].n > out[b].n })
	return total, out
}

// usableFree is the total of usable without building the list.
func (m *model) usableFree(ji *jobInfo, u int, st *state) int {
	total := 0
	for _, d := range m.units[u].doms {
		total += m.domUsable(ji, u, d, st)
	}
	return total
}

// domUsable is how many GPUs of domain d of unit u the job may take in st: none behind
// another namespace's isolation, and no more than the instances its device.ids allow.
func (m *model) domUsable(ji *jobInfo, u, d int, st *state) int {
	if iso := m.doms[d].iso; iso >= 0 && st.isoNS[iso] != -1 && st.isoNS[iso] != ji.ns {
		return 0
	}
	n := st.domFree[d]
	if n > 0 && ji.cj.PinsInstances() {
		g := m.units[u].g
		allowed := 0
		for _, ii := range m.doms[d].insts {
			if st.instUsed[ii] == 0 && ji.cj.InstanceAllowed(g, m.insts[ii].in.ID) {
				allowed++
			}
		}
		n = min(n, allowed)
	}
	return n
}

// unitFree is the free GPUs of a unit in st.
func (m *model) unitFree(u int, st *state) int {
	f := 0
	for _, d := range m.units[u].doms {
		f += st.domFree[d]
	}
	return f
}

// nvlinkOK reports whether unit u has c free GPUs (in the snapshot) that are all pairwise
// NVLink-connected.
func (m *model) nvlinkOK(u, c int) bool {
	if c <= 1 {
		return true
	}
	un := &m.units[u]
	if un.nvAll {
		return true
	}
	if un.peers == nil {
		return false
	}
	key := [2]int{u, c}
	if v, ok := m.nv[key]; ok {
		return v
	}
	var free []int
	for _, ii := range un.insts {
		if m.insts[ii].used == 0 {
			free = append(free, ii)
		}
	}
	set := m.pickSet(u, free, c)
	ok := len(set) == c && m.links(u, set) == c*(c-1)/2
	m.nv[key] = ok
	return ok
}

func (m *model) linked(u, a, b int) bool {
	un := &m.units[u]
	return un.nvAll || un.peers[[2]int{a, b}]
}

func (m *model) links(u int, set []int) int {
	n := 0
	for i := range set {
		for j := i + 1; j < len(set); j++ {
			if m.linked(u, set[i], set[j]) {
				n++
			}
		}
	}
	return n
}

// pickSet chooses c of cands on unit u, preferring NVLink-connected sets, then GPUs behind the
// same PCIe switch and NUMA node: greedy growth from every start, best set kept.
func (m *model) pickSet(u int, cands []int, c int) []int {
	if c >= len(cands) {
		return append([]int(nil), cands...)
	}
	if c <= 0 {
		return nil
	}
	var best []int
	bestScore := -1
	in := make(map[int]bool, c)
	for _, s := range cands {
		set := []int{s}
		clear(in)
		in[s] = true
		score := 0
		for len(set) < c {
			pick, pickScore := -1, -1
			for _, x := range cands {
				if in[x] {
					continue
				}
				sc := 0
				for _, y := range set {
					if m.linked(u, x, y) {
						sc += 4
					}
					if m.insts[x].in.PCIeSwitch != "" && m.insts[x].in.PCIeSwitch == m.insts[y].in.PCIeSwitch {
						sc += 2
					}
					if m.insts[x].in.NUMANode == m.insts[y].in.NUMANode {
						sc++
					}
				}
				if sc > pickScore {
					pick, pickScore = x, sc
				}
			}
			set = append(set, pick)
			in[pick] = true
			score += pickScore
		}
		if score > bestScore {
			best, bestScore = set, score
		}
		if m.units[u].nvAll && m.insts[s].in.PCIeSwitch == "" {
			break // every start is equivalent
		}
	}
	sort.Ints(best)
	return best
}

// classOptions builds job ji's candidate options over the classes of cs: one option per
// admitted class that can hold the job on one node (built on the class's first
// representative), windows of representatives across nodes for jobs that span nodes, and
// co-location on shared GPUs for jobs that allow sharing. Options are scored and capped.
// Per type a job is offered its best classes by value (MaxOptionsPerJob / types + 2).
func (m *model) classOptions(ji int, cs *classSet, st *state) []option {
	j := &m.jobs[ji]
	sh := m.shapeOf(j)
	// out is the model's scratch buffer; the result is only valid until the next call.
	out := m.optBuf[:0]
	defer func() { m.optBuf = out[:0] }()
	var seen map[string]bool
	add := func(o option) { // multi-node windows and co-location may repeat themselves
		k := optionKey(&o)
		if seen[k] {
			return
		}
		if seen == nil {
			seen = map[string]bool{}
		}
		seen[k] = true
		out = append(out, o)
	}
	perType := (m.cfg.MaxOptionsPerJob+len(m.types)-1)/len(m.types) + 2
	type cand struct {
		u     int
		value float64
	}
	var singles []cand
	for t := range m.types {
		var units, frees []int
		maxF := 0
		singles = singles[:0]
		for c := range cs.classes {
			cl := &cs.classes[c]
			if cl.typ != t || len(cl.reps) == 0 || !sh.admit[cl.reps[0]] {
				continue
			}
			f := m.usableFree(j, cl.reps[0], st)
			if f == 0 {
				continue
			}
			maxF = max(maxF, f)
			if (j.k == 1 || j.p == j.g || (j.p == 0 && f >= j.g)) && f >= j.g {
				singles = append(singles, cand{cl.reps[0], m.quickValue(j, t, cl.reps[0], st)})
			}
			for k, u := range cl.reps {
				if k >= j.k {
					break
				}
				if k > 0 {
					f = m.usableFree(j, u, st)
				}
				units = append(units, u)
				frees = append(frees, f)
			}
		}
		// Only the classes worth most (by the objective's own terms) become options.
		sort.Slice(singles, func(a, b int) bool { return singles[a].value > singles[b].value })
		pick := singles[:min(len(singles), perType)]
		for _, c := range pick {
			if parts := m.unitOption(ji, c.u, j.g, st); parts != nil {
				out = append(out, option{job: ji, typ: t, parts: parts, units: []int{c.u}, nodes: 1,
					concrete: j.cj.PinsInstances(), nvlink: m.nvlinkOK(c.u, j.g)})
			}
		}
		if j.k > 1 && len(units) > 0 && (j.p > 0 && j.p < j.g || j.p == 0 && maxF < j.g) {
			m.multiOptions(ji, t, units, frees, st, 0, add)
		}
		if j.share && (j.k == 1 || j.p == j.g || j.p == 0) {
			m.colocOptions(ji, t, st, nil, add)
		}
	}
	m.score(ji, out, st)
	return m.capOptions(out)
}

// quickValue estimates the value of placing job j on unit u of type t on one node, without
// the energy term's normalisation (which needs all options): it ranks classes before options
// are built.
func (m *model) quickValue(j *jobInfo, t, u int, st *state) float64 {
	cfg := &m.cfg
	e := j.est[t]
	T := e.Throughput
	nv := m.nvlinkOK(u, j.g)
	if j.g > 1 && !nv {
		T *= cfg.PCIeEfficiency
	}
	S := 0.0
	if j.bestT > 0 {
		S = T / j.bestT
	}
	un := &m.units[u]
	F := float64(m.unitFree(u, st)-j.g) / float64(un.size)
	nd := &m.nodes[un.node]
	busy := nd.healthy - m.nodeFree(un.node, st)
	L := float64(busy+j.g)/float64(max(nd.healthy, 1)) - m.util
	epw := math.Inf(1)
	if T > 0 {
		epw = e.PowerW / T
	}
	E := 1.0
	if j.minEPW > 0 && !math.IsInf(epw, 1) {
		E = 1 - j.minEPW/epw
	}
	aff := 0.0
	if len(j.cj.NodeAff) > 0 || len(j.cj.DeviceAff) > 0 {
		aff = j.cj.NodeAffinity(nd.n) + j.cj.DeviceAffinity(un.g)
	}
	return cfg.PriorityWeight*j.prio*S - j.lambda*E - cfg.FragmentWeight*F - cfg.ImbalanceWeight*L +
		cfg.LookAheadWeight*(1-math.Min(1, m.pressure[t])) + cfg.AffinityWeight*aff
}

// exhaustiveOptions (tests) enumerates every placement of job ji over the admitted units: all
// sets of up to k nodes of one type and every split of the GPUs over them.
func (m *model) exhaustiveOptions(ji int, st *state) []option {
	j := &m.jobs[ji]
	sh := m.shapeOf(j)
	var out []option
	for t := range m.types {
		var units, frees []int
		for _, u := range sh.byType[t] {
			if f, _ := m.usable(j, u, st); f > 0 {
				units = append(units, u)
				frees = append(frees, f)
			}
		}
		var rec func(start int, chosen []int, counts []int, left int)
		rec = func(start int, chosen []int, counts []int, left int) {
			if left == 0 {
				var parts []part
				nodes := map[int]bool{}
				for i, u := range chosen {
					ps := m.unitOption(ji, u, counts[i], st)
					if ps == nil {
						return
					}
					parts = append(parts, ps...)
					nodes[m.units[u].node] = true
				}
				o := option{job: ji, typ: t, parts: parts, units: append([]int(nil), chosen...), nodes: len(chosen),
					concrete: j.cj.PinsInstances()}
				if len(chosen) == 1 {
					o.nvlink = m.nvlinkOK(chosen[0], j.g)
				}
				if len(chosen) > 1 && !m.distinctOK(j, chosen) {
					return
				}
				out = append(out, o)
				return
			}
			if len(chosen) == j.k {
				return
			}
			for i := start; i < len(units); i++ {
				u := units[i]
				dup := false
				for _, c := range chosen {
					dup = dup || m.units[c].node == m.units[u].node
				}
				if dup {
					continue
				}
				lo, hi := 1, min(frees[i], left)
				if j.p > 0 {
					lo, hi = j.p, j.p
					if frees[i] < j.p || left < j.p {
						continue
					}
				}
				for c := lo; c <= hi; c++ {
					rec(i+1, append(chosen, u), append(counts, c), left-c)
				}
			}
		}
		rec(0, nil, nil, j.g)
		if j.share && (j.k == 1 || j.p == j.g || j.p == 0) {
			m.colocOptions(ji, t, st, nil, func(o option) { out = append(out, o) })
		}
	}
	m.score(ji, out, st)
	kept := out[:0]
	for _, o := range out {
		if o.job >= 0 {
			kept = append(kept, o)
		}
	}
	sort.SliceStable(kept, func(a, b int) bool { return kept[a].value > kept[b].value })
	return kept
}

// distinctOK checks distinct_property limits for an option over several nodes.
func (m *model) distinctOK(j *jobInfo, units []int) bool {
	for pi, dp := range j.cj.DistinctBy {
		counts := map[string]int{}
		for _, u := range units {
			v, _ := constraint.ResolveNode(dp.Target, m.nodes[m.units[u].node].n)
			counts[v]++
			if j.propCounts[pi][v]+counts[v] > dp.Limit {
				return false
			}
		}
	}
	return true
}

func optionKey(o *option) string {
	b := make([]byte, 0, 16*len(o.parts))
	for _, p := range o.parts {
		b = append(b, byte(p.dom), byte(p.dom>>8), byte(p.dom>>16), byte(p.count))
		for _, i := range p.insts {
			b = append(b, byte(i), byte(i>>8), byte(i>>16))
		}
		b = append(b, 0xff)
	}
	if o.coloc {
		b = append(b, 'c')
	}
	return string(b)
}

// unitOption builds the parts of taking c GPUs from unit u (most-free domains first); nil when
// the unit cannot serve c.
func (m *model) unitOption(ji int, u, c int, st *state) []part {
	j := &m.jobs[ji]
	total, doms := m.usable(j, u, st)
	if total < c {
		return nil
	}
	var parts []part
	left := c
	for _, dc := range doms {
		if left == 0 {
			break
		}
		n := min(left, dc.n)
		p := part{dom: dc.dom, count: n}
		if j.cj.PinsInstances() {
			var cands []int
			for _, ii := range m.doms[dc.dom].insts {
				if st.instUsed[ii] == 0 && j.cj.InstanceAllowed(m.units[u].g, m.insts[ii].in.ID) {
					cands = append(cands, ii)
				}
			}
			p.insts = m.pickSet(u, cands, n)
		}
		parts = append(parts, p)
		left -= n
	}
	return parts
}

func (m *model) nodeFree(ni int, st *state) int {
	f := 0
	for _, u := range m.unitsOfNode[ni] {
		f += m.unitFree(u, st)
	}
	return f
}

// multiOptions offers the job across nodes of type t: exactly p GPUs on g/p nodes when
// GPUsPerNode is set (best fit first), else the fewest nodes up to k (most free first).
// Windows of consecutive units are rotated by ord.
func (m *model) multiOptions(ji, t int, units, frees []int, st *state, ord int, add func(option)) {
	j := &m.jobs[ji]
	idx := make([]int, len(units))
	for i := range idx {
		idx[i] = i
	}
	if j.p > 0 {
		kept := idx[:0]
		for _, i := range idx {
			if frees[i] >= j.p {
				kept = append(kept, i)
			}
		}
		idx = kept
		sort.SliceStable(idx, func(a, b int) bool { return frees[idx[a]] < frees[idx[b]] })
	} else {
		sort.SliceStable(idx, func(a, b int) bool { return frees[idx[a]] > frees[idx[b]] })
	}
	if len(idx) == 0 {
		return
	}
	want := 2 * m.cfg.NodesPerClass
	starts := []int{0}
	for i := 1; i < want; i++ {
		starts = append(starts, (ord*want+i*max(1, j.k))%len(idx))
	}
	for _, s := range starts {
		used := map[int]bool{}
		var parts []part
		var us []int
		left := j.g
		for step := 0; step < len(idx) && left > 0 && len(us) < j.k; step++ {
			i := idx[(s+step)%len(idx)]
			u := units[i]
			if used[m.units[u].node] {
				continue
			}
			c := min(left, frees[i])
			if j.p > 0 {
				c = j.p
			}
			ps := m.unitOption(ji, u, c, st)
			if ps == nil {
				continue
			}
			used[m.units[u].node] = true
			parts = append(parts, ps...)
			us = append(us, u)
			left -= c
		}
		if left > 0 || (j.p > 0 && len(us) != j.k) || !m.distinctOK(j, us) {
			continue
		}
		add(option{job: ji, typ: t, parts: parts, units: us, nodes: len(us), concrete: j.cj.PinsInstances()})
	}
}

// colocOptions offers a sharing job GPUs that running sharing jobs hold, below MaxShare, on
// one node, naming the instances.
func (m *model) colocOptions(ji, t int, st *state, allow func(u int) bool, add func(option)) {
	j := &m.jobs[ji]
	sh := m.shapeOf(j)
	n := 0
	for _, u := range m.colocUnits(ji, t) {
		if n >= m.cfg.NodesPerClass {
			return
		}
		if !sh.admit[u] || (allow != nil && !allow(u)) {
			continue
		}
		un := &m.units[u]
		var cands []int
		for _, ii := range un.insts {
			in := &m.insts[ii]
			if in.used == 0 || !in.shareable || st.instUsed[ii] >= m.cfg.MaxShare {
				continue
			}
			if m.cfg.TenantIsolation && in.holder != j.ns {
				continue
			}
			if iso := m.doms[in.dom].iso; iso >= 0 && st.isoNS[iso] != -1 && st.isoNS[iso] != j.ns {
				continue
			}
			if j.cj.PinsInstances() && !j.cj.InstanceAllowed(un.g, in.in.ID) {
				continue
			}
			if m.pairGain(ji, ii, t) < 1 {
				continue // the pair would lose more than it gains
			}
			cands = append(cands, ii)
		}
		if len(cands) < j.g {
			continue
		}
		sort.SliceStable(cands, func(a, b int) bool { return st.instUsed[cands[a]] < st.instUsed[cands[b]] })
		m.sortByPair(ji, t, cands)
		set := m.pickSet(u, cands, j.g)
		byDom := map[int][]int{}
		var order []int
		for _, ii := range set {
			d := m.insts[ii].dom
			if _, ok := byDom[d]; !ok {
				order = append(order, d)
			}
			byDom[d] = append(byDom[d], ii)
		}
		var parts []part
		for _, d := range order {
			parts = append(parts, part{dom: d, count: len(byDom[d]), insts: byDom[d]})
		}
		add(option{job: ji, typ: t, parts: parts, units: []int{u}, nodes: 1, concrete: true, coloc: true,
			nvlink: m.links(u, set) == j.g*(j.g-1)/2})
		n++
	}
}

// score fills each option's prediction, terms and value, and drops options below T_min.
func (m *model) score(ji int, opts []option, st *state) {
	j := &m.jobs[ji]
	cfg := &m.cfg
	for i := range opts {
		o := &opts[i]
		e := j.est[o.typ]
		f := 1.0
		switch {
		case o.nodes > 1:
			f = cfg.CrossNodeEfficiency
		case j.g > 1 && !o.nvlink:
			f = cfg.PCIeEfficiency
		}
		sf, keep := m.shareFactor(ji, o)
		if !keep {
			o.T, o.P = -1, 0 // a pair that loses more than it gains: dropped below
			continue
		}
		f *= sf
		o.T, o.P = e.Throughput*f, e.PowerW
	}
	kept := opts[:0]
	for i := range opts {
		o := opts[i]
		if o.T < j.tmin || o.T < 0 {
			continue
		}
		if j.bestT > 0 {
			o.S = o.T / j.bestT
		}
		o.E = 1
		switch {
		case o.T > 0 && o.P > 0 && j.minEPW > 0:
			o.E = max(0, 1-j.minEPW/(o.P/o.T))
		case o.T > 0:
			o.E = 0
		}
		if !o.coloc {
			perUnit := map[int]int{}
			for _, p := range o.parts {
				perUnit[m.doms[p.dom].unit] += p.count
			}
			for u, c := range perUnit {
				un := &m.units[u]
				o.F += float64(m.unitFree(u, st)-c) / float64(un.size)
				nd := &m.nodes[un.node]
				busy := nd.healthy - m.nodeFree(un.node, st)
				o.L += float64(c) / float64(j.g) * (float64(busy+c)/float64(max(nd.healthy, 1)) - m.util)
			}
			o.F /= float64(len(perUnit))
		}
		o.A = 1 - math.Min(1, m.pressure[o.typ])
		if len(j.cj.NodeAff) > 0 || len(j.cj.DeviceAff) > 0 {
			for _, u := range o.units {
				o.Aff += j.cj.NodeAffinity(m.nodes[m.units[u].node].n) + j.cj.DeviceAffinity(m.units[u].g)
			}
			o.Aff /= float64(len(o.units))
		}
		o.value = float64(j.g) * (cfg.PlaceReward + cfg.PriorityWeight*j.prio*o.S + cfg.RankWeight*j.prio + j.lift -
			j.lambda*o.E - cfg.FragmentWeight*o.F - cfg.ImbalanceWeight*o.L + cfg.LookAheadWeight*o.A +
			cfg.AffinityWeight*o.Aff)
		kept = append(kept, o)
	}
	// Reuse of the backing array: callers use the returned slice from capOptions.
	copy(opts, kept)
	for i := len(kept); i < len(opts); i++ {
		opts[i] = option{job: -1}
	}
}

// capOptions keeps the best MaxOptionsPerJob options, at least a fair share per GPU type so
// that a job keeps alternatives when its favourite type is full. The result is only valid
// until the next call.
func (m *model) capOptions(opts []option) []option {
	idx := make([]int, 0, len(opts))
	for i := range opts {
		if opts[i].job >= 0 {
			idx = append(idx, i)
		}
	}
	sort.SliceStable(idx, func(a, b int) bool { return opts[idx[a]].value > opts[idx[b]].value })
	limit := m.cfg.MaxOptionsPerJob
	pick := idx
	if len(idx) > limit {
		types := map[int]int{}
		for _, i := range idx {
			types[opts[i].typ]++
		}
		perType := (limit + len(types) - 1) / len(types)
		taken := map[int]int{}
		var first, rest []int
		for _, i := range idx {
			if taken[opts[i].typ] < perType && len(first) < limit {
				first = append(first, i)
				taken[opts[i].typ]++
			} else {
				rest = append(rest, i)
			}
		}
		for _, i := range rest {
			if len(first) >= limit {
				break
			}
			first = append(first, i)
		}
		sort.SliceStable(first, func(a, b int) bool { return opts[first[a]].value > opts[first[b]].value })
		pick = first
	}
	// The result lives in the model's second scratch buffer: prepareScope copies it.
	out := m.capBuf[:0]
	for _, i := range pick {
		out = append(out, opts[i])
	}
	m.capBuf = out
	return out
}
