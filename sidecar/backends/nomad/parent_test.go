package nomad

import (
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/hetgpu/hetgpu/model/cluster"
)

// TestParentAndSteps: a dispatched child's ParentID and its hetgpu.steps reach the round's
// jobs, pending and, once it runs and is preemptible, preemptible; a job without either
// carries neither.
func TestParentAndSteps(t *testing.T) {
	f := newFixture(t, nil)
	child := heldJob("nightly-1", 2, 1, map[string]string{"hetgpu.enable": "true", "hetgpu.model": "resnet/ResNet-50",
		"hetgpu.steps": "40k", "hetgpu.preemptible": "true"})
	child.ParentID = ptr("nightly")
	f.srv.Register(child)
	f.srv.Register(heldJob("plain", 1, 1, nil))
	f.resync(t)
	snap := f.snapshot(t)
	got := map[string]cluster.Job{}
	for _, j := range snap.Pending {
		got[j.ID] = j
	}
	if j := got["nightly-1"]; j.ParentID != "nightly" || j.Hetgpu.Steps != 40000 {
		t.Errorf("pending child: parent %q, steps %v; want nightly, 40000", j.ParentID, j.Hetgpu.Steps)
	}
	if j := got["plain"]; j.ParentID != "" || j.Hetgpu.Steps != 0 {
		t.Errorf("pending plain job: parent %q, steps %v; want none", j.ParentID, j.Hetgpu.Steps)
	}
	f.pin(t, snap, got["nightly-1"], "node-a100-00")
	f.resync(t)
	a := f.srv.Allocs("default", "nightly-1")[0]
	f.srv.SetAllocStatus(a.ID, api.AllocClientStatusRunning, f.b.now().Add(-time.Minute), time.Time{})
	f.resync(t)
	snap = f.snapshot(t)
	if len(snap.Preemptible) != 1 || snap.Preemptible[0].ParentID != "nightly" || snap.Preemptible[0].Hetgpu.Steps != 40000 {
		t.Errorf("preemptible = %+v, want the child with its parent and steps", snap.Preemptible)
	}
}
