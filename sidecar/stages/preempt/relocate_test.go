package preempt

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hetgpu/hetgpu/model/cluster"
)

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
