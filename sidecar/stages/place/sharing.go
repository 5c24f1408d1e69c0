package place

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"sync"

	"github.com/hetgpu/hetgpu/model/annot"
	"github.com/hetgpu/hetgpu/model/cluster"
	"github.com/hetgpu/hetgpu/sidecar/sched"
)

// Interference-aware co-location. A job shares a GPU in two ways:
//   - on a GPU slot: device groups of type "gpu-slot" (the hetgpu device plugin's sharing
//     block) hold one physical GPU each, every slot an instance Nomad places on its own. The
//     jobs on the group's other slots are the job's co-runners.
//   - in a co-location option (MaxShare > 1): on instances running sharing jobs hold. Nomad
//     gives an instance to one allocation only, so these are for the simulator.
//
// Either way the option's throughput is the job's throughput alone times its predicted
// ratio next to each co-runner (the predictor's pair prediction for the two jobs on that GPU
// type; SharedEfficiency where the predictor has none), and the option is not formed when a
// pair is predicted to lose more than it gains (the two ratios sum to less than 1: running
// the jobs one after the other would do better) or a running co-runner would fall below its
// T_min. New jobs paired in the same round are checked the same way after assignment
// (admitPairs): the later-ranked job waits for the next round when its pair fails.

// shareIndex is what a round knows about shared GPUs.
type shareIndex struct {
	pair sched.PairPredictor
	// slotUnit marks units that are GPU slot groups; unitAllocs lists, per slot unit, the
	// running allocations holding one of its slots; instAllocs the allocations per instance.
	slotUnit   []bool
	unitAllocs [][]int
	instAllocs map[int][]int
	// unitByKey finds a slot unit from a decision's node and device group.
	unitByKey map[string]int
	// coJobs is each running allocation's job as the predictor sees it.
	coJobs []cluster.Job

	// gains caches pair gains by (job, allocation, type); candidates may be built from
	// several goroutines.
	mu    sync.Mutex
	gains map[[3]int]float64
	pairs map[pairKey]pairPred
}

func (m *model) initSharing() {
	sh := &shareIndex{slotUnit: make([]bool, len(m.units)), unitAllocs: make([][]int, len(m.units)),
		instAllocs: map[int][]int{}, unitByKey: map[string]int{}, gains: map[[3]int]float64{},
		pairs: map[pairKey]pairPred{}}
	sh.pair, _ = m.pred.(sched.PairPredictor)
	byInst := map[string][]int{}
	sh.coJobs = make([]cluster.Job, len(m.snap.Running))
	for ai := range m.snap.Running {
		a := &m.snap.Running[ai]
		sh.coJobs[ai] = cluster.Job{Namespace: a.Namespace, ID: a.JobID, Group: a.Group, GPUs: max(1, len(a.DeviceIDs)),
			DeviceName: "nvidia/gpu", Hetgpu: a.Hetgpu}
		for _, id := range a.DeviceIDs {
			byInst[a.NodeID+"\x00"+id] = append(byInst[a.NodeID+"\x00"+id], ai)
		}
	}
	for u := range m.units {
		un := &m.units[u]
		node := m.nodes[un.node].n.ID
		slot := un.g.Type == annot.SlotType
		sh.slotUnit[u] = slot
		if slot {
			sh.unitByKey[node+"\x00"+un.g.ID()] = u
		}
		seen := map[int]bool{}
		for _, in := range un.g.Instances {
			for _, ai := range byInst[node+"\x00"+in.ID] {
				if slot && !seen[ai] {
					seen[ai] = true
					sh.unitAllocs[u] = append(sh.unitAllocs[u], ai)
				}
			}
		}
		for _, ii := range un.insts {
			if as := byInst[node+"\x00"+m.insts[ii].in.ID]; len(as) > 0 {
				sh.instAllocs[ii] = as
			}
		}
	}
	m.share = sh
	// Slots are one allocation each in Nomad: never co-location options on top of them.
	for t, us := range m.shareUnits {
		kept := us[:0]
		for _, u := range us {
			if !sh.slotUnit[u] {
				kept = append(kept, u)
			}
		}
		m.shareUnits[t] = kept
	}
}

// occupiedSlotUnit reports whether u is a slot group with running jobs: its options depend
// on who runs there, so the unit is a placement class of its own.
func (m *model) occupiedSlotUnit(u int) bool {
	return m.share != nil && m.share.slotUnit[u] && len(m.share.unitAllocs[u]) > 0
}

