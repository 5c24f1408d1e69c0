package nomad

import (
	"context"
	"strings"
	"testing"

	"github.com/hashicorp/nomad/api"
)

// TestChildren: how hetgpu treats the children of periodic and parameterized jobs, with the
// fake doing what a real Nomad 2.0 agent did (e2e TestNomadChildrenOnRealAgent): the parents
// are templates, never ranked; a dispatched child cannot be updated, so it is reported as one
// hetgpu cannot decide for and nothing is written to it; a periodic child is ranked and
// pinned, its pinned version tagged in the register (its ID has a "/", which Nomad's tag
// endpoint refuses), and it stays its parent's child for what hetgpu learns though Nomad
// dropped ParentID from the pinned version.
func TestChildren(t *testing.T) {
	f := newFixture(t, nil)
	meta := map[string]string{"hetgpu.enable": "true", "hetgpu.model": "resnet/ResNet-50"}
	param := heldJob("train", 1, 1, meta)
	param.ParameterizedJob = &api.ParameterizedJobConfig{}
	f.srv.Register(param)
	per := heldJob("nightly", 1, 1, meta)
	per.Periodic = &api.PeriodicConfig{Enabled: ptr(true), ProhibitOverlap: ptr(true)}
	f.srv.Register(per)
	dispatched := heldJob("train/dispatch-1-abcd", 1, 1, meta)
	dispatched.ParameterizedJob, dispatched.Dispatched, dispatched.ParentID = &api.ParameterizedJobConfig{}, true, ptr("train")
	f.srv.Register(dispatched)
	child := heldJob("nightly/periodic-100", 1, 1, meta)
	child.ParentID = ptr("nightly")
	f.srv.Register(child)
	f.resync(t)

	snap := f.snapshot(t)
	var pending []string
	for _, j := range snap.Pending {
		pending = append(pending, j.ID)
	}
	if len(pending) != 1 || pending[0] != "nightly/periodic-100" || snap.Pending[0].ParentID != "nightly" {
		t.Fatalf("pending = %v (%+v); want only the periodic child, with its parent", pending, snap.Pending)
	}
	m, err := f.b.Maintain(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var invalid []string
	for _, inv := range m.Invalid {
		invalid = append(invalid, inv.JobKey+": "+inv.Err)
	}
	if len(invalid) != 1 || !strings.HasPrefix(invalid[0], "default/train/dispatch-1-abcd/") || !strings.Contains(invalid[0], "dispatched") {
		t.Errorf("invalid = %v; want the dispatched child, saying why", invalid)
	}
	for _, id := range []string{"train", "nightly", "train/dispatch-1-abcd"} {
		if v := *f.srv.Job("default", id).Version; v != 0 {
			t.Errorf("%s: version %d after a round; hetgpu must not write to it", id, v)
		}
	}

	f.pin(t, snap, snap.Pending[0], "node-a100-00")
	got := f.srv.Job("default", "nightly/periodic-100")
	if got.ParentID != nil && *got.ParentID != "" {
		t.Errorf("the fake kept ParentID %q on a re-register; Nomad drops it", *got.ParentID)
	}
	tags := f.srv.Tags("default", "nightly/periodic-100")
	if len(tags) != 1 || tags[0].Name != "hetgpu-pin-v1" || tags[0].Version != 1 {
		t.Errorf("tags = %+v; want hetgpu-pin-v1 on version 1", tags)
	}
	f.resync(t)
	b := f.b
	b.mu.Lock()
	parent := b.jobs[jobKey("default", "nightly/periodic-100")].parent
	b.mu.Unlock()
	if parent != "nightly" {
		t.Errorf("the pinned child's parent is %q; want nightly kept from its first version", parent)
	}
}

// TestPrepareRegister: what a write of a job read from Nomad must drop, as a real agent
// showed: the implicit identity constraint that Nomad appends again to a group with workload
// identities, and the read version's tag, which Nomad would copy onto the new version.
func TestPrepareRegister(t *testing.T) {
	implicit := func() *api.Constraint { c := implicitIdentityConstraint; return &c }
	user := api.NewConstraint("${attr.cpu.arch}", "=", "amd64")
	cases := []struct {
		name       string
		identities bool
		in         []*api.Constraint
		want       int
	}{
		{"identities: the implicit constraint goes", true, []*api.Constraint{implicit(), user}, 1},
		{"identities: every copy goes", true, []*api.Constraint{implicit(), implicit(), user}, 1},
		{"no identities: Nomad does not add it back, it stays", false, []*api.Constraint{implicit(), user}, 2},
	}
	for _, tc := range cases {
		tk := &api.Task{Name: "t"}
		if tc.identities {
			tk.Identities = []*api.WorkloadIdentity{{Name: "extra"}}
		}
		job := &api.Job{ID: ptr("j"), VersionTag: &api.JobVersionTag{Name: "hetgpu-pin-9"},
			TaskGroups: []*api.TaskGroup{{Name: ptr("g"), Constraints: tc.in, Tasks: []*api.Task{tk}}}}
		prepareRegister(job)
		if n := len(job.TaskGroups[0].Constraints); n != tc.want {
			t.Errorf("%s: %d constraints left, want %d", tc.name, n, tc.want)
		}
		if job.VersionTag != nil {
			t.Errorf("%s: the read version's tag is kept", tc.name)
		}
	}
}
