package nomadtest

import (
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

func ptr[T any](v T) *T { return &v }

// TestUpdateCasesAgreeWithNomad applies the changes the e2e suite checks on a real agent to a
// running allocation of the fake, one after another, and expects the same outcome.
func TestUpdateCasesAgreeWithNomad(t *testing.T) {
	s := New()
	defer s.Close()
	s.AddNode("node-1", "v100", "Tesla V100-SXM2-16GB", 2)
	job := &api.Job{ID: ptr("semantics"), Name: ptr("semantics"), Namespace: ptr("default"), Type: ptr("batch"),
		TaskGroups: []*api.TaskGroup{{Name: ptr("train"), Count: ptr(1), Tasks: []*api.Task{{Name: "train", Driver: "hetgpu",
			Config:    map[string]any{"command": "toy"},
			Resources: &api.Resources{Devices: []*api.RequestedDevice{{Name: "nvidia/gpu", Count: ptr(uint64(1))}}}}}}}}
	s.Register(job)
	for _, c := range UpdateCases() {
		allocs := s.Allocs("default", "semantics")
		var running *api.Allocation
		for _, a := range allocs {
			if a.DesiredStatus == "run" && a.ClientStatus == "running" {
				running = a
			}
		}
		if running == nil {
			t.Fatalf("%s: no running allocation to change: %+v", c.Name, allocs)
		}
		j := s.Job("default", "semantics")
		c.Change(j, running.NodeID, running.AllocatedResources.Tasks["train"].Devices[0].DeviceIDs)
		s.Register(j)
		var after *api.Allocation
		for _, a := range s.Allocs("default", "semantics") {
			if a.ID == running.ID {
				after = a
			}
		}
		replaced := after.DesiredStatus != "run"
		if replaced != c.Destructive {
			t.Errorf("%s: allocation replaced = %v, want %v (desired %s, client %s)", c.Name, replaced, c.Destructive, after.DesiredStatus, after.ClientStatus)
		}
		if !replaced && *after.Job.Version != *s.Job("default", "semantics").Version {
			t.Errorf("%s: in-place update left the allocation on version %d", c.Name, *after.Job.Version)
		}
	}
}

// TestLostNodeReplaced: a node that goes down has its allocations marked lost and replaced
// elsewhere; a drain leaves them running until its deadline, then stops them: a service
// allocation is replaced, a batch one, whose killed task did not fail, counts as done (the
// job is dead), as a real agent shows (e2e TestDrainDeadlineEndsBatchJob).
func TestLostNodeReplaced(t *testing.T) {
	for _, tc := range []struct {
		name, typ   string
		fault       func(t *testing.T, s *Server)
		clientAfter string
		replaced    bool
	}{
		{"down", "batch", func(t *testing.T, s *Server) {
			s.UpdateNode("node-1", "NodeStreamEvent", func(n *api.Node) { n.Status = api.NodeStatusDown })
		}, api.AllocClientStatusLost, true},
		{"drain, service", "service", drainToDeadline, api.AllocClientStatusComplete, true},
		{"drain, batch", "batch", drainToDeadline, api.AllocClientStatusComplete, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := New()
			defer s.Close()
			s.AddNode("node-1", "a", "Tesla V100-SXM2-16GB", 2)
			s.AddNode("node-2", "b", "Tesla V100-SXM2-16GB", 2)
			s.Register(&api.Job{ID: ptr("j"), Namespace: ptr("default"), Type: ptr(tc.typ), TaskGroups: []*api.TaskGroup{{Name: ptr("g"), Count: ptr(1),
				Tasks: []*api.Task{{Name: "t", Resources: &api.Resources{Devices: []*api.RequestedDevice{{Name: "nvidia/gpu", Count: ptr(uint64(1))}}}}}}}})
			tc.fault(t, s)
			a := s.Allocs("default", "j")
			if a[0].NodeID != "node-1" || a[0].ClientStatus != tc.clientAfter || a[0].DesiredStatus != "stop" {
				t.Fatalf("the first allocation: %+v", a[0])
			}
			if tc.replaced != (len(a) == 2) || (tc.replaced && (a[1].NodeID != "node-2" || a[1].ClientStatus != "running")) {
				t.Fatalf("replaced = %v, allocations: %+v", tc.replaced, a)
			}
			if st := *s.Job("default", "j").Status; tc.replaced == (st == "dead") {
				t.Errorf("job status %s", st)
			}
		})
	}
}

func drainToDeadline(t *testing.T, s *Server) {
	s.UpdateNode("node-1", "NodeDrain", func(n *api.Node) { n.DrainStrategy = &api.DrainStrategy{} })
	if a := s.Allocs("default", "j"); len(a) != 1 || a[0].ClientStatus != "running" {
		t.Fatalf("a drain stopped the allocation before its deadline: %+v", a)
	}
	s.DrainDeadline("node-1")
}

// TestNewVersionRerunsFinishedBatchGroup: a new version of a finished batch job, a ui-only
// one included, runs its groups again (e2e TestJobUpdateSemantics shows it on a real agent).
func TestNewVersionRerunsFinishedBatchGroup(t *testing.T) {
	s := New()
	defer s.Close()
	s.AddNode("node-1", "a", "Tesla V100-SXM2-16GB", 2)
	s.Register(&api.Job{ID: ptr("j"), Namespace: ptr("default"), Type: ptr("batch"), TaskGroups: []*api.TaskGroup{{Name: ptr("g"), Count: ptr(1),
		Tasks: []*api.Task{{Name: "t"}}}}})
	first := s.Allocs("default", "j")[0]
	s.SetAllocStatus(first.ID, api.AllocClientStatusComplete, time.Now().Add(-time.Minute), time.Now())
	if st := *s.Job("default", "j").Status; st != "dead" {
		t.Fatalf("status %s, want dead", st)
	}
	j := s.Job("default", "j")
	j.UI = &api.JobUIConfig{Description: "new version"}
	s.Register(j)
	if a := s.Allocs("default", "j"); len(a) != 2 || a[1].ClientStatus != "running" {
		t.Errorf("a ui-only new version of a finished batch job: %+v, want a re-run", a)
	}
}
