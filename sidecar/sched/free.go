package sched

import "github.com/hetgpu/hetgpu/model/cluster"

// FreeGroup is one device group of a ready node with its free healthy instances.
type FreeGroup struct {
	Node  *cluster.Node
	Group *cluster.DeviceGroup
	// IDs are the instances no running allocation holds, in the group's order.
	IDs []string
}

// FreeGroups lists every device group of the snapshot's ready nodes, in snapshot order, with
// its free healthy instances (the scan first-fit placement and reservations share).
func FreeGroups(snap *cluster.Snapshot) []FreeGroup {
	busy := map[string]bool{}
	for _, a := range snap.Running {
		for _, id := range a.DeviceIDs {
			busy[id] = true
		}
	}
	out := make([]FreeGroup, 0, len(snap.Nodes))
	for i := range snap.Nodes {
		n := &snap.Nodes[i]
		if !n.Ready() {
			continue
		}
		for k := range n.Devices {
			g := &n.Devices[k]
			fg := FreeGroup{Node: n, Group: g}
			for _, in := range g.Instances {
				if in.Healthy && !busy[in.ID] {
					fg.IDs = append(fg.IDs, in.ID)
				}
			}
			out = append(out, fg)
		}
	}
	return out
}

// FreeGPUs counts the free healthy GPUs of ready nodes.
func FreeGPUs(snap *cluster.Snapshot) int {
	n := 0
	for _, g := range FreeGroups(snap) {
		n += len(g.IDs)
	}
	return n
}
