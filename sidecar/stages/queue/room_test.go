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
			s := queuesAB(t, tt.guaranteeB)
			snap := &cluster.Snapshot{Now: t0, Nodes: []cluster.Node{node("n1", "a100", 8), node("n2", "a100", 8)},
				Running: tt.running, Preemptible: tt.preemptible}
			snap.Pending = []cluster.Job{tt.big, pend("b", "b1", 1), pend("b", "b2", 1), pend("a", "a1", 1), pend("a", "a2", 1)}
			snap = s.Prepare(snap.Indexed())
			if got := keys(s.Order(nil, snap, ranked(snap.Pending...))); got != tt.want {
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
	h100 := func(j cluster.Job) cluster.Job { j.DeviceName = "nvidia/gpu/H100"; return j }
	for _, tt := range []struct {
		name    string
		pending []cluster.Job
		want    string
	}{
		{"only the big job waits", []cluster.Job{pend("b", "b1", 1), pend("a", "a-big", 8)}, "a-big,b1"},
		{"a 1-GPU job takes the room", []cluster.Job{pend("b", "b1", 1), pend("a", "a-big", 8), pend("a", "a1", 1)}, "a1,b1,a-big"},
		// The cluster has no H100: the last resort skips a job no node could ever hold.
		{"a job asking for a missing type is passed over", []cluster.Job{pend("b", "b1", 1), h100(pend("a", "a-h100", 2)), pend("a", "a-big", 8)}, "a-big,b1,a-h100"},
		{"only a missing type waits", []cluster.Job{pend("b", "b1", 1), h100(pend("a", "a-h100", 2))}, "b1,a-h100"},
		{"a job wider than the cluster is passed over", []cluster.Job{pend("b", "b1", 1), pend("a", "a-huge", 32), pend("a", "a-big", 8)}, "a-big,b1,a-huge"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := queuesAB(t, 8)
			// b's guaranteed jobs hold 4 GPUs of each 8-GPU node: a's 8-GPU job fits no node.
			snap := &cluster.Snapshot{Now: t0, Nodes: []cluster.Node{node("n1", "a100", 8), node("n2", "a100", 8)},
				Running: []cluster.Alloc{alloc("b", "r1", "n1", "a100", 0, 4, t0), alloc("b", "r2", "n2", "a100", 0, 4, t0)},
				Pending: tt.pending}
			snap = s.Prepare(snap.Indexed())
			if got := keys(s.Order(nil, snap, ranked(snap.Pending...))); got != tt.want {
				t.Errorf("order %s, want %s", got, tt.want)
			}
		})
	}
}

