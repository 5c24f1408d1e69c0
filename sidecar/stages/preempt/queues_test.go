package preempt

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hetgpu/hetgpu/model/cluster"
)

// TestGuaranteedJobsStopOnlyForTheirQueue: on one full node team-a's guaranteed job runs,
// with team-b's borrowed job or alone; a better-ranked waiting job of another queue takes only
// borrowed GPUs, one of team-a may take its own queue's, and a borrowed job ranked above the
// guaranteed one does not keep GPUs the guaranteed one needs; without tenancy the
// worst-ranked job stops whatever its queue.
func TestGuaranteedJobsStopOnlyForTheirQueue(t *testing.T) {
	for _, tt := range []struct {
		name     string
		waiting  string // namespace of the waiting 4-GPU job
		tenancy  bool
		borrowed bool // team-b's job runs beside team-a's (else the node has 4 GPUs)
		want     string
	}{
		{"another queue takes borrowed GPUs only", "team-c", true, true, "borrowed"},
		{"a borrowed job does not displace a guaranteed one", "team-a", true, true, "borrowed"},
		{"its own queue may take guaranteed GPUs", "team-a", true, false, "guaranteed"},
		{"another queue may not", "team-c", true, false, ""},
		{"without queues the worse-ranked job stops", "team-c", false, true, "guaranteed"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			gpus := 4
			if tt.borrowed {
				gpus = 8
			}
			snap := &cluster.Snapshot{Now: now, Nodes: []cluster.Node{node("n0", "a100", gpus)}}
			g := job("guaranteed", 4, 5*time.Hour)
			g.Namespace = "team-a"
			b := job("borrowed", 4, 5*time.Hour)
			b.Namespace = "team-b"
			running(snap, g, "n0", "a100", now.Add(-2*time.Hour))
			if tt.borrowed {
				running(snap, b, "n0", "a100", now.Add(-2*time.Hour))
			}
			w := job("waiting", 4, time.Hour)
			w.Namespace = tt.waiting
			snap.Pending = []cluster.Job{w}
			if tt.tenancy {
				snap.Tenancy = &cluster.Tenancy{Queue: map[string]string{"team-a": "a", "team-b": "b", "team-c": "c"}, DefaultQueue: "default",
					Guaranteed: map[string]bool{"team-a/guaranteed/train": true}}
			}
			// The guaranteed job is ranked last: without the guard it is the one to stop.
			got := preemptedOnA100(t, snap, "waiting", "borrowed", "guaranteed")
			if strings.Join(got, ",") != tt.want {
				t.Errorf("preempted %v, want [%s]", got, tt.want)
			}
		})
	}
}

// TestOwedQueueReclaimsYoungBorrowedJobs: a borrowed job younger than MinRun is stopped for a
// job of a queue owed its guarantee, and for nobody else; a young guaranteed job is not.
func TestOwedQueueReclaimsYoungBorrowedJobs(t *testing.T) {
	for _, tt := range []struct {
		name       string
		owed       string // the queue owed its guarantee, if any
		guaranteed bool
		want       string
	}{
		{"owed queue reclaims", "a", false, "young"},
		{"no queue owed: min_run protects", "", false, ""},
		{"another queue owed: min_run protects from this one", "c", false, ""},
		{"a guaranteed job stays", "a", true, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			snap := &cluster.Snapshot{Now: now, Nodes: []cluster.Node{node("n0", "a100", 4)}}
			y := job("young", 4, 5*time.Hour)
			y.Namespace = "team-b"
			running(snap, y, "n0", "a100", now.Add(-5*time.Minute))
			w := job("waiting", 4, time.Hour)
			w.Namespace = "team-a"
			snap.Pending = []cluster.Job{w}
			snap.Tenancy = &cluster.Tenancy{Queue: map[string]string{"team-a": "a", "team-b": "b"}, DefaultQueue: "default",
				Guaranteed: map[string]bool{}, Owed: map[string]int{}}
			if tt.owed != "" {
				snap.Tenancy.Owed[tt.owed] = 4
			}
			if tt.guaranteed {
				snap.Tenancy.Guaranteed["team-b/young/train"] = true
			}
			p, err := New(Default()) // MinRun 30m
			if err != nil {
				t.Fatal(err)
			}
			plan, err := p.Plan(context.Background(), nil, snap, rankAll(snap, "waiting", "young"), speeds{"a100": 1})
			if err != nil {
				t.Fatal(err)
			}
			if got, _ := ids(plan); strings.Join(got, ",") != tt.want {
				t.Errorf("preempted %v, want [%s]", got, tt.want)
			}
		})
	}
}

// TestOwedQueueKeepsItsOrder: team-a is owed its guarantee and its waiting job leads the
// order; its own long running job must not take that place through the long-job guard (it
// would keep its GPUs, the borrowed job too, and the owed job would wait). Without an owed
// queue the guard moves the long job first as usual, and nothing stops.
func TestOwedQueueKeepsItsOrder(t *testing.T) {
	for _, tt := range []struct {
		name string
		owed bool
		want string
	}{
		{"owed queue: the borrowed job is reclaimed", true, "borrowed"},
		{"not owed: the long job leads its queue", false, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			snap := &cluster.Snapshot{Now: now, Nodes: []cluster.Node{node("n0", "a100", 2), node("n1", "a100", 2)}}
			b := job("borrowed", 2, time.Hour)
			b.Namespace = "team-b"
			long := job("long", 2, 100*time.Hour)
			long.Namespace = "team-a"
			running(snap, b, "n0", "a100", now.Add(-2*time.Hour))
			running(snap, long, "n1", "a100", now.Add(-2*time.Hour))
			w := job("waiting", 2, time.Hour)
			w.Namespace = "team-a"
			snap.Pending = []cluster.Job{w}
			snap.Tenancy = &cluster.Tenancy{Queue: map[string]string{"team-a": "a", "team-b": "b"}, DefaultQueue: "default",
				Guaranteed: map[string]bool{"team-a/long/train": true}}
			if tt.owed {
				snap.Tenancy.Owed = map[string]int{"a": 2}
			}
			got := preemptedOnA100(t, snap, "waiting", "borrowed", "long")
			if strings.Join(got, ",") != tt.want {
				t.Errorf("preempted %v, want [%s]", got, tt.want)
			}
		})
	}
}

// preemptedOnA100 is what a planner with the default configuration (MinRun off) stops for
// snap ranked in the given order, the a100 at speed 1.
func preemptedOnA100(t *testing.T, snap *cluster.Snapshot, order ...string) []string {
	t.Helper()
	cfg := Default()
	cfg.MinRun = 0
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := p.Plan(context.Background(), nil, snap, rankAll(snap, order...), speeds{"a100": 1})
	if err != nil {
		t.Fatal(err)
	}
	got, _ := ids(plan)
	return got
}
