package queue

import (
	"time"

	"github.com/hetgpu/hetgpu/model/cluster"
	"github.com/hetgpu/hetgpu/sidecar/sched"
)

// RetryBelow is how soon the queue stage asks for another round (sched.Waker) when a round
// leaves a queue below its guarantee with waiting work the guarantee admits. The live sidecar
// reconciles every few seconds anyway; the simulator runs rounds only at arrivals, completions
// and when a stage asks, so without this a queue that one round could not serve (its GPUs
// still held by jobs younger than min_run, say) stayed below until the next arrival or
// completion: up to 8.8 h at a time on philly-tenants-500 (gavel-108, auto; README, Queues).
const RetryBelow = 5 * time.Minute

var _ sched.Waker = (*Set)(nil)

// NextRound implements sched.Waker: RetryBelow after snap.Now while some leaf queue holds fewer
// GPUs than its guarantee and has a waiting job that fits what the guarantee has left (the
// definition the simulator measures), else never. snap is the round's snapshot after its pins
// (sched.AfterPins): pinned jobs wait no longer but their GPUs are not counted yet, so a round
// that served a queue with some of its jobs still waiting may ask for one round too many.
func (s *Set) NextRound(snap *cluster.Snapshot) time.Time {
	r := s.measure(snap)
	for _, q := range s.names {
		if !s.leaf(q) {
			continue
		}
		if g := guarantee(s.specs[q]); r.used[q] < g && Admitted(r.pending[q], r.used[q], g) > 0 {
			return snap.Now.Add(RetryBelow)
		}
	}
	return time.Time{}
}
