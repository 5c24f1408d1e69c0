package queue

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/hetgpu/hetgpu/model/cluster"
	"github.com/hetgpu/hetgpu/sidecar/sched"
)

func TestValidate(t *testing.T) {
	for _, tt := range []struct {
		name    string
		queues  []Spec
		wantErr string
		warn    bool
	}{
		{"ok", []Spec{{Name: "research", Guarantee: 16, Max: 64}, {Name: "team-a", Namespaces: []string{"team-a"}, Weight: 2, Guarantee: 8, GuaranteeByType: map[string]int{"a100": 4}, Max: 32, Parent: "research"}}, "", false},
		{"unknown parent", []Spec{{Name: "team-a", Parent: "nope"}}, `queue "team-a": parent = nope, expected the name of a queue`, false},
		{"namespace in two queues", []Spec{{Name: "a", Namespaces: []string{"x"}}, {Name: "b", Namespaces: []string{"x"}}}, `queue "b": namespaces = "x", expected a namespace of no other queue (queue "a" lists it)`, false},
		{"children above parent", []Spec{{Name: "p", Guarantee: 8}, {Name: "a", Parent: "p", Guarantee: 6}, {Name: "b", Parent: "p", Guarantee: 6}}, `queue "p": guarantee = 8, expected at least its children's guarantees together (12 GPUs)`, false},
		{"max below guarantee", []Spec{{Name: "a", Guarantee: 8, Max: 4}}, `queue "a": max = 4, expected at least the guarantee (8 GPUs)`, false},
		{"max below typed guarantee", []Spec{{Name: "a", GuaranteeByType: map[string]int{"a100": 6}, Max: 4}}, `max = 4, expected at least the guarantee (6 GPUs)`, false},
		{"negative weight", []Spec{{Name: "a", Weight: -1}}, `queue "a": weight = -1, expected a number > 0`, false},
		{"two levels", []Spec{{Name: "a"}, {Name: "b", Parent: "a"}, {Name: "c", Parent: "b"}}, `queue "c": parent = b, expected a top-level queue`, false},
		{"duplicate", []Spec{{Name: "a"}, {Name: "a"}}, `queue "a": defined twice`, false},
		{"namespaces on a parent", []Spec{{Name: "p", Namespaces: []string{"x"}}, {Name: "a", Parent: "p"}}, `queue "p": namespaces = [x], expected none on a parent queue`, false},
		{"guarantees above the cluster", []Spec{{Name: "a", Guarantee: 40}, {Name: "b", Guarantee: 40}}, "", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := Config{Queues: tt.queues}
			c.Defaults()
			warns, err := c.Validate(64)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("unexpected error %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("error %v, want it to contain %q", err, tt.wantErr)
			}
			if (len(warns) > 0) != tt.warn {
				t.Errorf("warnings %v, want some: %v", warns, tt.warn)
			}
		})
	}
}

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// node is one ready node with n GPUs of a type.
func node(id, typ string, n int) cluster.Node {
	g := cluster.DeviceGroup{Vendor: "nvidia", Type: "gpu", Name: typ, GPUType: typ}
	for i := 0; i < n; i++ {
		g.Instances = append(g.Instances, cluster.Instance{ID: fmt.Sprintf("%s-%d", id, i), Healthy: true})
	}
	return cluster.Node{ID: id, Status: "ready", Eligible: true, Devices: []cluster.DeviceGroup{g}}
}

func alloc(ns, job, nodeID, typ string, from, n int, start time.Time) cluster.Alloc {
	a := cluster.Alloc{Namespace: ns, JobID: job, Group: "g", NodeID: nodeID, GPUType: typ, StartTime: start}
	for i := from; i < from+n; i++ {
		a.DeviceIDs = append(a.DeviceIDs, fmt.Sprintf("%s-%d", nodeID, i))
	}
	return a
}

