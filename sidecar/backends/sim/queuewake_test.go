package sim_test

import (
	"testing"
	"time"

	"github.com/hetgpu/hetgpu/model/cluster"
	"github.com/hetgpu/hetgpu/model/trace"
	"github.com/hetgpu/hetgpu/sidecar/backends/sim"
	"github.com/hetgpu/hetgpu/sidecar/sched"
	"github.com/hetgpu/hetgpu/sidecar/stages/place"
)

// wakeQueues is a queue stage that changes nothing and asks for one round 500 s after the
// first (sched.Waker), as queue.Set does while a queue is left below its guarantee.
type wakeQueues struct{ t0 time.Time }

func (q *wakeQueues) Prepare(snap *cluster.Snapshot) *cluster.Snapshot { return snap }
func (q *wakeQueues) Order(_ *sched.RoundState, _ *cluster.Snapshot, r []sched.Ranked) []sched.Ranked {
	return r
}

func (q *wakeQueues) NextRound(snap *cluster.Snapshot) time.Time {
	if q.t0.IsZero() {
		q.t0 = snap.Now
	}
	if snap.Now.Before(q.t0.Add(500 * time.Second)) {
		return q.t0.Add(500 * time.Second)
	}
	return time.Time{}
}

// TestQueueStageWakes: the simulator runs the round the queue stage asks for (at 500 s), not
// only those at arrivals and completions (0 and 1000 s).
func TestQueueStageWakes(t *testing.T) {
	jt := "ResNet-50 (batch size 32)"
	thr, _ := table(t).Measured(jt, "v100", 1)
	tr := &trace.Trace{Name: "w", Jobs: []trace.Job{{ID: "x", JobType: jt, Model: "ResNet-50", BatchSize: 32, GPUs: 1, TotalSteps: 1000 * thr}}}
	var at []float64
	p := &sim.PipelinePolicy{PolicyName: "wake", Estimates: sim.Estimates{Off: true},
		Stages: sched.Stages{Ranker: place.FIFO{}, Placer: place.FirstFit{}, Queues: &wakeQueues{}, Predictor: sim.TablePredictor{Table: table(t)}}}
	var first time.Time
	p.OnRound = func(r *sched.Round) {
		if first.IsZero() {
			first = r.Snapshot.Now
		}
		at = append(at, r.Snapshot.Now.Sub(first).Seconds())
	}
	run(t, oneClass(t, "Tesla V100-SXM2-16GB", 1, 1), tr, p)
	woke := false
	for _, s := range at {
		if s == 500 {
			woke = true
		}
	}
	if !woke {
		t.Fatalf("rounds at %v s, want one at 500 s (asked for by the queue stage)", at)
	}
}
