package sched

import (
	"sort"
	"strings"

	"github.com/hetgpu/hetgpu/model/cluster"
)

// Gangs. The waiting GPU groups of one job (a launcher and its workers, the parts of a
// pipeline-parallel run) are useless one without the other, so they form a gang: they are
// placed in one round or not at all, pinned in one register (the Nomad backend pins every
// decision of a job in one job update), and preempted together. A group annotated
// hetgpu.gang = "false" is decided on its own.

// maxGangRetries bounds the extra placement solves of a round that placed some gangs in part:
// each retry drops at least one gang, and after the last one partial gangs are dropped without
// a new solve (their GPUs then stay idle this round).
const maxGangRetries = 3

// GangKey returns the gang a job belongs to, "namespace/id", or "" when it is decided on its
// own (hetgpu.gang = "false").
func GangKey(j *cluster.Job) string {
	if j.Hetgpu.NoGang {
		return ""
	}
	return j.WholeKey()
}

// Gangs maps every gang with several waiting members ("namespace/id") to the job keys of
// those members.
type Gangs map[string]map[string]bool

// GangsOf finds the gangs among the waiting jobs; gangs of one member are left out.
func GangsOf(jobs []cluster.Job) Gangs {
	// Count first: most jobs are one group, and a map per job would be most of a round's
	// allocations on a long queue.
	n := make(map[string]int, len(jobs))
	for i := range jobs {
		if g := GangKey(&jobs[i]); g != "" {
			n[g]++
		}
	}
	gs := Gangs{}
	for i := range jobs {
		if g := GangKey(&jobs[i]); n[g] >= 2 {
			if gs[g] == nil {
				gs[g] = map[string]bool{}
			}
			gs[g][jobs[i].Key()] = true
		}
	}
	for g, m := range gs {
		if len(m) < 2 {
			delete(gs, g) // one group counted twice (the same key listed twice)
		}
	}
	return gs
}

// Of returns the gang whose waiting member the job key is, or "".
func (gs Gangs) Of(jobKey string) string {
	i := strings.LastIndexByte(jobKey, '/')
	if i < 0 {
		return ""
	}
	if g := jobKey[:i]; gs[g][jobKey] {
		return g
	}
	return ""
}

// GroupGangs returns ranked with every gang's members moved up to follow its best-ranked
// member, in their own order; everything else keeps its place. A gang then takes one slot of
// the order, so the placement sees all of it at once. ranked itself is not modified.
func GroupGangs(ranked []Ranked, gs Gangs) []Ranked {
	if len(gs) == 0 {
		return ranked
	}
	members := map[string][]Ranked{}
	for _, r := range ranked {
		if g := gs.Of(r.Job.Key()); g != "" {
			members[g] = append(members[g], r)
		}
	}
	out := make([]Ranked, 0, len(ranked))
	done := map[string]bool{}
	for _, r := range ranked {
		g := gs.Of(r.Job.Key())
		if g == "" {
			out = append(out, r)
			continue
		}
		if !done[g] {
			done[g] = true
			out = append(out, members[g]...)
		}
	}
	return out
}

// PartialGangs returns, sorted, the gangs of which ds decides some but not all of the members.
func PartialGangs(gs Gangs, ds []cluster.Decision) []string {
	if len(gs) == 0 {
		return nil
	}
	got := map[string]int{}
	for i := range ds {
		if g := gs.Of(ds[i].JobKey()); g != "" {
			got[g]++
		}
	}
	var out []string
	for g, n := range got {
		if n < len(gs[g]) {
			out = append(out, g)
		}
	}
	sort.Strings(out)
	return out
}

// dropGangDecisions removes the decisions of the given gangs' members.
func dropGangDecisions(ds []cluster.Decision, gs Gangs, drop map[string]bool) []cluster.Decision {
	out := ds[:0:0]
	for _, d := range ds {
		if !drop[gs.Of(d.JobKey())] {
			out = append(out, d)
		}
	}
	return out
}

// withoutGangs removes the members of the given gangs from ranked.
func withoutGangs(ranked []Ranked, gs Gangs, drop map[string]bool) []Ranked {
	out := make([]Ranked, 0, len(ranked))
	for _, r := range ranked {
		if !drop[gs.Of(r.Job.Key())] {
			out = append(out, r)
		}
	}
	return out
}

// PartialGangPins counts the gangs of which pins applied some but not all of the members.
// The pipeline never decides a gang in part, and the Nomad backend pins a job's decisions in
// one register, so this is 0 unless a backend applies part of a job's decisions; it is
// counted so that this is seen, not assumed.
func PartialGangPins(gs Gangs, pins []cluster.PinResult) int {
	if len(gs) == 0 {
		return 0
	}
	applied := map[string]int{}
	for _, p := range pins {
		if g := gs.Of(p.JobKey); g != "" && p.Applied {
			applied[g]++
		}
	}
	n := 0
	for g, a := range applied {
		if a < len(gs[g]) {
			n++
		}
	}
	return n
}

// GangPreemptions makes a preemption list take whole gangs: when one running member of a gang
// is to stop, so are the others listed preemptible; when another member of the job runs but
// may not be stopped (not preemptible, or its allocations are not listed as such), none of the
// gang stops. Running groups of the job whose annotations the snapshot does not carry are
// taken to be members, which errs on the side of not stopping. The order of ps is kept and
// added members follow their gang's first preemption.
func GangPreemptions(snap *cluster.Snapshot, ps []cluster.Preemption) []cluster.Preemption {
	if len(ps) == 0 {
		return ps
	}
	// Preemptible gang members, and groups out of the gang, by job.
	members := map[string][]*cluster.Job{}
	solo := map[string]bool{}
	for i := range snap.Preemptible {
		j := &snap.Preemptible[i]
		if g := GangKey(j); g != "" {
			members[g] = append(members[g], j)
		} else {
			solo[j.Key()] = true
		}
	}
	preemptible := map[string]bool{}
	for i := range snap.Preemptible {
		preemptible[snap.Preemptible[i].Key()] = true
	}
	// A job with a running group that may not be stopped cannot lose its gang.
	pinned := map[string]bool{}
	for _, a := range snap.Running {
		k := a.Key()
		if !preemptible[k] && !solo[k] {
			pinned[a.WholeKey()] = true
		}
	}
	out := make([]cluster.Preemption, 0, len(ps))
	seen := map[string]bool{}
	for _, p := range ps {
		k := p.JobKey()
		if seen[k] {
			continue
		}
		g := cluster.JobKey(p.Namespace, p.JobID)
		if solo[k] || (len(members[g]) < 2 && !pinned[g]) {
			seen[k] = true
			out = append(out, p)
			continue
		}
		if pinned[g] {
			continue // some of the gang must keep running: none of it stops
		}
		for _, m := range members[g] {
			if seen[m.Key()] {
				continue
			}
			seen[m.Key()] = true
			q := p
			q.Group = m.Group
			if m.Group != p.Group {
				q.Reason = p.Reason + " (with its gang's group " + p.Group + ")"
			}
			out = append(out, q)
		}
	}
	return out
}