// coRunners returns the running allocations an option would share GPUs with.
func (m *model) coRunners(o *option) []int {
	if m.share == nil {
		return nil
	}
	if !o.coloc {
		// Most options touch no slot group: answer without allocating (score runs per option).
		slot := false
		for _, u := range o.units {
			slot = slot || m.share.slotUnit[u]
		}
		if !slot {
			return nil
		}
	}
	seen := map[int]bool{}
	var out []int
	add := func(as []int) {
		for _, ai := range as {
			if !seen[ai] {
				seen[ai] = true
				out = append(out, ai)
			}
		}
	}
	for _, u := range o.units {
		if m.share.slotUnit[u] {
			add(m.share.unitAllocs[u])
		}
	}
	if o.coloc {
		for _, p := range o.parts {
			for _, ii := range p.insts {
				add(m.share.instAllocs[ii])
			}
		}
	}
	sort.Ints(out)
	return out
}

// pairRatios predicts job a next to job b on a GPU type; src says where it came from.
// Predictions are cached per round by workload (model name and batch size) and type.
func (m *model) pairRatios(a, b *cluster.Job, typ string) (ra, rb float64, src string) {
	if m.share == nil || m.share.pair == nil {
		return m.cfg.SharedEfficiency, m.cfg.SharedEfficiency, "default"
	}
	wa, wb := workloadOf(a), workloadOf(b)
	key := pairKey{wa, wb, typ}
	m.share.mu.Lock()
	r, ok := m.share.pairs[key]
	m.share.mu.Unlock()
	if !ok {
		r = pairPred{m.cfg.SharedEfficiency, m.cfg.SharedEfficiency, "default"}
		if ra, rb, ok := m.share.pair.PredictPair(a, b, typ); ok {
			// A ratio of 0 is a measured out-of-memory pair: never formed (pairLoses).
			r = pairPred{max(ra, 0), max(rb, 0), "predicted"}
		}
		m.share.mu.Lock()
		m.share.pairs[key] = r
		m.share.mu.Unlock()
	}
	return r.ra, r.rb, r.src
}

type pairKey struct{ a, b, typ string }

type pairPred struct {
	ra, rb float64
	src    string
}

// workloadOf names what a pair prediction depends on: the model and batch size, else the job.
func workloadOf(j *cluster.Job) string {
	if j.Hetgpu.ModelName != "" {
		return fmt.Sprintf("%s|%s|%d", j.Hetgpu.ModelFamily, j.Hetgpu.ModelName, j.Hetgpu.BatchSize)
	}
	return "job:" + j.Key()
}

// shareFactor is the factor an option's co-runners put on the job's throughput; keep is
// false when a pair would lose more than it gains or break a running co-runner's T_min.
func (m *model) shareFactor(ji int, o *option) (f float64, keep bool) {
	co := m.coRunners(o)
	if len(co) == 0 {
		if o.coloc {
			return m.cfg.SharedEfficiency, true
		}
		return 1, true
	}
	j := m.jobs[ji].j
	typ := m.types[o.typ]
	f = 1
	for _, ai := range co {
		c := &m.share.coJobs[ai]
		ra, rb, _ := m.pairRatios(j, c, typ)
		if pairLoses(ra, rb) {
			return 0, false
		}
		if tmin := c.Hetgpu.MinThroughput; m.cfg.HonorMinThroughput && tmin > 0 {
			if m.pred.Predict(c, typ, c.GPUs).Throughput*rb < tmin {
				return 0, false
			}
		}
		f *= ra
	}
	return f, true
}

// shareNote describes an option's co-runners for the explanation.
func (m *model) shareNote(o *option) string {
	co := m.coRunners(o)
	if len(co) == 0 {
		return ""
	}
	j := m.jobs[o.job].j
	typ := m.types[o.typ]
	var parts []string
	for _, ai := range co {
		c := &m.share.coJobs[ai]
		ra, rb, src := m.pairRatios(j, c, typ)
		parts = append(parts, coRunnerText(c.Key(), ra, rb, src))
	}
	return "; co-runners: " + strings.Join(parts, ", ")
}

func coRunnerText(key string, ra, rb float64, src string) string {
	return fmt.Sprintf("%s (%s slowdown: this job x%.2f, co-runner x%.2f)", key, src, ra, rb)
}

