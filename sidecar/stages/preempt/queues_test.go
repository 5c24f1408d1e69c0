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

// TestGuaranteedJobsMoveToMakeRoom: two 4-GPU nodes; team-a's guaranteed 1-GPU job "g" runs on
// n0, team-b's 1-GPU job "h" (not preemptible) on n1, and a 4-GPU job of team-c waits: it fits on
// neither node unless one guaranteed job moves. A guaranteed job moves when it fits on the other
// node beside what stays there (then it is stopped with a "moving" reason, waits in the plan's
// order and the waiting job takes its node), never when it has no room elsewhere, is one group
// of a multi-group gang, belongs to a queue below its guarantee, or started within MinRun.
func TestGuaranteedJobsMoveToMakeRoom(t *testing.T) {
	for _, tt := range []struct {
		name string
		// n1GPUs held on n1 by team-b's guaranteed jobs ("h" and, beyond 1, "h2").
		n1GPUs int
		gang   bool // "g" has a second group running
		owedA  bool
		young  bool
		want   string // preempted
	}{
		{"moves when it fits elsewhere", 1, false, false, false, "g"},
		{"no room elsewhere", 4, false, false, false, ""},
		{"a gang's group stays", 1, true, false, false, ""},
		{"a queue below its guarantee keeps its jobs", 1, false, true, false, ""},
		{"min_run protects", 1, false, false, true, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			snap := &cluster.Snapshot{Now: now, Nodes: []cluster.Node{node("n0", "a100", 4), node("n1", "a100", 4)}}
			started := now.Add(-2 * time.Hour)
			if tt.young {
				started = now.Add(-5 * time.Minute)
			}
			g := job("g", 1, 50*time.Hour)
			g.Namespace = "team-a"
			running(snap, g, "n0", "a100", started)
			guaranteed := map[string]bool{"team-a/g/train": true, "team-b/h/train": true}
			h := job("h", 1, 50*time.Hour)
			h.Namespace = "team-b"
			h.Hetgpu.Preemptible = false // it stays: only "g" can move
			running(snap, h, "n1", "a100", now.Add(-2*time.Hour))
			if tt.n1GPUs > 1 {
				h2 := job("h2", tt.n1GPUs-1, 50*time.Hour)
				h2.Namespace = "team-b"
				running(snap, h2, "n1", "a100", now.Add(-2*time.Hour))
				guaranteed["team-b/h2/train"] = true
			}
			if tt.gang {
				// The gang's other group runs on a node of its own, not preemptible.
				snap.Nodes = append(snap.Nodes, node("n2", "a100", 1))
				snap.Running = append(snap.Running, cluster.Alloc{ID: "g-launcher-0", Namespace: "team-a", JobID: "g", Group: "launcher",
					NodeID: "n2", DeviceIDs: []string{"n2-0"}, GPUType: "a100", StartTime: started})
			}
			w := job("w", 4, time.Hour)
			w.Namespace = "team-c"
			snap.Pending = []cluster.Job{w}
			snap.Tenancy = &cluster.Tenancy{Queue: map[string]string{"team-a": "a", "team-b": "b", "team-c": "c"}, DefaultQueue: "default",
				Guaranteed: guaranteed, Owed: map[string]int{}}
			if tt.owedA {
				snap.Tenancy.Owed["a"] = 1
			}
			p, err := New(Default())
			if err != nil {
				t.Fatal(err)
			}
			plan, err := p.Plan(context.Background(), nil, snap, rankAll(snap, "w", "g", "h", "h2"), speeds{"a100": 1})
			if err != nil {
				t.Fatal(err)
			}
			got, order := ids(plan)
			if strings.Join(got, ",") != tt.want {
				t.Fatalf("preempted %v, want [%s]", got, tt.want)
			}
			if tt.want == "" {
				return
			}
			if r := plan.Preempt[0].Reason; !strings.Contains(r, "moving within its queue's guarantee to n1") {
				t.Errorf("reason %q, want a move to n1", r)
			}
			if strings.Join(order, ",") != "w,g" {
				t.Errorf("order %v, want [w g]: the waiting job, then the moved one", order)
			}
		})
	}
}

// TestSpreadJobRelocation: an 8-GPU job that may spread over two nodes finds at most 6 GPUs on
// any two of three 4-GPU nodes, because guaranteed 1-GPU jobs of two other queues sit on n0
// and n1; both move to n2 (2 GPUs left there beside a job that stays), and it takes n0 and n1.
func TestSpreadJobRelocation(t *testing.T) {
	snap := &cluster.Snapshot{Now: now, Nodes: []cluster.Node{node("n0", "a100", 4), node("n1", "a100", 4), node("n2", "a100", 4)}}
	for _, x := range []struct{ id, ns, node string }{{"g", "team-a", "n0"}, {"g2", "team-b", "n1"}} {
		j := job(x.id, 1, 50*time.Hour)
		j.Namespace = x.ns
		running(snap, j, x.node, "a100", now.Add(-2*time.Hour))
	}
	h := job("h", 2, 50*time.Hour)
	h.Namespace = "team-b"
	h.Hetgpu.Preemptible = false
	running(snap, h, "n2", "a100", now.Add(-2*time.Hour))
	w := job("w", 8, time.Hour)
	w.Namespace = "team-c"
	w.Hetgpu.MaxNodes = 2
	snap.Pending = []cluster.Job{w}
	snap.Tenancy = &cluster.Tenancy{Queue: map[string]string{"team-a": "a", "team-b": "b", "team-c": "c"}, DefaultQueue: "default",
		Guaranteed: map[string]bool{"team-a/g/train": true, "team-b/g2/train": true}, Owed: map[string]int{}}
	p, err := New(Default())
	if err != nil {
		t.Fatal(err)
	}
	plan, err := p.Plan(context.Background(), nil, snap, rankAll(snap, "w", "g", "g2"), speeds{"a100": 1})
	if err != nil {
		t.Fatal(err)
	}
	got, order := ids(plan)
	if strings.Join(got, ",") != "g,g2" || strings.Join(order, ",") != "w,g,g2" {
		t.Errorf("preempted %v, order %v; want [g g2] and [w g g2]", got, order)
	}
	for _, x := range plan.Preempt {
		if !strings.Contains(x.Reason, "to n2 to make room for team-c/w") {
			t.Errorf("%s: reason %q, want a move to n2 for team-c/w", x.JobID, x.Reason)
		}
	}
}
