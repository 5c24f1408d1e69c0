package queue

import (
	"sort"

	"github.com/hetgpu/hetgpu/model/cluster"
)

// nodeRoom is, per ready node, the GPUs a job owed its queue's guarantee could get there this
// round: the free ones and those of borrowed preemptible jobs (the ones reclaim may stop).
// Order hands guarantee room (tier 0) only to jobs that fit it, claiming as it goes: a queue's
// 8-GPU job that fits the count of GPUs its guarantee has left but no node (other queues'
// guaranteed jobs hold part of every node) would otherwise take all of tier 0 while the
// queue's 1-GPU jobs wait behind every other queue's work, and the queue stays below its
// guarantee for hours (philly-tenants-2k on modern-mix; README, Queues).
type nodeRoom struct {
	gpus []int // descending after sort
}

func newNodeRoom(snap *cluster.Snapshot, borrowed []cluster.Job) *nodeRoom {
	free := snap.Free()
	idx := map[string]int{}
	var gpus []int
	for i := range snap.Nodes {
		n := &snap.Nodes[i]
		if !n.Ready() {
			continue
		}
		idx[n.ID] = len(gpus)
		gpus = append(gpus, free.NodeGPUs(n.ID))
	}
	b := make(map[string]bool, len(borrowed))
	for i := range borrowed {
		b[borrowed[i].Key()] = true
	}
	for i := range snap.Running {
		a := &snap.Running[i]
		if i, ok := idx[a.NodeID]; ok && b[a.Key()] {
			gpus[i] += len(a.DeviceIDs)
		}
	}
	return &nodeRoom{gpus: gpus}
}

// claim takes room for j if it fits (best fit per node, on at most j.MaxNodes() nodes, with
// j.GPUsPerNode on each when set) and reports whether it did. GPU types and constraints are
// not looked at: the room is an upper bound, and a job it admits wrongly only keeps tier 0 as
// before this check.
func (r *nodeRoom) claim(j *cluster.Job) bool {
	need, per, nodes := j.GPUs, j.GPUsPerNode, j.MaxNodes()
	if need <= 0 {
		return true
	}
	if per > 0 {
		nodes = (need + per - 1) / per
	}
	sort.Sort(sort.Reverse(sort.IntSlice(r.gpus)))
	if per <= 0 && nodes == 1 {
		// Best fit: the node with the least room that holds the whole job.
		best := -1
		for i, g := range r.gpus {
			if g >= need {
				best = i
			}
		}
		if best < 0 {
			return false
		}
		r.gpus[best] -= need
		return true
	}
	var take []int
	left := need
	for i, g := range r.gpus {
		if len(take) == nodes || left <= 0 {
			break
		}
		if per > 0 {
			if g >= per {
				take = append(take, i)
				left -= per
			}
			continue
		}
		if g > 0 {
			take = append(take, i)
			left -= g
		}
	}
	if left > 0 {
		return false
	}
	left = need
	for _, i := range take {
		n := min(r.gpus[i], left)
		if per > 0 {
			n = per
		}
		r.gpus[i] -= n
		left -= n
	}
	return true
}
