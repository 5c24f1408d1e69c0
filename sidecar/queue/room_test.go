package queue

import (
	"testing"
	"time"

	"github.com/hetgpu/hetgpu/model/cluster"
)

// TestOrderRoomFitsNodes: a queue's guarantee room (tier 0) goes only to jobs that fit a node's
// free and borrowed GPUs. Queue a is owed 8 GPUs, but b's guaranteed jobs hold 4 GPUs of each
// 8-GPU node: a's 8-GPU job fits the count but no node, and used to take all of tier 0 while
// a's 1-GPU jobs waited behind b's (the starvation on philly-tenants-2k, modern-mix).
func TestOrderRoomFitsNodes(t *testing.T) {
	pend := func(ns, id string, g int) cluster.Job { return cluster.Job{Namespace: ns, ID: id, Group: "g", GPUs: g} }
	pre := func(ns, id string, g int) cluster.Job {
		return cluster.Job{Namespace: ns, ID: id, Group: "g", GPUs: g, Hetgpu: cluster.Annotations{Preemptible: true}}
	}
	perNode := pend("a", "a-big", 8)
	perNode.GPUsPerNode = 4
	spread := pend("a", "a-big", 8)
	spread.Hetgpu.MaxNodes = 2
	for _, tt := range []struct {
		name        string
		guaranteeB  int
		running     []cluster.Alloc
		preemptible []cluster.Job
		big         cluster.Job
		want        string
	}{
		{"fits no node: the 1-GPU jobs take the room", 8,
			[]cluster.Alloc{alloc("b", "r1", "n1", "a100", 0, 4, t0), alloc("b", "r2", "n2", "a100", 0, 4, t0)},
			nil, pend("a", "a-big", 8), "a1,a2,a-big,b1,b2"},
		{"borrowed GPUs are room", 4,
			[]cluster.Alloc{alloc("b", "r1", "n1", "a100", 0, 4, t0.Add(-time.Hour)), alloc("b", "bor", "n2", "a100", 0, 4, t0)},
			[]cluster.Job{pre("b", "bor", 4)}, pend("a", "a-big", 8), "a-big,b1,b2,a1,a2"},
		{"not borrowed preemptible GPUs are not room", 8,
			[]cluster.Alloc{alloc("b", "r1", "n1", "a100", 0, 4, t0.Add(-time.Hour)), alloc("b", "bor", "n2", "a100", 0, 4, t0)},
			[]cluster.Job{pre("b", "bor", 4)}, pend("a", "a-big", 8), "a1,a2,a-big,b1,b2"},
		{"4 GPUs on each of 2 nodes fit", 8,
			[]cluster.Alloc{alloc("b", "r1", "n1", "a100", 0, 4, t0), alloc("b", "r2", "n2", "a100", 0, 4, t0)},
			nil, perNode, "a-big,b1,b2,a1,a2"},
		{"spread over 2 nodes fits", 8,
			[]cluster.Alloc{alloc("b", "r1", "n1", "a100", 0, 4, t0), alloc("b", "r2", "n2", "a100", 0, 4, t0)},
			nil, spread, "a-big,b1,b2,a1,a2"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s, err := New(Config{Queues: []Spec{
				{Name: "a", Namespaces: []string{"a"}, Guarantee: 8},
				{Name: "b", Namespaces: []string{"b"}, Guarantee: tt.guaranteeB},
			}, HalfLife: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			snap := &cluster.Snapshot{Now: t0, Nodes: []cluster.Node{node("n1", "a100", 8), node("n2", "a100", 8)},
				Running: tt.running, Preemptible: tt.preemptible}
			snap.Pending = []cluster.Job{tt.big, pend("b", "b1", 1), pend("b", "b2", 1), pend("a", "a1", 1), pend("a", "a2", 1)}
			snap = s.Prepare(snap.Indexed())
			if got := keys(s.Order(snap, ranked(snap.Pending...))); got != tt.want {
				t.Errorf("order %s, want %s", got, tt.want)
			}
		})
	}
}

// TestOrderLastResort: when none of a queue's admitted jobs fits a node's room, its first one
// leads the order all the same (relocation may make room for it); when one of them fits, that
// one takes the room and the big job keeps its place.
func TestOrderLastResort(t *testing.T) {
	pend := func(ns, id string, g int) cluster.Job { return cluster.Job{Namespace: ns, ID: id, Group: "g", GPUs: g} }
	for _, tt := range []struct {
		name    string
		pending []cluster.Job
		want    string
	}{
		{"only the big job waits", []cluster.Job{pend("b", "b1", 1), pend("a", "a-big", 8)}, "a-big,b1"},
		{"a 1-GPU job takes the room", []cluster.Job{pend("b", "b1", 1), pend("a", "a-big", 8), pend("a", "a1", 1)}, "a1,b1,a-big"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s, err := New(Config{Queues: []Spec{
				{Name: "a", Namespaces: []string{"a"}, Guarantee: 8},
				{Name: "b", Namespaces: []string{"b"}, Guarantee: 8},
			}, HalfLife: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			// b's guaranteed jobs hold 4 GPUs of each 8-GPU node: a's 8-GPU job fits no node.
			snap := &cluster.Snapshot{Now: t0, Nodes: []cluster.Node{node("n1", "a100", 8), node("n2", "a100", 8)},
				Running: []cluster.Alloc{alloc("b", "r1", "n1", "a100", 0, 4, t0), alloc("b", "r2", "n2", "a100", 0, 4, t0)},
				Pending: tt.pending}
			snap = s.Prepare(snap.Indexed())
			if got := keys(s.Order(snap, ranked(snap.Pending...))); got != tt.want {
				t.Errorf("order %s, want %s", got, tt.want)
			}
		})
	}
}
