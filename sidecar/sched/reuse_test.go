package sched

import (
	"slices"
	"testing"

	"github.com/hetgpu/hetgpu/model/cluster"
)

// The reusing forms (PinsView.After, Scratch.afterPreemption) answer as the allocating ones
// (AfterPins, AfterPreemption), round after round, while the earlier answers' arrays are
// written over.
func TestReusedArraysAnswerAsNewOnes(t *testing.T) {
	ids := func(js []cluster.Job) []string {
		var out []string
		for _, j := range js {
			out = append(out, j.ID)
		}
		return out
	}
	allocs := func(as []cluster.Alloc) []string {
		var out []string
		for _, a := range as {
			out = append(out, a.JobID)
		}
		return out
	}
	applied := func(keys ...string) []cluster.PinResult {
		var out []cluster.PinResult
		for _, k := range keys {
			out = append(out, cluster.PinResult{JobKey: "default/" + k + "/g", Applied: true})
		}
		return append(out, cluster.PinResult{JobKey: "default/refused/g"})
	}
	pre := func(id string) cluster.Job { j := job(id); j.Hetgpu.Preemptible = true; return j }
	rounds := []struct {
		snap            *cluster.Snapshot
		pins, preempted []cluster.PinResult
	}{
		{&cluster.Snapshot{Pending: []cluster.Job{pre("p1"), job("p2"), pre("p3")}, Preemptible: []cluster.Job{pre("r1")},
			Running: []cluster.Alloc{{JobID: "r1", Namespace: "default", Group: "g"}}},
			applied("p1", "p2"), applied("r1")},
		{&cluster.Snapshot{Pending: []cluster.Job{pre("p3"), pre("p4"), pre("p5"), pre("p6"), pre("p7")},
			Preemptible: []cluster.Job{pre("p1"), pre("r2"), pre("r3")},
			Running: []cluster.Alloc{{JobID: "p1", Namespace: "default", Group: "g"}, {JobID: "r2", Namespace: "default", Group: "g"},
				{JobID: "r3", Namespace: "default", Group: "g"}}},
			applied("p4", "p7"), applied("r2", "r3")},
		{&cluster.Snapshot{Pending: []cluster.Job{pre("p9")}}, applied(), applied()},
	}
	var view PinsView
	var scratch Scratch
	var earlier []*cluster.Snapshot
	for i, r := range rounds {
		want, got := AfterPins(r.snap, r.pins), view.After(r.snap, r.pins)
		if !slices.Equal(ids(got.Pending), ids(want.Pending)) || !slices.Equal(ids(got.Preemptible), ids(want.Preemptible)) {
			t.Errorf("round %d: PinsView.After: pending %v, preemptible %v; AfterPins: %v, %v", i,
				ids(got.Pending), ids(got.Preemptible), ids(want.Pending), ids(want.Preemptible))
		}
		want, got = AfterPreemption(r.snap, r.preempted), scratch.afterPreemption(r.snap, r.preempted)
		if !slices.Equal(ids(got.Pending), ids(want.Pending)) || !slices.Equal(ids(got.Preemptible), ids(want.Preemptible)) ||
			!slices.Equal(allocs(got.Running), allocs(want.Running)) {
			t.Errorf("round %d: Scratch: pending %v, preemptible %v, running %v; AfterPreemption: %v, %v, %v", i,
				ids(got.Pending), ids(got.Preemptible), allocs(got.Running), ids(want.Pending), ids(want.Preemptible), allocs(want.Running))
		}
		earlier = append(earlier, r.snap)
	}
	// The rounds' own snapshots are never written.
	if got := ids(earlier[0].Pending); !slices.Equal(got, []string{"p1", "p2", "p3"}) {
		t.Errorf("first snapshot's pending became %v", got)
	}
}
