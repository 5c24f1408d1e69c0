package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

// TestQueueReclaimsBorrowed: two namespaces in two queues with a guarantee of 2 GPUs each, on
// one node of 4 V100s. team-b fills the node with two preemptible 2-GPU jobs: the first within
// its guarantee, the second on GPUs it borrowed. A job of team-a, under its guarantee, then
// reclaims the borrowed GPUs on the real agent: the sidecar preempts team-b's second job (never
// its first) and pins team-a's job on the freed GPUs; GET /v1/queues shows both queues at their
// guarantees.
func TestQueueReclaimsBorrowed(t *testing.T) {
	e := newFaultEnv(t, "queues end to end", []clusterClient{{Name: "v100", Fake: []string{"4x V100"}}}, "")
	c, bins := e.cluster, e.bins
	for _, ns := range []string{"team-a", "team-b"} {
		_, err := c.API.Namespaces().Register(&api.Namespace{Name: ns, Description: "hetgpu queues e2e"}, nil)
		must(t, err)
	}
	startSidecar(t, c, bins, e.port, `reconcile = "1s"
preemption {
  min_run        = "0s"
  long_job_guard = false
}
queue "a" {
  namespaces = ["team-a"]
  guarantee  = 2
}
queue "b" {
  namespaces = ["team-b"]
  guarantee  = 2
}`)
	q := func(ns string) *api.QueryOptions { return &api.QueryOptions{Namespace: ns} }
	live := func(ns, id string) []*api.AllocationListStub {
		stubs, _, err := c.API.Jobs().Allocations(id, true, q(ns))
		if err != nil {
			return nil
		}
		var out []*api.AllocationListStub
		for _, a := range stubs {
			if a.DesiredStatus == "run" && a.ClientStatus == "running" {
				out = append(out, a)
			}
		}
		return out
	}
	state := func(ns, id string) string {
		var b strings.Builder
		if j, _, err := c.API.Jobs().Info(id, q(ns)); err == nil {
			fmt.Fprintf(&b, "%s/%s held %v", ns, id, scHeld(j))
			if j.UI != nil {
				fmt.Fprintf(&b, " ui %q", j.UI.Description)
			}
		}
		stubs, _, _ := c.API.Jobs().Allocations(id, true, q(ns))
		for _, a := range stubs {
			fmt.Fprintf(&b, "; alloc %s %s/%s", a.ID[:8], a.ClientStatus, a.DesiredStatus)
		}
		return b.String()
	}
	long := map[string]string{"hetgpu.preemptible": "true", "hetgpu.runtime": "10h"}

	submitToyIn(t, c.API, bins, "team-b", "b-first", 100000, "100ms", long)
	waitFor(t, 90*time.Second, "b-first running", func() bool { return len(live("team-b", "b-first")) == 1 },
		func() string { return state("team-b", "b-first") })
	// Started later: the queue's second job runs on borrowed GPUs. It is longer, so that the
	// ranker never puts it before b-first (with min_run 0 and no long-job guard, two equal jobs
	// of one queue would take turns).
	submitToyIn(t, c.API, bins, "team-b", "b-second", 100000, "100ms", map[string]string{"hetgpu.preemptible": "true", "hetgpu.runtime": "20h"})
	waitFor(t, 90*time.Second, "b-second running", func() bool { return len(live("team-b", "b-second")) == 1 },
		func() string { return state("team-b", "b-second") })
	firstAlloc := live("team-b", "b-first")[0].ID

	submitToyIn(t, c.API, bins, "team-a", "a-job", 100000, "100ms", map[string]string{"hetgpu.runtime": "10h"})
	// The preemption is a version of b-second tagged hetgpu-rehold-N that holds it again (its ui
	// line says so until the line saying why it waits replaces it).
	preempted := func(ns, id string) bool {
		vs, _, _, err := c.API.Jobs().Versions(id, false, q(ns))
		if err != nil {
			return false
		}
		for _, v := range vs {
			if v.VersionTag != nil && strings.HasPrefix(v.VersionTag.Name, "hetgpu-rehold-") && strings.Contains(v.VersionTag.Description, "preempted") {
				return true
			}
		}
		return false
	}
	waitFor(t, 90*time.Second, "b-second preempted for team-a's guarantee", func() bool {
		j, _, err := c.API.Jobs().Info("b-second", q("team-b"))
		return err == nil && scHeld(j) && preempted("team-b", "b-second")
	}, func() string { return state("team-b", "b-second") + "\n" + state("team-a", "a-job") })
	waitFor(t, 90*time.Second, "a-job running on the reclaimed GPUs", func() bool { return len(live("team-a", "a-job")) == 1 },
		func() string {
			s, _ := httpGet(e.sidecarURL + "/v1/queue")
			return state("team-a", "a-job") + "\n" + state("team-b", "b-second") + "\nqueue: " + s
		})
	// team-b's job within its guarantee was never touched.
	if l := live("team-b", "b-first"); len(l) != 1 || l[0].ID != firstAlloc {
		t.Fatalf("b-first lost its allocation: %s", state("team-b", "b-first"))
	}
	if j, _, err := c.API.Jobs().Info("b-first", q("team-b")); err != nil || scHeld(j) || *j.Version != 1 || preempted("team-b", "b-first") {
		t.Fatalf("b-first was re-held or rewritten: %s", state("team-b", "b-first"))
	}
	// b-second waits for GPUs; the queues stand at their guarantees.
	var v struct {
		Enabled bool `json:"enabled"`
		Queues  []struct {
			Name         string `json:"name"`
			UsageGPUs    int    `json:"usage_gpus"`
			BorrowedGPUs int    `json:"borrowed_gpus"`
			PendingJobs  int    `json:"pending_jobs"`
			Guarantee    int    `json:"guarantee"`
		} `json:"queues"`
	}
	waitFor(t, 30*time.Second, "GET /v1/queues: a and b at 2 GPUs, b-second waiting", func() bool {
		if err := scGet(e.sidecarURL+"/v1/queues", &v); err != nil || !v.Enabled {
			return false
		}
		got := map[string][3]int{}
		for _, x := range v.Queues {
			got[x.Name] = [3]int{x.UsageGPUs, x.BorrowedGPUs, x.PendingJobs}
		}
		return got["a"] == [3]int{2, 0, 0} && got["b"] == [3]int{2, 0, 1}
	}, func() string { s, _ := httpGet(e.sidecarURL + "/v1/queues"); return s })
	if live := live("team-b", "b-second"); len(live) != 0 {
		t.Fatalf("b-second runs again beside a-job: %s", state("team-b", "b-second"))
	}
	// Its wait says why: the node is full (no queue holds it back now that a is at its
	// guarantee), and b-first was never preempted.
	if preempted("team-b", "b-first") {
		t.Fatalf("b-first, within team-b's guarantee, was preempted: %s", state("team-b", "b-first"))
	}
}
