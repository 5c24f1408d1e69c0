package baselines

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/hetgpu/hetgpu/model/cluster"
	"github.com/hetgpu/hetgpu/sidecar/sched"
)

func qjob(id string, gpus int, submitS, attained float64, est time.Duration) cluster.Job {
	return cluster.Job{Namespace: "default", ID: id, Group: "g", GPUs: gpus, DeviceName: "nvidia/gpu",
		SubmitTime: t0.Add(time.Duration(submitS * float64(time.Second))), AttainedGPUSeconds: attained,
		Hetgpu: cluster.Annotations{EstRuntime: est}}
}

func ids(rs []sched.Ranked) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.Job.ID)
	}
	return out
}

func TestSJF(t *testing.T) {
	snap := &cluster.Snapshot{Pending: []cluster.Job{qjob("none", 1, 0, 0, 0), qjob("long", 1, 1, 0, time.Hour),
		qjob("short", 1, 2, 0, time.Minute), qjob("short2", 1, 3, 0, time.Minute)}}
	r, err := SJF{}.Rank(context.Background(), snap, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := ids(r), []string{"short", "short2", "long", "none"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("order %v, want %v", got, want)
	}
}

func TestLAS(t *testing.T) {
	now := t0.Add(100 * time.Hour)
	cases := []struct {
		name    string
		nodes   int // 4-GPU nodes
		pending []cluster.Job
		running []cluster.Job // preemptible, each with a running allocation
		order   []string
		preempt []string
	}{
		{name: "queues by attained service, FIFO within", nodes: 4,
			// Submitted an hour ago: too recently for a promotion.
			pending: []cluster.Job{qjob("q1-old", 1, 99*3600, 2*3600, 0), qjob("q0-late", 1, 99*3600+50, 0, 0),
				qjob("q2", 1, 99*3600, 20*3600, 0), qjob("q0-early", 1, 99*3600+10, 0, 0)},
			order: []string{"q0-early", "q0-late", "q1-old", "q2"}},
		{name: "what fits in the cluster goes first", nodes: 1,
			pending: []cluster.Job{qjob("big", 8, 0, 0, 0), qjob("small", 2, 1, 0, 0), qjob("next", 2, 2, 3600, 0), qjob("over", 1, 3, 3600, 0)},
			order:   []string{"small", "next", "big", "over"}},
		{name: "starving job is promoted", nodes: 4,
			// ran 1 h (2 GPU-h on 2 GPUs), submitted 99 h ago, never stopped: waited > 8 x 1 h.
			pending: []cluster.Job{qjob("fresh", 1, 99*3600, 0, 0), qjob("starved", 2, 3600, 7200, 0)},
			order:   []string{"starved", "fresh"}},
		{name: "demoted runner is preempted for a newcomer", nodes: 1,
			pending: []cluster.Job{qjob("new", 4, 99*3600, 0, 0)},
			running: []cluster.Job{qjob("old", 4, 0, 4*3600, 0)},
			order:   []string{"new", "old"}, preempt: []string{"old"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			snap := &cluster.Snapshot{Now: now, Pending: c.pending, Preemptible: c.running}
			for i := 0; i < c.nodes; i++ {
				snap.Nodes = append(snap.Nodes, gpuNode(string(rune('m'+i)), "Tesla V100-SXM2-16GB", "v100", 4, "ready"))
			}
			gpu := 0 // the runners hold node m's GPUs, m-0 up
			for _, j := range c.running {
				a := cluster.Alloc{ID: j.ID, Namespace: j.Namespace, JobID: j.ID, Group: j.Group, NodeID: "m"}
				for k := 0; k < j.GPUs; k++ {
					a.DeviceIDs = append(a.DeviceIDs, fmt.Sprintf("m-%d", gpu))
					gpu++
				}
				snap.Running = append(snap.Running, a)
			}
			// The pipeline ranks waiting and preemptible jobs together before it plans.
			active := *snap
			active.Pending = append(append([]cluster.Job(nil), c.pending...), c.running...)
			las := NewLAS()
			r, err := las.Rank(context.Background(), &active, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := ids(r); !reflect.DeepEqual(got, c.order) {
				t.Fatalf("order %v, want %v", got, c.order)
			}
			plan, err := las.Plan(context.Background(), nil, snap, r, nil)
			if err != nil {
				t.Fatal(err)
			}
			var pre []string
			for _, p := range plan.Preempt {
				pre = append(pre, p.JobID)
			}
			if !reflect.DeepEqual(pre, c.preempt) {
				t.Fatalf("preempts %v, want %v", pre, c.preempt)
			}
		})
	}
}

// LAS asks for a round when a runner crosses its next threshold and when a waiting job would
// be promoted, and for none when nobody waits.
func TestLASNextRound(t *testing.T) {
	las := NewLAS()
	now := t0.Add(10 * time.Hour)
	snap := &cluster.Snapshot{Now: now,
		Preemptible: []cluster.Job{qjob("runner", 2, 0, 3000, 0)},      // 600 GPU-s to 1 GPU-h: 300 s on 2 GPUs
		Pending:     []cluster.Job{qjob("waiter", 1, 9.5*3600, 60, 0)}} // ran 60 s: promoted 480 s after submission
	got := las.NextRound(snap)
	if want := now.Add(5 * time.Minute); got.Before(want) || got.After(want.Add(time.Microsecond)) {
		t.Fatalf("next round at %v, want just after %v", got, want)
	}
	snap.Preemptible = nil
	if want := t0.Add(9*time.Hour + 30*time.Minute + 480*time.Second); true {
		// The waiter was promoted before now: no future promotion, no runner: no round.
		if got := las.NextRound(snap); !got.IsZero() {
			t.Fatalf("next round at %v with the promotion (%v) past and nothing running; want none", got, want)
		}
	}
	snap.Pending = nil
	snap.Preemptible = []cluster.Job{qjob("runner", 2, 0, 3000, 0)}
	if got := las.NextRound(snap); !got.IsZero() {
		t.Fatalf("next round at %v with nobody waiting; want none", got)
	}
}