// admitPairs checks the new jobs that this round put on the same GPU slot group, in rank
// order: each pair is predicted like a pair with a running job; a job whose pair fails is
// left out of the round (it is placed next round, against the running co-runner). Kept
// decisions carry the pair's factors in their predicted throughput and explanation.
func (m *model) admitPairs(ds []cluster.Decision) []cluster.Decision {
	if m.share == nil || len(m.share.unitByKey) == 0 || len(ds) < 2 {
		return ds
	}
	jobOf := map[string]*jobInfo{}
	for i := range m.jobs {
		jobOf[m.jobs[i].j.Key()] = &m.jobs[i]
	}
	order := make([]int, len(ds))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return ds[order[a]].Rank < ds[order[b]].Rank })
	onUnit := map[int][]int{} // slot unit -> accepted decisions this round
	drop := map[int]bool{}
	for _, di := range order {
		d := &ds[di]
		ji := jobOf[d.JobKey()]
		if ji == nil {
			continue
		}
		var units []int
		for _, a := range d.Assign {
			if u, ok := m.share.unitByKey[a.NodeID+"\x00"+a.DeviceGroup]; ok {
				units = append(units, u)
			}
		}
		type change struct {
			other  int
			ra, rb float64
			src    string
		}
		var changes []change
		ok := true
		for _, u := range units {
			for _, pi := range onUnit[u] {
				p := &ds[pi]
				pj := jobOf[p.JobKey()]
				ra, rb, src := m.pairRatios(ji.j, pj.j, d.GPUType)
				if pairLoses(ra, rb) || d.PredThroughput*ra < ji.tmin || p.PredThroughput*rb < pj.tmin {
					ok = false
					break
				}
				changes = append(changes, change{pi, ra, rb, src})
			}
		}
		if !ok {
			drop[di] = true
			continue
		}
		for _, c := range changes {
			p := &ds[c.other]
			d.PredThroughput *= c.ra
			p.PredThroughput *= c.rb
			d.Shared, p.Shared = true, true
			d.Explanation += "; co-runner placed in the same round: " + coRunnerText(p.JobKey(), c.ra, c.rb, c.src)
			p.Explanation += "; co-runner placed in the same round: " + coRunnerText(d.JobKey(), c.rb, c.ra, c.src)
		}
		for _, u := range units {
			onUnit[u] = append(onUnit[u], di)
		}
	}
	if len(drop) == 0 {
		return ds
	}
	out := ds[:0]
	for i := range ds {
		if !drop[i] {
			out = append(out, ds[i])
		}
	}
	return out
}

// pairGain is what job ji and the jobs on instance ii would do together on type t: the
// least, over the holders, of the pair's summed ratios (1 = as good as running one after the
// other; below 1 the pair loses).
func (m *model) pairGain(ji, ii, t int) float64 {
	if m.share == nil {
		return 2
	}
	g := math.Inf(1)
	for _, ai := range m.share.instAllocs[ii] {
		key := [3]int{ji, ai, t}
		m.share.mu.Lock()
		v, ok := m.share.gains[key]
		m.share.mu.Unlock()
		if !ok {
			ra, rb, _ := m.pairRatios(m.jobs[ji].j, &m.share.coJobs[ai], m.types[t])
			v = ra + rb
			if pairLoses(ra, rb) {
				v = 0
			}
			m.share.mu.Lock()
			m.share.gains[key] = v
			m.share.mu.Unlock()
		}
		g = min(g, v)
	}
	if math.IsInf(g, 1) {
		return 2
	}
	return g
}

// sortByPair orders candidate instances by pair gain, best first (stable).
func (m *model) sortByPair(ji, t int, cands []int) {
	if m.share == nil || m.share.pair == nil {
		return
	}
	sort.SliceStable(cands, func(a, b int) bool { return m.pairGain(ji, cands[a], t) > m.pairGain(ji, cands[b], t) })
}

// colocUnits orders a type's shareable units for job ji by the best pair gain they offer, so
// the co-location options a job gets (NodesPerClass of them) pair it with its best partners.
func (m *model) colocUnits(ji, t int) []int {
	us := m.shareUnits[t]
	if m.share == nil || m.share.pair == nil || len(us) < 2 {
		return us
	}
	best := make(map[int]float64, len(us))
	for _, u := range us {
		b := 0.0
		for _, ii := range m.units[u].insts {
			if m.insts[ii].used > 0 && m.insts[ii].shareable {
				b = max(b, m.pairGain(ji, ii, t))
			}
		}
		best[u] = b
	}
	out := append([]int(nil), us...)
	sort.SliceStable(out, func(a, b int) bool { return best[out[a]] > best[out[b]] })
	return out
}

// pairLoses reports whether a pair is not worth forming: together the two jobs do less than
// one after the other would, or one of them cannot run at all next to the other.
func pairLoses(ra, rb float64) bool { return ra <= 0 || rb <= 0 || ra+rb < 1 }
