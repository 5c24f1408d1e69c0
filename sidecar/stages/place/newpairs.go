package place

import (
	"fmt"
	"sort"

	"github.com/hetgpu/hetgpu/model/cluster"
)

// New pairs on idle shared GPUs. A GPU slot group (the device plugin's sharing block) offers
// each slot as an instance, so the round can put two new jobs on an idle GPU's slots and
// admitPairs checks the pair. In co-location (MaxShare > 1, the simulator's slots) an idle GPU
// is one instance the round gives to one job, and co-location options exist only on GPUs a
// sharing job already runs on: a second sharing job that finds no GPU would wait a round even
// when it and the job just placed would both gain from sharing. pairOnIdle closes that gap
// after assignment: each sharing job the round left out (in rank order) joins a new job the
// round put alone on a previously idle shareable GPU when the pair prediction says both gain
// (ratios sum above 1) and both keep their T_min; the best pair (highest summed ratio) wins.
// Rounds with per-node job limits, namespace caps or queue caps skip it (those rows are the
// MILP's; a pair added here would bypass them).

func (m *model) pairOnIdle(ds []cluster.Decision) []cluster.Decision {
	if !m.cfg.PairIdleGPUs || m.share == nil || m.cfg.MaxShare < 2 || m.cfg.MaxJobsPerNode > 0 || len(m.caps) > 0 || len(ds) == 0 {
		return ds
	}
	jobOf := make(map[string]int, len(m.jobs))
	for i := range m.jobs {
		jobOf[m.jobs[i].j.Key()] = i
	}
	instOf := map[string]int{}
	for ii := range m.insts {
		u := m.doms[m.insts[ii].dom].unit
		instOf[m.nodes[m.units[u].node].n.ID+"\x00"+m.insts[ii].in.ID] = ii
	}
	// hosts: decisions that put one sharing job on one idle, shareable GPU (not a slot group).
	type host struct {
		d, ji, ii, u int
	}
	var hosts []host
	placed := map[int]bool{}
	for di := range ds {
		d := &ds[di]
		ji, ok := jobOf[d.JobKey()]
		if !ok {
			continue
		}
		placed[ji] = true
		j := &m.jobs[ji]
		if !j.share || j.g != 1 || d.Shared || len(d.Assign) != 1 || len(d.Assign[0].InstanceIDs) != 1 {
			continue
		}
		ii, ok := instOf[d.Assign[0].NodeID+"\x00"+d.Assign[0].InstanceIDs[0]]
		if !ok || m.insts[ii].used != 0 || !m.insts[ii].shareable || m.doms[m.insts[ii].dom].iso >= 0 {
			continue
		}
		u := m.doms[m.insts[ii].dom].unit
		if m.share.slotUnit[u] {
			continue
		}
		hosts = append(hosts, host{di, ji, ii, u})
	}
	if len(hosts) == 0 {
		return ds
	}
	var left []int
	for ji := range m.jobs {
		j := &m.jobs[ji]
		if !placed[ji] && j.share && j.g == 1 && j.err == nil && m.nsCap[j.ns] < 0 {
			left = append(left, ji)
		}
	}
	sort.SliceStable(left, func(a, b int) bool { return m.jobs[left[a]].pos < m.jobs[left[b]].pos })
	used := make([]bool, len(hosts))
	for _, ji := range left {
		j := &m.jobs[ji]
		sh := m.shapeOf(j)
		best, bestGain := -1, 1.0
		var bestRA, bestRB float64
		var bestSrc string
		for hi, h := range hosts {
			if used[hi] || !sh.admit[h.u] {
				continue
			}
			in := &m.insts[h.ii]
			if j.cj.PinsInstances() && !j.cj.InstanceAllowed(m.units[h.u].g, in.in.ID) {
				continue
			}
			hj := &m.jobs[h.ji]
			if m.cfg.TenantIsolation && hj.ns != j.ns {
				continue
			}
			t := m.units[h.u].typ
			alone := j.est[t].Throughput
			ra, rb, src := m.pairRatios(j.j, hj.j, m.types[t])
			if alone <= 0 || pairLoses(ra, rb) || ra+rb <= bestGain || alone*ra < j.tmin || ds[h.d].PredThroughput*rb < hj.tmin {
				continue
			}
			best, bestGain, bestRA, bestRB, bestSrc = hi, ra+rb, ra, rb, src
		}
		if best < 0 {
			continue
		}
		used[best] = true
		h := hosts[best]
		hd := &ds[h.d]
		t := m.units[h.u].typ
		d := cluster.Decision{Namespace: j.j.Namespace, JobID: j.j.ID, Group: j.j.Group, GPUType: m.types[t],
			PredThroughput: j.est[t].Throughput * bestRA, PredPowerW: j.est[t].PowerW, Score: j.score, Rank: j.pos + 1,
			Shared: true, Assign: []cluster.Assignment{{NodeID: hd.Assign[0].NodeID, DeviceGroup: hd.Assign[0].DeviceGroup,
				InstanceIDs: []string{hd.Assign[0].InstanceIDs[0]}}}}
		d.Explanation = fmt.Sprintf("rank %d of %d (ranker score %.3g, priority %.2f); placed 1x %s on %s, paired on an idle GPU with %s placed in the same round: %.4g/s predicted; ",
			j.pos+1, len(m.jobs), j.score, j.prio, m.types[t], hd.Assign[0].NodeID, hd.JobKey(), d.PredThroughput) +
			coRunnerText(hd.JobKey(), bestRA, bestRB, bestSrc)
		if j.tmin > 0 {
			d.Explanation += fmt.Sprintf("; meets T_min %.4g/s", j.tmin)
		}
		hd.PredThroughput *= bestRB
		hd.Shared = true
		hd.Explanation += "; co-runner paired on this idle GPU in the same round: " + coRunnerText(d.JobKey(), bestRB, bestRA, bestSrc)
		ds = append(ds, d)
	}
	return ds
}
