package sched

import "github.com/hetgpu/hetgpu/model/cluster"

// withRelocated marks on snap's tenancy (a copy) the applied preemptions that relocate a job
// within its queue's guarantee, so that the queue stage's next Prepare places them first.
func withRelocated(snap *cluster.Snapshot, plan []cluster.Preemption, res []cluster.PinResult) *cluster.Snapshot {
	if snap.Tenancy == nil {
		return snap
	}
	applied := appliedKeys(res)
	var moved map[string]bool
	for i := range plan {
		if k := plan[i].JobKey(); plan[i].Relocated && applied[k] {
			if moved == nil {
				moved = map[string]bool{}
			}
			moved[k] = true
		}
	}
	if moved == nil {
		return snap
	}
	out := *snap
	t := *snap.Tenancy
	t.Relocated = moved
	out.Tenancy = &t
	return &out
}

// Queues is the optional queue stage (sidecar/stages/queue): queues of namespaces with guarantees,
// maxima and usage-based fair share.
type Queues interface {
	// Prepare accounts the snapshot's usage and returns the snapshot the round works on: with
	// the round's caps (cluster.Snapshot.Caps, which the placer honours) and only the running
	// jobs that may be reclaimed listed as preemptible.
	Prepare(snap *cluster.Snapshot) *cluster.Snapshot
	// Order adjusts the ranker's order for fair share and guarantees; it runs on the order of
	// any ranker, before gangs are grouped. st is the round's state (compiled constraints).
	Order(st *RoundState, snap *cluster.Snapshot, ranked []Ranked) []Ranked
}
