package service_test

import (
	"strings"
	"testing"

	"github.com/hetgpu/hetgpu/model/cluster"
	"github.com/hetgpu/hetgpu/sidecar/backends/nomad"
	"github.com/hetgpu/hetgpu/sidecar/runtime/service/servicetest"
	"github.com/hetgpu/hetgpu/sidecar/runtime/store"
	"github.com/hetgpu/hetgpu/sidecar/stages/place"
	"github.com/hetgpu/hetgpu/sidecar/stages/queue"
)

// A queue at its maximum keeps its next job waiting although GPUs are free, and says so in the
// queue API, the job's ui line, GET /v1/queues and the per-queue metrics.
func TestQueueMaximumWaits(t *testing.T) {
	h := servicetest.NewHarness(t, nil)
	h.Stop()
	milp, err := place.New(place.Default(), nil)
	if err != nil {
		t.Fatal(err)
	}
	set, err := queue.New(queue.Config{Queues: []queue.Spec{{Name: "team-a", Namespaces: []string{"default"}, Guarantee: 2, Max: 4}}})
	if err != nil {
		t.Fatal(err)
	}
	h.Placer, h.Queues = milp, set
	h.Start()
	h.Nomad.Register(servicetest.HeldJob("first", 4, 1, nil))
	h.Round()
	if r, ok := h.Store.Latest("default/first/train"); !ok || r.Status != store.StatusPinned {
		t.Fatalf("first not pinned: %+v", r)
	}
	h.Nomad.Register(servicetest.HeldJob("second", 2, 1, nil))
	h.Round()
	const why = "queue team-a is at its maximum of 4 GPUs"
	e := queueByKey(h)["default/second/train"]
	if e.Status == "decided" || e.Wait != cluster.WaitQueue || e.Reason != why {
		t.Fatalf("second: %+v, want waiting with %q", e, why)
	}
	if l := nomad.GroupLines(h.Nomad.Job("default", "second"))["train"]; !strings.Contains(l, why) {
		t.Errorf("ui line %q does not say %q", l, why)
	}
	if ex, err := h.Service.Explain("default", "second"); err != nil || len(ex.Groups) != 1 || !strings.Contains(ex.Groups[0].Summary, "waits for its queue: "+why) {
		t.Errorf("explain: %+v, %v; want the summary to name the queue", ex, err)
	}
	v := h.Service.Queues()
	var a *queue.Status
	for i := range v.Queues {
		if v.Queues[i].Name == "team-a" {
			a = &v.Queues[i]
		}
	}
	if !v.Enabled || a == nil || a.UsageGPUs != 4 || a.BorrowedGPUs != 2 || a.PendingJobs != 1 || a.PendingGPUs != 2 || a.Max != 4 {
		t.Fatalf("GET /v1/queues team-a = %+v", a)
	}
	m := scrape(t, h)
	for _, want := range []string{`hetgpu_queue_usage_gpus{queue="team-a"} 4`, `hetgpu_queue_max_gpus{queue="team-a"} 4`,
		`hetgpu_queue_borrowed_gpus{queue="team-a"} 2`, `hetgpu_waiting_groups{wait="queue"} 1`} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %s:\n%s", want, grepLines(m, "queue"))
		}
	}
}
