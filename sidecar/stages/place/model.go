package place

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/hetgpu/hetgpu/model/cluster"
	"github.com/hetgpu/hetgpu/model/constraint"
	"github.com/hetgpu/hetgpu/sidecar/sched"
)

// model is one round's indexed view of the snapshot and the ranked jobs. It is built once per
// Place call and read-only afterwards except for its caches, which are only touched by the
// goroutine that builds candidates.
type model struct {
	cfg  Config
	snap *cluster.Snapshot
	pred sched.Predictor
	// rs is the round's state (compiled constraints); nil compiles afresh.
	rs *sched.RoundState

	nodes []nodeInfo
	units []unitInfo
	doms  []domInfo
	insts []instInfo
	// isoKeys are the PCIe switches (node + switch ID) that tenant isolation guards.
	isoKeys []string

	types   []string
	typeIdx map[string]int
	// typeFree and typeHealthy count GPUs per type in the snapshot.
	typeFree, typeHealthy []int

	nsNames []string
	nsIdx   map[string]int
	// nsCap is the most GPUs a namespace may hold in total (running + new); -1 = no cap.
	nsCap []int
	// caps are the snapshot's queue caps (queues.go).
	caps []capRow

	jobs   []jobInfo
	window int
	// lookAhead are the indices of the jobs right after the window.
	lookAhead []int
	// pressure is the look-ahead jobs' demand per GPU type relative to its free GPUs.
	pressure []float64

	healthy, busy int
	util          float64
	load          float64
	lambda        float64
	// roundEnd is the round deadline for the LP and MILP steps (zero: none; see
	// Config.RoundDeadline).
	roundEnd time.Time

	shapes    map[string]*shape
	nv        map[[2]int]bool
	groupFeas map[groupFeasKey]bool

	// optBuf and capBuf are classOptions' scratch buffers (candidates are built by one
	// goroutine at a time).
	optBuf, capBuf []option

	unitsOfNode [][]int
	// shareUnits lists per type the units with GPUs held only by jobs that share.
	shareUnits [][]int
	// share indexes co-runners on shared GPUs (sharing.go).
	share *shareIndex
}

type nodeInfo struct {
	n              *cluster.Node
	ready          bool
	healthy, busy0 int
	allocs0        int
	// jobs holds "namespace/jobID" of every running allocation (distinct_hosts).
	jobs map[string]bool
}

// unitInfo is one device group on one node: a job's share of a node comes from one unit.
type unitInfo struct {
	node, group int
	g           *cluster.DeviceGroup
	// groupSig identifies the group's vendor, type, name and attributes (not its instances).
	groupSig int
	typ      int
	size     int
	doms     []int
	insts    []int
	// nvAll: every pair of GPUs is NVLink-connected (an NVSwitch node without per-GPU peers).
	nvAll bool
	peers map[[2]int]bool
}

// domInfo is a capacity domain: a unit, or with tenant isolation one PCIe switch of a unit.
type domInfo struct {
	unit  int
	iso   int // isolation key index, or -1
	insts []int
	free0 int
}

type instInfo struct {
	dom  int
	in   *cluster.Instance
	used int
	// holder is the namespace index of the jobs on it (-1 none, -2 several); shareable is
	// true when every holder allows sharing.
	holder    int
	shareable bool
}

type jobInfo struct {
	j     *cluster.Job
	pos   int // 0-based position in the ranker's order
	score float64
	prio  float64
	// lift is what the job's place in the order adds to every option beyond prio's terms
	// (sched.Ranked.RankerPos).
	lift     float64
	lambda   float64
	cj       *constraint.Job
	err      error
	g, p, k  int // GPUs, exact GPUs per node (0 = any), most nodes
	ns       int
	shareKey string
	est      []sched.Estimate // per type, for g GPUs
	bestT    float64
	// minEPW is the least energy per unit of work over the types (before placement factors).
	minEPW float64
	tmin   float64
	share  bool
	// distinct-property counts of this job's running allocations, per property and value.
	propCounts []map[string]int
}

// state is the residual capacity the greedy, the MILP rows and the backfill work against.
type state struct {
	domFree  []int
	instUsed []int
	nodeJobs []int
	nsGPUs   []int
	isoNS    []int // per isolation key: -1 free, namespace index, -2 several
	capUsed  []int // per queue cap: GPUs it counts (queues.go)
}

func (s *state) clone() *state {
	return &state{
		domFree:  append([]int(nil), s.domFree...),
		instUsed: append([]int(nil), s.instUsed...),
		nodeJobs: append([]int(nil), s.nodeJobs...),
		nsGPUs:   append([]int(nil), s.nsGPUs...),
		isoNS:    append([]int(nil), s.isoNS...),
		capUsed:  append([]int(nil), s.capUsed...),
	}
}