// TestOrderRoomGPUTypes: guarantee room is counted per device group and a job claims only
// groups its device request and constraints accept; a job spanning nodes stays on one GPU
// type (as the placer and feasibility check require). Queue a is owed 8 GPUs, b 2; b1 is
// ranked before a1 (which runs on any GPU), so a1 leads only when a-first leaves it the room.
func TestOrderRoomGPUTypes(t *testing.T) {
	job := func(ns, id, dev string, g int) cluster.Job {
		return cluster.Job{Namespace: ns, ID: id, Group: "g", GPUs: g, DeviceName: dev}
	}
	pre := func(ns, id string, g int) cluster.Job {
		j := job(ns, id, "nvidia/gpu", g)
		j.Hetgpu.Preemptible = true
		return j
	}
	withCons := func(j cluster.Job, c cluster.Constraint) cluster.Job {
		j.DeviceConstraints = append(j.DeviceConstraints, c)
		return j
	}
	spread := func(j cluster.Job, k int) cluster.Job { j.Hetgpu.MaxNodes = k; return j }
	perNode := func(j cluster.Job, p int) cluster.Job { j.GPUsPerNode = p; return j }
	t4x4 := []cluster.Node{node("n1", "T4", 4)}
	for _, tt := range []struct {
		name        string
		nodes       []cluster.Node
		running     []cluster.Alloc
		preemptible []cluster.Job
		first       cluster.Job
		want        string
	}{
		{"A100 job does not take T4 room", t4x4, nil, nil,
			job("a", "a-first", "nvidia/gpu/A100", 2), "a1,a-first,b1"},
		{"generic nvidia/gpu fits T4", t4x4, nil, nil,
			job("a", "a-first", "nvidia/gpu", 2), "a-first,a1,b1"},
		{"generic gpu fits T4", t4x4, nil, nil,
			job("a", "a-first", "gpu", 2), "a-first,a1,b1"},
		{"A100 job takes A100 room", []cluster.Node{node("n1", "T4", 4), node("n2", "A100", 2)}, nil, nil,
			job("a", "a-first", "nvidia/gpu/A100", 2), "a-first,a1,b1"},
		{"device constraint excludes T4", t4x4, nil, nil,
			withCons(job("a", "a-first", "nvidia/gpu", 2), cluster.Constraint{LTarget: "${device.model}", RTarget: "A100", Operand: "="}),
			"a1,a-first,b1"},
		{"pinned instances limit the room", t4x4, nil, nil,
			withCons(job("a", "a-first", "nvidia/gpu", 2), cluster.Constraint{LTarget: "${device.ids}", RTarget: "n1-0", Operand: "set_contains_any"}),
			"a1,a-first,b1"},
		{"pinned instances that are free fit", t4x4, nil, nil,
			withCons(job("a", "a-first", "nvidia/gpu", 2), cluster.Constraint{LTarget: "${device.ids}", RTarget: "n1-0,n1-3", Operand: "set_contains_any"}),
			"a-first,a1,b1"},
		{"other vendor does not match", t4x4, nil, nil,
			job("a", "a-first", "amd/gpu", 2), "a1,a-first,b1"},
		// b's guaranteed job holds 2 A100s; its borrowed job holds the other 2: the borrowed
		// GPUs are A100 room, the free T4s are not.
		{"borrowed GPUs count in their group", []cluster.Node{node("n1", "T4", 4), node("n2", "A100", 4)},
			[]cluster.Alloc{alloc("b", "rb", "n2", "A100", 0, 2, t0.Add(-time.Hour)), alloc("b", "bor", "n2", "A100", 2, 2, t0)},
			[]cluster.Job{pre("b", "bor", 2)}, job("a", "a-first", "nvidia/gpu/A100", 2), "a-first,a1,b1"},
		{"borrowed T4s are not A100 room", []cluster.Node{node("n1", "T4", 4), node("n2", "A100", 4)},
			[]cluster.Alloc{alloc("b", "rb", "n2", "A100", 0, 4, t0.Add(-time.Hour)), alloc("b", "bor", "n1", "T4", 0, 2, t0)},
			[]cluster.Job{pre("b", "bor", 2)}, job("a", "a-first", "nvidia/gpu/A100", 2), "a1,a-first,b1"},
		// 4 free GPUs on each of two nodes of different types: a job spanning two nodes
		// must stay on one type.
		{"spread job does not mix types", []cluster.Node{node("n1", "T4", 4), node("n2", "A100", 4)}, nil, nil,
			spread(job("a", "a-first", "nvidia/gpu", 8), 2), "a1,a-first,b1"},
		{"per-node job does not mix types", []cluster.Node{node("n1", "T4", 4), node("n2", "A100", 4)}, nil, nil,
			perNode(job("a", "a-first", "nvidia/gpu", 8), 4), "a1,a-first,b1"},
		{"spread job on two nodes of one type", []cluster.Node{node("n1", "T4", 4), node("n2", "A100", 4), node("n3", "A100", 4)}, nil, nil,
			spread(job("a", "a-first", "nvidia/gpu", 8), 2), "a-first,b1,a1"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := queuesAB(t, 2)
			snap := &cluster.Snapshot{Now: t0, Nodes: tt.nodes, Running: tt.running, Preemptible: tt.preemptible}
			snap.Pending = []cluster.Job{tt.first, job("b", "b1", "nvidia/gpu", 8), job("a", "a1", "nvidia/gpu", 1)}
			snap = s.Prepare(snap.Indexed())
			if got := keys(s.Order(nil, snap, ranked(snap.Pending...))); got != tt.want {
				t.Errorf("order %s, want %s", got, tt.want)
			}
		})
	}
}

// queuesAB is the room tests' two queues: a (namespace a) owed 8 GPUs, b (namespace b) owed gb.
func queuesAB(t *testing.T, gb int) *Set {
	t.Helper()
	s, err := New(Config{Queues: []Spec{
		{Name: "a", Namespaces: []string{"a"}, Guarantee: 8},
		{Name: "b", Namespaces: []string{"b"}, Guarantee: gb},
	}, HalfLife: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	return s
}
