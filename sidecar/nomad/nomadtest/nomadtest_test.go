package nomadtest

import (
	"testing"

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
// elsewhere; a drain leaves them running until its deadline, then migrates them.
func TestLostNodeReplaced(t *testing.T) {
	for _, tc := range []struct {
		name        string
		fault       func(s *Server)
		clientAfter string
	}{
		{"down", func(s *Server) {
			s.UpdateNode("node-1", "NodeStreamEvent", func(n *api.Node) { n.Status = api.NodeStatusDown })
		}, api.AllocClientStatusLost},
		{"drain", func(s *Server) {
			s.UpdateNode("node-1", "NodeDrain", func(n *api.Node) { n.DrainStrategy = &api.DrainStrategy{} })
			if a := s.Allocs("default", "j"); len(a) != 1 || a[0].ClientStatus != "running" {
				t.Fatalf("a drain stopped the allocation before its deadline: %+v", a)
			}
			s.DrainDeadline("node-1")
		}, api.AllocClientStatusComplete},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := New()
			defer s.Close()
			s.AddNode("node-1", "a", "Tesla V100-SXM2-16GB", 2)
			s.AddNode("node-2", "b", "Tesla V100-SXM2-16GB", 2)
			s.Register(&api.Job{ID: ptr("j"), Namespace: ptr("default"), TaskGroups: []*api.TaskGroup{{Name: ptr("g"), Count: ptr(1),
				Tasks: []*api.Task{{Name: "t", Resources: &api.Resources{Devices: []*api.RequestedDevice{{Name: "nvidia/gpu", Count: ptr(uint64(1))}}}}}}}})
			tc.fault(s)
			a := s.Allocs("default", "j")
			if len(a) != 2 || a[0].NodeID != "node-1" || a[0].ClientStatus != tc.clientAfter || a[0].DesiredStatus != "stop" ||
				a[1].NodeID != "node-2" || a[1].ClientStatus != "running" {
				t.Fatalf("allocations: %+v", a)
			}
		})
	}
}