func allocKey(ns, job string) string { return cluster.JobKey(ns, job) }

// newModel indexes the snapshot and the ranked jobs. lambda is the round's base energy weight.
func newModel(cfg Config, rs *sched.RoundState, snap *cluster.Snapshot, ranked []sched.Ranked, pred sched.Predictor, lambda float64) (*model, *state, error) {
	m := &model{cfg: cfg, snap: snap, pred: pred, rs: rs, typeIdx: map[string]int{}, nsIdx: map[string]int{},
		shapes: map[string]*shape{}, nv: map[[2]int]bool{}, groupFeas: map[groupFeasKey]bool{}, lambda: lambda}
	groupSigs := map[string]int{}
	st := &state{}
	nsOf := func(ns string) int {
		if i, ok := m.nsIdx[ns]; ok {
			return i
		}
		m.nsIdx[ns] = len(m.nsNames)
		m.nsNames = append(m.nsNames, ns)
		st.nsGPUs = append(st.nsGPUs, 0)
		return m.nsIdx[ns]
	}
	isoIdx := map[string]int{}

	// Which instances do running allocations hold? Instance IDs are unique per node.
	type holderInfo struct {
		n      int
		ns     int
		shared bool
	}
	holders := map[string][]holderInfo{}
	nodeIdx := map[string]int{}
	for i := range snap.Nodes {
		nodeIdx[snap.Nodes[i].ID] = i
	}
	m.nodes = make([]nodeInfo, len(snap.Nodes))
	for i := range snap.Nodes {
		n := &snap.Nodes[i]
		m.nodes[i] = nodeInfo{n: n, ready: n.Ready(), jobs: map[string]bool{}}
	}
	for ai := range snap.Running {
		a := &snap.Running[ai]
		ni, ok := nodeIdx[a.NodeID]
		if !ok {
			continue
		}
		ns := nsOf(a.Namespace)
		m.nodes[ni].allocs0++
		m.nodes[ni].jobs[allocKey(a.Namespace, a.JobID)] = true
		st.nsGPUs[ns] += len(a.DeviceIDs)
		for _, id := range a.DeviceIDs {
			k := a.NodeID + "\x00" + id
			holders[k] = append(holders[k], holderInfo{n: ni, ns: ns, shared: a.Shared})
		}
	}

	for ni := range snap.Nodes {
		n := &snap.Nodes[ni]
		for gi := range n.Devices {
			g := &n.Devices[gi]
			typ := g.TypeKey()
			ti, ok := m.typeIdx[typ]
			if !ok {
				ti = len(m.types)
				m.typeIdx[typ] = ti
				m.types = append(m.types, typ)
				m.typeFree = append(m.typeFree, 0)
				m.typeHealthy = append(m.typeHealthy, 0)
			}
			u := unitInfo{node: ni, group: gi, g: g, typ: ti}
			sig := groupSignature(g)
			if _, ok := groupSigs[sig]; !ok {
				groupSigs[sig] = len(groupSigs)
			}
			u.groupSig = groupSigs[sig]
			hasPeers := false
			for _, in := range g.Instances {
				if len(in.NVLinkPeers) > 0 {
					hasPeers = true
				}
			}
			u.nvAll = strings.EqualFold(n.Interconnect, "nvlink") && !hasPeers
			ui := len(m.units)
			domBySwitch := map[string]int{}
			idByInst := map[string]int{}
			for ii := range g.Instances {
				in := &g.Instances[ii]
				if !in.Healthy {
					continue
				}
				sw := ""
				if cfg.TenantIsolation && in.PCIeSwitch != "" {
					sw = in.PCIeSwitch
				}
				di, ok := domBySwitch[sw]
				if !ok {
					iso := -1
					if sw != "" {
						key := n.ID + "\x00" + sw
						if iso, ok = isoIdx[key]; !ok {
							iso = len(m.isoKeys)
							isoIdx[key] = iso
							m.isoKeys = append(m.isoKeys, key)
							st.isoNS = append(st.isoNS, -1)
						}
					}
					di = len(m.doms)
					domBySwitch[sw] = di
					m.doms = append(m.doms, domInfo{unit: ui, iso: iso})
					st.domFree = append(st.domFree, 0)
					u.doms = append(u.doms, di)
				}
				info := instInfo{dom: di, in: in, holder: -1, shareable: true}
				for _, h := range holders[n.ID+"\x00"+in.ID] {
					info.used++
					info.shareable = info.shareable && h.shared
					switch {
					case info.holder == -1:
						info.holder = h.ns
					case info.holder != h.ns:
						info.holder = -2
					}
				}
				idx := len(m.insts)
				m.insts = append(m.insts, info)
				st.instUsed = append(st.instUsed, info.used)
				idByInst[in.ID] = idx
				m.doms[di].insts = append(m.doms[di].insts, idx)
				u.insts = append(u.insts, idx)
				u.size++
				m.nodes[ni].healthy++
				m.typeHealthy[ti]++
				if info.used == 0 {
					m.doms[di].free0++
					st.domFree[di]++
					m.typeFree[ti]++
				} else {
					m.nodes[ni].busy0++
					if iso := m.doms[di].iso; iso >= 0 {
						st.isoNS[iso] = mergeNS(st.isoNS[iso], info.holder)
					}
				}
			}
			if hasPeers {
				u.peers = map[[2]int]bool{}
				for _, a := range u.insts {
					for _, pid := range m.insts[a].in.NVLinkPeers {
						if b, ok := idByInst[pid]; ok && b != a {
							u.peers[[2]int{a, b}] = true
							u.peers[[2]int{b, a}] = true
						}
					}
				}
			}
			m.units = append(m.units, u)
		}
	}
	m.unitsOfNode = make([][]int, len(m.nodes))
	m.shareUnits = make([][]int, len(m.types))
	for u := range m.units {
		m.unitsOfNode[m.units[u].node] = append(m.unitsOfNode[m.units[u].node], u)
		for _, ii := range m.units[u].insts {
			if m.insts[ii].used > 0 && m.insts[ii].shareable {
				m.shareUnits[m.units[u].typ] = append(m.shareUnits[m.units[u].typ], u)
				break
			}
		}
	}
	m.initSharing()
	st.nodeJobs = make([]int, len(m.nodes))
	for i := range m.nodes {
		st.nodeJobs[i] = m.nodes[i].allocs0
		m.healthy += m.nodes[i].healthy
		m.busy += m.nodes[i].busy0
	}
	if m.healthy > 0 {
		m.util = float64(m.busy) / float64(m.healthy)
	}

	// Jobs, in rank order.
	free := m.healthy - m.busy
	demand := 0
	m.jobs = make([]jobInfo, len(ranked))
	for r := range ranked {
		j := ranked[r].Job
		ji := &m.jobs[r]
		*ji = jobInfo{j: j, pos: r, score: ranked[r].Score, ns: nsOf(j.Namespace)}
		ji.prio = 1 / (1 + float64(r)/cfg.RankHalfLife)
		if rp := ranked[r].RankerPos; rp > 0 {
			// A job placed first for its queue's guarantee is owed GPUs, not the fastest ones
			// ahead of better-ranked jobs: it chooses among its options with the priority of
			// the ranker's position, and the rest of its place in the order (lift, the same
			// for every option) keeps it placed before them.
			ranker := 1 / (1 + float64(rp-1)/cfg.RankHalfLife)
			ji.lift = max(ji.prio-ranker, 0) * (cfg.PriorityWeight + cfg.RankWeight)
			ji.prio = ranker
		}
		ji.lambda = lambda
		if j.Hetgpu.EnergyWeight > 0 {
			ji.lambda = j.Hetgpu.EnergyWeight
		}
		ji.err = m.initJob(ji)
		before := demand
		if ji.err == nil {
			demand += ji.g
		}
		// The window grows while the jobs before this one ask for less than WindowDemand x
		// the free GPUs.
		if m.window == r && r < cfg.MaxWindow && float64(before) < cfg.WindowDemand*float64(max(free, 1)) {
			m.window = r + 1
		}
	}
	for r := m.window; r < len(m.jobs) && len(m.lookAhead) < cfg.LookAhead; r++ {
		if m.jobs[r].err == nil {
			m.lookAhead = append(m.lookAhead, r)
		}
	}
	m.load = float64(m.busy+demand) / float64(max(m.healthy, 1))

	// Namespace caps (running + new GPUs).
	m.nsCap = make([]int, len(m.nsNames))
	for i, ns := range m.nsNames {
		share, ok := cfg.NamespaceShare[ns]
		if !ok {
			share = cfg.DefaultNamespaceShare
		}
		m.nsCap[i] = -1
		if share < 1 {
			m.nsCap[i] = int(math.Floor(share * float64(m.healthy)))
		}
	}

	m.initCaps(st)

	// Look-ahead pressure per type.
	m.pressure = make([]float64, len(m.types))
	for _, r := range m.lookAhead {
		ji := &m.jobs[r]
		for t := range m.types {
			if ji.bestT > 0 {
				m.pressure[t] += float64(ji.g) * ji.est[t].Throughput / ji.bestT
			}
		}
	}
	for t := range m.types {
		m.pressure[t] /= float64(max(m.typeFree[t], 1))
	}
	return m, st, nil
}

