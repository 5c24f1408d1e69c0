package sched

import "github.com/hetgpu/hetgpu/model/cluster"

// Queues is the optional queue stage (sidecar/queue): queues of namespaces with guarantees,
// maxima and usage-based fair share.
type Queues interface {
	// Prepare accounts the snapshot's usage and returns the snapshot the round works on: with
	// the round's caps (cluster.Snapshot.Caps, which the placer honours) and only the running
	// jobs that may be reclaimed listed as preemptible.
	Prepare(snap *cluster.Snapshot) *cluster.Snapshot
	// Order adjusts the ranker's order for fair share and guarantees; it runs on the order of
	// any ranker, before gangs are grouped.
	Order(snap *cluster.Snapshot, ranked []Ranked) []Ranked
}