// TestUsageDecays: 8 GPUs for one half-life earn 8 x h / ln 2 x (1 - 1/2) GPU-hours; another
// idle half-life halves them.
func TestUsageDecays(t *testing.T) {
	s, err := New(Config{Queues: []Spec{{Name: "a", Namespaces: []string{"a"}}}, HalfLife: 10 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	busy := &cluster.Snapshot{Now: t0, Nodes: []cluster.Node{node("n", "a100", 8)}, Running: []cluster.Alloc{alloc("a", "j", "n", "a100", 0, 8, t0)}}
	s.Prepare(busy)
	busy.Now = t0.Add(10 * time.Hour)
	s.Prepare(busy)
	want := 8 * 10 / math.Ln2 * 0.5
	if got := s.Status(busy)[0].GPUHours; math.Abs(got-want) > 1e-6 {
		t.Fatalf("after one half-life: %v GPU-hours, want %v", got, want)
	}
	idle := &cluster.Snapshot{Now: t0.Add(20 * time.Hour), Nodes: busy.Nodes}
	s.Prepare(idle)
	s.Prepare(idle) // the same instant again adds and decays nothing
	if got := s.Status(idle)[0].GPUHours; math.Abs(got-want/2) > 1e-6 {
		t.Fatalf("after an idle half-life: %v GPU-hours, want %v", got, want/2)
	}
}

func ranked(jobs ...cluster.Job) []sched.Ranked {
	out := make([]sched.Ranked, len(jobs))
	for i := range jobs {
		out[i] = sched.Ranked{Job: &jobs[i]}
	}
	return out
}

func keys(rs []sched.Ranked) string {
	var ks []string
	for _, r := range rs {
		ks = append(ks, r.Job.ID)
	}
	return strings.Join(ks, ",")
}

// TestOrder: jobs of a queue under its guarantee first, jobs beyond their queue's maximum last,
// and a queue that used more than its share later.
func TestOrder(t *testing.T) {
	s, err := New(Config{Queues: []Spec{
		{Name: "a", Namespaces: []string{"a"}, Guarantee: 4},
		{Name: "b", Namespaces: []string{"b"}, Max: 8},
		{Name: "c", Namespaces: []string{"c"}},
	}, HalfLife: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	snap := &cluster.Snapshot{Now: t0, Nodes: []cluster.Node{node("n", "a100", 16)},
		Running: []cluster.Alloc{alloc("b", "rb", "n", "a100", 0, 6, t0), alloc("c", "rc", "n", "a100", 6, 4, t0)}}
	pend := func(ns, id string, g int) cluster.Job { return cluster.Job{Namespace: ns, ID: id, Group: "g", GPUs: g} }
	snap.Pending = []cluster.Job{pend("b", "b-big", 4), pend("c", "c1", 1), pend("b", "b-small", 2), pend("a", "a1", 2), pend("c", "c2", 1)}
	got := keys(s.Order(nil, snap, ranked(snap.Pending...)))
	// a1: under guarantee; b-big: 6 + 4 > max 8; no usage yet, so the rest keep their order.
	if want := "a1,c1,b-small,c2,b-big"; got != want {
		t.Errorf("order %s, want %s", got, want)
	}
	// After an hour with b's 6 GPUs running and c's jobs waiting, b used all and c nothing:
	// b's share is 2, c's 0.
	snap.Running = snap.Running[:1]
	snap.Pending = []cluster.Job{pend("b", "b1", 1), pend("b", "b2", 1), pend("b", "b3", 1), pend("c", "c1", 1)}
	s.Prepare(snap)
	snap.Now = t0.Add(time.Hour)
	s.Prepare(snap)
	st := s.Status(snap)
	var shareB, shareC float64
	for _, q := range st {
		switch q.Name {
		case "b":
			shareB = q.Share
		case "c":
			shareC = q.Share
		}
	}
	if math.Abs(shareB-2) > 1e-9 || shareC != 0 {
		t.Fatalf("shares b %v, c %v; want 2 and 0", shareB, shareC)
	}
	// Factors sqrt 2 (b) and 1/sqrt 2 (c); positions: b1 0, b2 1.41, b3 2.83, c1 3 x 0.71 = 2.12:
	// c1 passes b3 but not b2 (with the old factors 2 and 1/2 it passed b2 as well).
	if got, want := keys(s.Order(nil, snap, ranked(snap.Pending...))), "b1,b2,c1,b3"; got != want {
		t.Errorf("order by share %s, want %s", got, want)
	}
}

// TestReclaimableAndCaps: only borrowed preemptible jobs stay preemptible; a queue under its
// guarantee with pending work reserves the idle GPUs it is owed; maxima become caps.
func TestReclaimableAndCaps(t *testing.T) {
	s, err := New(Config{Queues: []Spec{
		{Name: "a", Namespaces: []string{"a"}, Guarantee: 8},
		{Name: "b", Namespaces: []string{"b"}, Guarantee: 4, Max: 12},
	}})
	if err != nil {
		t.Fatal(err)
	}
	snap := &cluster.Snapshot{Now: t0, Nodes: []cluster.Node{node("n", "a100", 16)}}
	// b runs 12: 4 within its guarantee (the oldest started), 8 borrowed; a runs 2 and waits
	// for 4.
	snap.Running = []cluster.Alloc{
		alloc("b", "old", "n", "a100", 0, 4, t0.Add(-3*time.Hour)),
		alloc("b", "mid", "n", "a100", 4, 4, t0.Add(-2*time.Hour)),
		alloc("b", "new", "n", "a100", 8, 4, t0.Add(-time.Hour)),
		alloc("a", "a-run", "n", "a100", 12, 2, t0.Add(-time.Hour)),
	}
	pre := func(ns, id string, g int) cluster.Job {
		return cluster.Job{Namespace: ns, ID: id, Group: "g", GPUs: g, Hetgpu: cluster.Annotations{Preemptible: true}}
	}
	snap.Preemptible = []cluster.Job{pre("b", "old", 4), pre("b", "mid", 4), pre("b", "new", 4), pre("a", "a-run", 2)}
	// b's "gone" was preempted and waits again while its allocation stops: it fills nothing.
	// old was pinned again and has not started yet (no start time): it is b's newest now.
	snap.Running[0].StartTime = time.Time{}
	snap.Nodes = append(snap.Nodes, node("m", "a100", 4))
	snap.Running = append(snap.Running, alloc("b", "gone", "m", "a100", 0, 4, t0.Add(-4*time.Hour)))
	snap.Pending = []cluster.Job{{Namespace: "a", ID: "a-wait", Group: "g", GPUs: 4}, {Namespace: "b", ID: "gone", Group: "g", GPUs: 4}}
	out := s.Prepare(snap)
	if got := keys(ranked(s.Reclaimable(snap)...)); got != "old,new" {
		t.Errorf("reclaimable %s, want old,new (mid is within b's guarantee, a-run within a's)", got)
	}
	if g := out.Tenancy.Guaranteed; len(g) != 2 || !g["b/mid/g"] || !g["a/a-run/g"] || len(out.Preemptible) != 4 {
		t.Errorf("guaranteed %v (preemptible %d), want b/mid/g and a/a-run/g of the 4", g, len(out.Preemptible))
	}
	if len(snap.Caps) != 0 || len(snap.Preemptible) != 4 {
		t.Error("Prepare modified the snapshot it was given")
	}
	var reserve, bMax *cluster.GPUCap
	for i := range out.Caps {
		switch out.Caps[i].Name {
		case "guarantees of queue a":
			reserve = &out.Caps[i]
		case "queue b":
			bMax = &out.Caps[i]
		}
	}
	if bMax == nil || bMax.GPUs != 12 || !bMax.Covers("b") || bMax.Covers("a") || bMax.Reason != "queue b is at its maximum of 12 GPUs" {
		t.Errorf("b's maximum %+v", bMax)
	}
	// a is owed min(8, 2 + 4) - 2 = 4 GPUs; 2 are idle: others may hold their 16 running and 0 more.
	if reserve == nil || reserve.GPUs != 16 || reserve.Covers("a") || !reserve.Covers("b") || !reserve.Covers("elsewhere") {
		t.Errorf("a's reserve %+v, want others capped at 16", reserve)
	}
}

// TestOneReserveForAllOwedQueues: two queues below their guarantees with 1-GPU jobs waiting
// share one reserve; it covers the other queues only, so neither owed queue blocks the other.
func TestOneReserveForAllOwedQueues(t *testing.T) {
	s, err := New(Config{Queues: []Spec{
		{Name: "a", Namespaces: []string{"a"}, Guarantee: 4},
		{Name: "c", Namespaces: []string{"c"}, Guarantee: 4},
		{Name: "b", Namespaces: []string{"b"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	snap := &cluster.Snapshot{Now: t0, Nodes: []cluster.Node{node("n", "a100", 8)},
		Running: []cluster.Alloc{alloc("b", "run", "n", "a100", 0, 6, t0)},
		Pending: []cluster.Job{{Namespace: "a", ID: "a1", Group: "g", GPUs: 1}, {Namespace: "c", ID: "c1", Group: "g", GPUs: 1}}}
	out := s.Prepare(snap)
	if len(out.Caps) != 1 {
		t.Fatalf("caps %+v, want one reserve", out.Caps)
	}
	c := out.Caps[0]
	// Owed 1 + 1 of the 2 idle GPUs: b and the default queue may hold their 6 and no more.
	if c.GPUs != 6 || c.Covers("a") || c.Covers("c") || !c.Covers("b") || !c.Covers("unlisted") ||
		c.Reason != "idle GPUs are held for queues a, c, below their guarantees" {
		t.Errorf("reserve %+v", c)
	}
}

// TestOrderFillsTheGuaranteeOnly: a queue's waiting jobs go first only until they fill what its
// guarantee has left; the rest keep the ranker's order.
func TestOrderFillsTheGuaranteeOnly(t *testing.T) {
	s, err := New(Config{Queues: []Spec{{Name: "a", Namespaces: []string{"a"}, Guarantee: 4}, {Name: "b", Namespaces: []string{"b"}}}})
	if err != nil {
		t.Fatal(err)
	}
	pend := func(ns, id string, g int) cluster.Job { return cluster.Job{Namespace: ns, ID: id, Group: "g", GPUs: g} }
	snap := &cluster.Snapshot{Now: t0, Nodes: []cluster.Node{node("n", "a100", 8)},
		Running: []cluster.Alloc{alloc("a", "run", "n", "a100", 0, 1, t0)}}
	snap.Pending = []cluster.Job{pend("b", "b1", 1), pend("a", "a1", 2), pend("b", "b2", 1), pend("a", "a2", 2), pend("a", "a3", 1)}
	// a holds 1 of 4: a1 (2) fits, a2 (2) would make 5, a3 (1) makes 4.
	if got, want := keys(s.Order(nil, snap, ranked(snap.Pending...))), "a1,a3,b1,b2,a2"; got != want {
		t.Errorf("order %s, want %s", got, want)
	}
}

// TestRelocatedJobsLead: b holds 14 GPUs with a guarantee of 12 and its 4-GPU job "moved" was
// stopped this round to move within the guarantee (cluster.Tenancy.Relocated): after the
// preemption b holds 10, so the moved job does not fit what the guarantee has left (2) by
// itself, but it keeps its standing: it leads the order and b is owed its 4 GPUs. Without the
// mark it would wait behind the shorter job of a.
func TestRelocatedJobsLead(t *testing.T) {
	s, err := New(Config{Queues: []Spec{{Name: "a", Namespaces: []string{"a"}}, {Name: "b", Namespaces: []string{"b"}, Guarantee: 12}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		moved     bool
		order     string
		owedB     int
		reserveOn bool
	}{{true, "moved,a1", 4, true}, {false, "a1,moved", 0, false}} {
		snap := &cluster.Snapshot{Now: t0, Nodes: []cluster.Node{node("n", "a100", 16)},
			Running: []cluster.Alloc{alloc("b", "r1", "n", "a100", 0, 8, t0), alloc("b", "r2", "n", "a100", 8, 2, t0)}}
		snap.Pending = []cluster.Job{{Namespace: "a", ID: "a1", Group: "g", GPUs: 4}, {Namespace: "b", ID: "moved", Group: "g", GPUs: 4}}
		if tt.moved {
			snap.Tenancy = &cluster.Tenancy{Relocated: map[string]bool{"b/moved/g": true}}
		}
		out := s.Prepare(snap)
		if got := keys(s.Order(nil, out, ranked(out.Pending...))); got != tt.order {
			t.Errorf("moved %v: order %s, want %s", tt.moved, got, tt.order)
		}
		if got := out.Tenancy.Owed["b"]; got != tt.owedB {
			t.Errorf("moved %v: b owed %d, want %d", tt.moved, got, tt.owedB)
		}
		if got := len(out.Caps) > 0; got != tt.reserveOn {
			t.Errorf("moved %v: caps %+v, want a reserve %v", tt.moved, out.Caps, tt.reserveOn)
		}
	}
}

// TestOrderKeepsRankerPos: a job moved ahead into its queue's guarantee keeps the ranker's
// position (1-based) for the placement's priority, through a second Order of the round (which
// sees it first); jobs in their ranker's tier carry none.
func TestOrderKeepsRankerPos(t *testing.T) {
	s, err := New(Config{Queues: []Spec{
		{Name: "a", Namespaces: []string{"a"}, Guarantee: 4},
		{Name: "c", Namespaces: []string{"c"}},
	}, HalfLife: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	pend := func(ns, id string, g int) cluster.Job { return cluster.Job{Namespace: ns, ID: id, Group: "g", GPUs: g} }
	snap := &cluster.Snapshot{Now: t0, Nodes: []cluster.Node{node("n", "a100", 8)},
		Pending: []cluster.Job{pend("c", "c1", 1), pend("c", "c2", 1), pend("a", "a1", 2), pend("c", "c3", 1), pend("a", "a2", 2)}}
	want := map[string]int{"a1": 3, "a2": 5}
	first := s.Order(nil, snap, ranked(snap.Pending...))
	for round, out := range [][]sched.Ranked{first, s.Order(nil, snap, first)} {
		if got := keys(out); got != "a1,a2,c1,c2,c3" {
			t.Fatalf("order %d: %s, want a1,a2,c1,c2,c3", round, got)
		}
		for _, r := range out {
			if r.RankerPos != want[r.Job.ID] {
				t.Errorf("order %d: %s has RankerPos %d, want %d", round, r.Job.ID, r.RankerPos, want[r.Job.ID])
			}
		}
	}
}