func mergeNS(cur, ns int) int {
	switch {
	case ns == -1:
		return cur
	case cur == -1:
		return ns
	case cur == ns:
		return cur
	}
	return -2
}

// initJob validates a job and fills its compiled rules and predictions. An error leaves the
// job waiting; it is reported in Stats.Skipped.
func (m *model) initJob(ji *jobInfo) error {
	j := ji.j
	if j.GPUs < 1 {
		return fmt.Errorf("job %s: GPUs = %d, expected >= 1", j.Key(), j.GPUs)
	}
	ji.g = j.GPUs
	ji.k = j.MaxNodes()
	if j.GPUsPerNode < 0 {
		return fmt.Errorf("job %s: GPUsPerNode = %d, expected >= 0", j.Key(), j.GPUsPerNode)
	}
	if p := j.GPUsPerNode; p > 0 {
		if j.GPUs%p != 0 {
			return fmt.Errorf("job %s: GPUs = %d is not a multiple of GPUsPerNode = %d", j.Key(), j.GPUs, p)
		}
		nodes := j.GPUs / p
		if j.Hetgpu.MaxNodes > 0 && nodes > j.Hetgpu.MaxNodes {
			return fmt.Errorf("job %s: %d GPUs at %d per node need %d nodes, but hetgpu.max_nodes = %d", j.Key(), j.GPUs, p, nodes, j.Hetgpu.MaxNodes)
		}
		ji.p, ji.k = p, nodes
	}
	if j.Hetgpu.MinThroughput < 0 || math.IsNaN(j.Hetgpu.MinThroughput) {
		return fmt.Errorf("job %s: hetgpu.min_throughput = %v, expected >= 0", j.Key(), j.Hetgpu.MinThroughput)
	}
	if m.cfg.HonorMinThroughput {
		ji.tmin = j.Hetgpu.MinThroughput
	}
	cj, err := m.rs.Compiled(j)
	if err != nil {
		return err
	}
	ji.cj = cj
	ji.share = j.Hetgpu.AllowSharing && m.cfg.MaxShare > 1
	for _, dp := range cj.DistinctBy {
		counts := map[string]int{}
		for ai := range m.snap.Running {
			a := &m.snap.Running[ai]
			if a.Namespace != j.Namespace || a.JobID != j.ID {
				continue
			}
			for ni := range m.nodes {
				if m.nodes[ni].n.ID == a.NodeID {
					if v, ok := constraint.ResolveNode(dp.Target, m.nodes[ni].n); ok {
						counts[v]++
					}
				}
			}
		}
		ji.propCounts = append(ji.propCounts, counts)
	}
	ji.est = make([]sched.Estimate, len(m.types))
	for t, typ := range m.types {
		e := m.pred.Predict(j, typ, ji.g)
		if e.Throughput < 0 || math.IsNaN(e.Throughput) || math.IsInf(e.Throughput, 0) {
			e.Throughput = 0
		}
		if e.PowerW < 0 || math.IsNaN(e.PowerW) || math.IsInf(e.PowerW, 0) {
			e.PowerW = 0
		}
		ji.est[t] = e
		ji.bestT = max(ji.bestT, e.Throughput)
		if e.Throughput > 0 && e.PowerW > 0 && (ji.minEPW == 0 || e.PowerW/e.Throughput < ji.minEPW) {
			ji.minEPW = e.PowerW / e.Throughput
		}
	}
	// Jobs with the same shareKey see the same feasible units and differ only in priority and
	// predictions; candidate generation works per shape.
	if len(cj.DistinctBy) > 0 || cj.Distinct || cj.PinsInstances() {
		ji.shareKey = "job:" + j.Key()
	} else {
		var b strings.Builder
		fmt.Fprintf(&b, "%s|%d|%d|%d|%s|%t|", j.DeviceName, ji.g, ji.p, ji.k, j.Namespace, ji.share)
		for _, c := range j.Constraints {
			b.WriteString(c.String() + ";")
		}
		b.WriteString("|")
		for _, c := range j.DeviceConstraints {
			b.WriteString(c.String() + ";")
		}
		b.WriteString("|")
		for _, a := range j.Affinities {
			fmt.Fprintf(&b, "%s %d;", (cluster.Constraint{LTarget: a.LTarget, RTarget: a.RTarget, Operand: a.Operand}).String(), a.Weight)
		}
		for _, a := range j.DeviceAffinities {
			fmt.Fprintf(&b, "%s %d;", (cluster.Constraint{LTarget: a.LTarget, RTarget: a.RTarget, Operand: a.Operand}).String(), a.Weight)
		}
		ji.shareKey = b.String()
	}
	return nil
}

// groupSignature is a device group's vendor, type, name and attributes as one string.
func groupSignature(g *cluster.DeviceGroup) string {
	keys := make([]string, 0, len(g.Attributes))
	for k := range g.Attributes {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteString(g.ID())
	for _, k := range keys {
		a := g.Attributes[k]
		b.WriteString("\x00" + k + "=" + constraint.String(a) + a.Unit)
	}
	return b.String()
}
