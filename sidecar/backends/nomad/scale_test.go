package nomad

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/hetgpu/hetgpu/internal/poll"
	"github.com/hetgpu/hetgpu/model/cluster"
)

// TestRoundCallsIndependentOfRunningAllocations runs the backend's part of a round
// (maintenance with energy sampling, snapshot, pins of nothing) on a cluster where nothing
// changed, once with one running allocation per node and once with the nodes full of them.
// The calls must be the same: a round that asks Nomad something per running allocation
// (allocation stats, job reads) would not scale to thousands of them.
func TestRoundCallsIndependentOfRunningAllocations(t *testing.T) {
	perNode := func(n int) map[string]int {
		return map[string]int{"node-t4-0000": n, "node-v100-00": n, "node-a100-00": n}
	}
	cases := []struct {
		name   string
		allocs map[string]int // node -> one-GPU allocations running there
	}{
		{"one per node", perNode(1)},
		{"four per node", perNode(4)},
	}
	calls := make([]map[string]int, len(cases))
	for i, c := range cases {
		f := newFixture(t, func(cfg *Config) {
			cfg.SampleDeviceStats = true
			cfg.SampleEvery = time.Nanosecond
		})
		f.resync(t)
		n := 0
		for node, k := range c.allocs {
			for j := 0; j < k; j++ {
				id := fmt.Sprintf("run-%s-%d", node, j)
				f.srv.Register(heldJob(id, 1, 1, nil))
				f.resync(t)
				snap := f.snapshot(t)
				var job cluster.Job
				for _, p := range snap.Pending {
					if p.ID == id {
						job = p
					}
				}
				res, err := f.b.Pin(context.Background(), []cluster.Decision{decide(snap, job, node)})
				if err != nil || len(res) != 1 || !res[0].Applied {
					t.Fatalf("%s: pin %s on %s: %+v, %v", c.name, id, node, res, err)
				}
				n++
			}
		}
		f.resync(t)
		if got := len(f.snapshot(t).Running); got != n {
			t.Fatalf("%s: %d running allocations in the snapshot, want %d", c.name, got, n)
		}
		f.srv.ResetCalls()
		ctx := context.Background()
		if _, err := f.b.Maintain(ctx); err != nil {
			t.Fatal(err)
		}
		snap := f.snapshot(t)
		if len(snap.Pending) != 0 {
			t.Fatalf("%s: pending %+v", c.name, snap.Pending)
		}
		if _, err := f.b.Pin(ctx, nil); err != nil {
			t.Fatal(err)
		}
		calls[i] = f.srv.Calls()
		t.Logf("%s: %d running allocations, calls %v", c.name, n, calls[i])
	}
	total := func(m map[string]int) int {
		s := 0
		for _, v := range m {
			s += v
		}
		return s
	}
	for i := range cases {
		// One node stats read per node with running allocations, nothing else.
		if got := total(calls[i]); got != 3 || calls[i]["GET /v1/client/stats"] != 3 {
			t.Errorf("%s: a round without changes made calls %v, want exactly one node stats read per node (3)", cases[i].name, calls[i])
		}
	}
	if a, b := total(calls[0]), total(calls[len(cases)-1]); a != b {
		t.Errorf("calls grew with the running allocations: %d with %s, %d with %s", a, cases[0].name, b, cases[len(cases)-1].name)
	}
}

// TestJobEventsWithoutReads checks which job events the watcher answers from what it tracks
// and which make it read the job: its own registers and status-only changes need no read; a
// new job version does.
func TestJobEventsWithoutReads(t *testing.T) {
	f := newFixture(t, nil)
	f.srv.Register(heldJob("j", 1, 1, nil))
	f.resync(t)
	tracked := f.b.jobs[jobKey("default", "j")].job
	mi, jmi := float64(*tracked.ModifyIndex), float64(*tracked.JobModifyIndex)
	ev := func(modify, jobModify float64, status string) *api.Event {
		return &api.Event{Topic: api.TopicJob, Type: "JobRegistered", Key: "j", Payload: map[string]any{"Job": map[string]any{
			"Namespace": "default", "ID": "j", "ModifyIndex": modify, "JobModifyIndex": jobModify, "Status": status}}}
	}
	for _, c := range []struct {
		name       string
		ev         *api.Event
		handled    bool
		wantStatus string
	}{
		{"as new as tracked", ev(mi, jmi, "pending"), true, "pending"},
		{"older", ev(mi-1, jmi, "pending"), true, "pending"},
		{"status only", ev(mi+5, jmi, "running"), true, "running"},
		{"new version", ev(mi+9, mi+9, "pending"), false, "running"},
		{"no index", &api.Event{Topic: api.TopicJob, Key: "j", Payload: map[string]any{"Job": map[string]any{"Namespace": "default"}}}, false, "running"},
	} {
		if got := f.b.jobCurrent("default", c.ev); got != c.handled {
			t.Errorf("%s: handled = %v, want %v", c.name, got, c.handled)
		}
		if got := deref(f.b.jobs[jobKey("default", "j")].job.Status, ""); got != c.wantStatus {
			t.Errorf("%s: tracked status %q, want %q", c.name, got, c.wantStatus)
		}
	}
	if got := *f.b.jobs[jobKey("default", "j")].job.ModifyIndex; float64(got) != mi+5 {
		t.Errorf("tracked ModifyIndex %d after the status-only event, want %v", got, mi+5)
	}
	if *tracked.Status != "pending" {
		t.Errorf("the job object a reader may hold was changed in place: status %q", *tracked.Status)
	}
}

// TestPurgedJobFreesItsGPUs purges a running pinned job as a real agent does (the job and its
// allocations deleted, no allocation event): the next maintenance finds the allocation gone
// and the snapshot no longer counts its GPUs as busy, without waiting for a full resync.
func TestPurgedJobFreesItsGPUs(t *testing.T) {
	f, _ := pinnedFixture(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = f.b.Watch(ctx, func() {})
	}()
	defer func() { cancel(); <-done }()
	poll.Until(t, "the running allocation in the snapshot", func() bool { return len(f.snapshot(t).Running) == 1 })
	f.srv.Purge("default", "run")
	poll.Until(t, "the job dropped", func() bool {
		f.b.mu.Lock()
		defer f.b.mu.Unlock()
		return f.b.index >= f.srv.LastEventIndex() && f.b.jobs[jobKey("default", "run")] == nil
	})
	if got := len(f.snapshot(t).Running); got != 1 {
		t.Fatalf("before maintenance: %d running, want the allocation still counted (no event said it ended)", got)
	}
	if _, err := f.b.Maintain(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := f.snapshot(t).Running; len(got) != 0 {
		t.Errorf("after maintenance the purged job's allocation still holds GPUs: %+v", got)
	}
}
