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

func TestRoute(t *testing.T) {
	for _, c := range []struct{ method, path, want string }{
		{"GET", "/v1/nodes", "GET /v1/nodes"},
		{"GET", "/v1/node/abc-123", "GET /v1/node/:id"},
		{"GET", "/v1/job/train", "GET /v1/job/:id"},
		{"PUT", "/v1/jobs", "PUT /v1/jobs"},
		{"PUT", "/v1/job/train/versions/3/tag", "PUT /v1/job/:id/versions/:version/tag"},
		{"GET", "/v1/client/stats", "GET /v1/client/stats"},
		{"GET", "/v1/client/allocation/alloc-0001/stats", "GET /v1/client/allocation/:id/stats"},
		{"PUT", "/v1/allocation/alloc-0001/stop", "PUT /v1/allocation/:id/stop"},
		{"GET", "/v1/event/stream", "GET /v1/event/stream"},
	} {
		if got := Route(c.method, c.path); got != c.want {
			t.Errorf("Route(%s, %s) = %q, want %q", c.method, c.path, got, c.want)
		}
	}
}

// TestCallCounting checks that every request is counted by route, with or without the
// request log, and that ResetCalls starts over.
func TestCallCounting(t *testing.T) {
	s := New()
	defer s.Close()
	s.AddNode("node-1", "v100", "Tesla V100-SXM2-16GB", 2)
	c := s.Client()
	for i := 0; i < 3; i++ {
		if _, _, err := c.Nodes().Info("node-1", nil); err != nil {
			t.Fatal(err)
		}
	}
	s.RecordRequests(false)
	if _, _, err := c.Nodes().List(nil); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Nodes().Stats("node-1", nil); err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"GET /v1/node/:id": 3, "GET /v1/nodes": 1, "GET /v1/client/stats": 1}
	got := s.Calls()
	for k, v := range want {
		if got[k] != v {
			t.Errorf("calls[%q] = %d, want %d (all: %v)", k, got[k], v, got)
		}
	}
	if len(got) != len(want) || s.TotalCalls() != 5 {
		t.Errorf("calls = %v (total %d), want exactly %v", got, s.TotalCalls(), want)
	}
	if n := len(s.Requests()); n != 3 {
		t.Errorf("recorded %d requests, want the 3 made before recording was turned off", n)
	}
	s.ResetCalls()
	if s.TotalCalls() != 0 || len(s.Requests()) != 0 {
		t.Errorf("after ResetCalls: %d calls, %d requests", s.TotalCalls(), len(s.Requests()))
	}
}

// TestLatency checks that injected latency delays each call by at least its amount and that
// concurrent calls wait for it side by side, not one after another.
func TestLatency(t *testing.T) {
	s := New()
	defer s.Close()
	s.AddNode("node-1", "v100", "Tesla V100-SXM2-16GB", 2)
	c := s.Client()
	const lat = 100 * time.Millisecond
	s.SetLatency(lat)
	t0 := time.Now()
	if _, _, err := c.Nodes().Info("node-1", nil); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(t0); d < lat {
		t.Errorf("one call took %v, want at least the injected %v", d, lat)
	}
	const n = 8
	errs := make(chan error, n)
	t0 = time.Now()
	for i := 0; i < n; i++ {
		go func() {
			_, _, err := c.Nodes().Info("node-1", nil)
			errs <- err
		}()
	}
	for i := 0; i < n; i++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if d := time.Since(t0); d < lat || d >= n*lat/2 {
		t.Errorf("%d concurrent calls took %v, want at least %v and well under %v (serialised)", n, d, lat, n*lat)
	}
	s.SetLatency(0)
	t0 = time.Now()
	if _, _, err := c.Nodes().Info("node-1", nil); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(t0); d >= lat {
		t.Errorf("with the latency removed a call took %v", d)
	}
}
