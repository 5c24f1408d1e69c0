package queue

import (
	"slices"
	"sort"

	"github.com/hetgpu/hetgpu/model/cluster"
	"github.com/hetgpu/hetgpu/model/constraint"
	"github.com/hetgpu/hetgpu/sidecar/sched"
)

// nodeRoom is, per device group of a ready node, the GPUs a job owed its queue's guarantee
// could get there this round: the free ones and those of borrowed preemptible jobs (the ones
// reclaim may stop). Order hands guarantee room (tier 0) only to jobs that fit it, claiming
// as it goes: a queue's 8-GPU job that fits the count of GPUs its guarantee has left but no
// node (other queues' guaranteed jobs hold part of every node) would otherwise take all of
// tier 0 while the queue's 1-GPU jobs wait behind every other queue's work, and the queue
// stays below its guarantee for hours (philly-tenants-2k on modern-mix; README, Queues).
// Room is kept per group, not per node, so that a job claims only GPUs its device request
// and constraints accept: an A100 job does not take tier 0 on a node full of free T4s.
type nodeRoom struct {
	groups []roomGroup
	// rs is the round's state (compiled constraints); nil compiles afresh.
	rs *sched.RoundState
}

// roomGroup is one device group's room: the instance IDs still unclaimed this round.
type roomGroup struct {
	node  *cluster.Node
	group *cluster.DeviceGroup
	typ   string
	ids   []string
}

func newNodeRoom(rs *sched.RoundState, snap *cluster.Snapshot, borrowed []cluster.Job) *nodeRoom {
	free := snap.Free()
	r := &nodeRoom{rs: rs}
	byNode := map[string][]int{}
	for _, fg := range free.Groups() {
		byNode[fg.Node.ID] = append(byNode[fg.Node.ID], len(r.groups))
		r.groups = append(r.groups, roomGroup{node: fg.Node, group: fg.Group, typ: fg.Type, ids: slices.Clone(fg.IDs)})
	}
	b := make(map[string]bool, len(borrowed))
	for i := range borrowed {
		b[borrowed[i].Key()] = true
	}
	// A borrowed job's GPUs are room in the group each of its instances belongs to.
	for i := range snap.Running {
		a := &snap.Running[i]
		gs, ok := byNode[a.NodeID]
		if !ok || !b[a.Key()] {
			continue
		}
		for _, id := range a.DeviceIDs {
			for _, gi := range gs {
				if slices.ContainsFunc(r.groups[gi].group.Instances, func(in cluster.Instance) bool { return in.ID == id }) {
					r.groups[gi].ids = append(r.groups[gi].ids, id)
					break
				}
			}
		}
	}
	return r
}

// usable counts the group's room cj accepts (cj nil: all of it).
func (g *roomGroup) usable(cj *constraint.Job) int {
	if cj == nil || !cj.PinsInstances() {
		return len(g.ids)
	}
	n := 0
	for _, id := range g.ids {
		if cj.InstanceAllowed(g.group, id) {
			n++
		}
	}
	return n
}

// take removes n instances cj accepts from the group's room.
func (g *roomGroup) take(cj *constraint.Job, n int) {
	g.ids = slices.DeleteFunc(g.ids, func(id string) bool {
		if n > 0 && (cj == nil || cj.InstanceAllowed(g.group, id)) {
			n--
			return true
		}
		return false
	})
}

// claim takes room for j if it fits and reports whether it did. It mirrors what the placer
// and the feasibility check require (feasible.capacityOf): a job's GPUs on a node come from
// one device group that serves its device request and meets its node and device constraints
// (constraint.Job), a job that spans nodes (at most j.MaxNodes, with j.GPUsPerNode on each
// when set) uses one GPU type on all of them. A single-node job takes the matching group
// with the least room that holds it (best fit); a multi-node job the GPU type with the least
// room that holds it, largest groups first. A job whose constraints do not compile (the
// placer rejects it) is matched by GPU count alone: the room is an upper bound, and a job it
// admits wrongly only keeps tier 0 as before this check.
func (r *nodeRoom) claim(j *cluster.Job) bool {
	pick, cj, ok := r.plan(j)
	for _, c := range pick {
		r.groups[c.gi].take(cj, c.room)
	}
	return ok
}

// fits reports whether j would fit the room, claiming nothing.
func (r *nodeRoom) fits(j *cluster.Job) bool {
	_, _, ok := r.plan(j)
	return ok
}

// roomCand is a device group (index into nodeRoom.groups) and a GPU count: a group's room
// while planning, the GPUs taken from it in a plan.
type roomCand struct{ gi, room int }

// plan chooses where j's GPUs would come from (see claim) without taking them.
func (r *nodeRoom) plan(j *cluster.Job) ([]roomCand, *constraint.Job, bool) {
	need, per, nodes := j.GPUs, j.GPUsPerNode, j.MaxNodes()
	if need <= 0 {
		return nil, nil, true
	}
	if per > 0 {
		nodes = (need + per - 1) / per
	}
	cj, err := r.rs.Compiled(j)
	if err != nil {
		cj = nil
	}
	type cand = roomCand
	var ms []cand
	for gi := range r.groups {
		g := &r.groups[gi]
		if cj != nil && (!cj.NodeFeasible(g.node) || !cj.GroupFeasible(g.group)) {
			continue
		}
		if u := g.usable(cj); u > 0 {
			ms = append(ms, cand{gi, u})
		}
	}
	if per <= 0 && nodes == 1 {
		// Best fit: the group with the least room that holds the whole job.
		best := -1
		for k, c := range ms {
			if c.room >= need && (best < 0 || c.room < ms[best].room) {
				best = k
			}
		}
		if best < 0 {
			return nil, cj, false
		}
		return []cand{{ms[best].gi, need}}, cj, true
	}
	// Per GPU type, per node, the matching group with the most room (the one a node offers).
	byType := map[string][]cand{}
	at := map[[2]string]int{} // (type, node) -> index in byType[type]
	var types []string
	for _, c := range ms {
		g := &r.groups[c.gi]
		k, ok := at[[2]string{g.typ, g.node.ID}]
		switch {
		case !ok:
			if byType[g.typ] == nil {
				types = append(types, g.typ)
			}
			at[[2]string{g.typ, g.node.ID}] = len(byType[g.typ])
			byType[g.typ] = append(byType[g.typ], c)
		case c.room > byType[g.typ][k].room:
			byType[g.typ][k] = c
		}
	}
	sort.Strings(types)
	var pick []cand
	pickRoom := 0
	for _, t := range types {
		cs := byType[t]
		sort.SliceStable(cs, func(a, b int) bool { return cs[a].room > cs[b].room })
		rooms, total := make([]int, 0, len(cs)), 0
		for _, c := range cs {
			rooms = append(rooms, c.room)
			total += c.room
		}
		if !j.FitsFree(rooms) || pick != nil && total >= pickRoom {
			continue
		}
		var take []cand
		left := need
		for _, c := range cs {
			switch {
			case len(take) == nodes || left <= 0:
			case per > 0:
				if c.room >= per {
					take = append(take, cand{c.gi, per})
					left -= per
				}
			default:
				n := min(c.room, left)
				take = append(take, cand{c.gi, n})
				left -= n
			}
		}
		pick, pickRoom = take, total
	}
	return pick, cj, pick != nil
}
