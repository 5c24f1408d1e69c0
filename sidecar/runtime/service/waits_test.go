package service_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/hetgpu/hetgpu/sidecar/backends/nomad"
	"github.com/hetgpu/hetgpu/sidecar/runtime/service"
	"github.com/hetgpu/hetgpu/sidecar/runtime/service/servicetest"
	"github.com/hetgpu/hetgpu/sidecar/runtime/store"
)

func queueByKey(h *servicetest.Harness) map[string]service.QueueEntry {
	out := map[string]service.QueueEntry{}
	for _, q := range h.Service.Queue().Jobs {
		out[q.JobKey] = q
	}
	return out
}

func uiLine(h *servicetest.Harness, id string) string {
	return nomad.GroupLines(h.Nomad.Job("default", id))["train"]
}

// A 16-GPU group and a data-parallel group that no two nodes of one type can hold are
// reported as infeasible (queue, explain, metric, the job's ui), and the fittable group queued
// behind them is pinned in the same round; a node that joins makes the data-parallel one fit.
func TestInfeasibleGroupsDoNotBlockTheQueue(t *testing.T) {
	withEachPlacer(t, infeasibleGroupsDoNotBlock)
}

func infeasibleGroupsDoNotBlock(t *testing.T, h *servicetest.Harness) {
	h.Nomad.Register(servicetest.HeldJob("big", 16, 1, nil))
	h.Nomad.Register(servicetest.HeldJob("ddp", 4, 2, nil))
	h.Nomad.Register(servicetest.HeldJob("small", 2, 1, nil))
	h.Round()

	want := map[string]string{
		"default/big/train": "needs 16 GPUs of one type on one node; the largest node has 8 A100",
		"default/ddp/train": "needs 2 nodes with 4 GPUs of one type; at most 1 node has 4 A100",
	}
	q := queueByKey(h)
	for k, reason := range want {
		e := q[k]
		if e.Status != "infeasible" || e.Wait != "infeasible" || !e.Infeasible || e.Reason != reason || e.Rank != 0 {
			t.Errorf("queue entry %s = %+v, want infeasible: %s", k, e, reason)
		}
	}
	if e := q["default/small/train"]; e.Status != "decided" || e.Rank != 1 {
		t.Errorf("small = %+v, want decided at rank 1 (the infeasible groups are not ranked)", e)
	}
	if r, ok := h.Store.Latest("default/small/train"); !ok || r.Status != store.StatusPinned {
		t.Fatalf("small not pinned: %+v", r)
	}
	pinOf(t, h.Nomad.Job("default", "small"))

	ex, err := h.Service.Explain("default", "big")
	if err != nil {
		t.Fatal(err)
	}
	g := ex.Groups[0]
	if g.Status != "infeasible" || !g.Infeasible || g.Reason != want["default/big/train"] || g.Wait != "infeasible" ||
		!strings.HasPrefix(g.Summary, "cannot run on this cluster: needs 16 GPUs") || len(g.Estimates) != 3 {
		t.Errorf("explanation = %+v", g)
	}
	js, _ := json.Marshal(ex)
	if !strings.Contains(string(js), `"infeasible":true`) || !strings.Contains(string(js), `"reason":"needs 16 GPUs`) {
		t.Errorf("explain JSON lacks infeasible and reason: %s", js)
	}
	for id, k := range map[string]string{"big": "default/big/train", "ddp": "default/ddp/train"} {
		if l := uiLine(h, id); !strings.Contains(l, "cannot run on this cluster: "+want[k]) {
			t.Errorf("ui line of %s = %q", id, l)
		}
	}
	m := scrape(t, h)
	for _, s := range []string{"hetgpu_infeasible_groups 2", `hetgpu_waiting_groups{wait="infeasible"} 2`, "hetgpu_queue_length 3"} {
		if !strings.Contains(m, s+"\n") {
			t.Errorf("metrics lack %q", s)
		}
	}

	// Nothing changed: the lines are not written again (no register, no new version).
	before := *h.Nomad.Job("default", "big").JobModifyIndex
	h.Round()
	if after := *h.Nomad.Job("default", "big").JobModifyIndex; after != before {
		t.Errorf("an unchanged reason re-registered the job: index %d -> %d", before, after)
	}

	// A second V100 node joins: the data-parallel group fits and is pinned on two nodes.
	h.Nomad.AddNode("node-v100-01", "v100b", "Tesla V100-SXM2-16GB", 8)
	h.Round()
	nodes, _ := pinOf(t, h.Nomad.Job("default", "ddp"))
	if len(nodes) != 2 {
		t.Errorf("ddp pinned to %v, want two nodes", nodes)
	}
	if l := uiLine(h, "ddp"); strings.Contains(l, "cannot run") {
		t.Errorf("ddp ui line still says it cannot run: %q", l)
	}
	if e := queueByKey(h)["default/big/train"]; !e.Infeasible {
		t.Errorf("big after the join = %+v", e)
	}
	if m := scrape(t, h); !strings.Contains(m, "hetgpu_infeasible_groups 1\n") {
		t.Error("metric does not show the one infeasible group left")
	}
}

// A group ruled out by a node constraint becomes feasible when a matching node joins, even a
// draining one; it then waits for capacity and its "cannot run" line is removed.
func TestInfeasibleLineRemovedWhenANodeJoins(t *testing.T) {
	h := servicetest.NewHarness(t, nil)
	// a and b take the A100s and V100s (the test placer ignores constraints: it must find no
	// room for win once win is feasible).
	h.Nomad.Register(servicetest.HeldJob("a", 8, 1, nil))
	h.Nomad.Register(servicetest.HeldJob("b", 8, 1, nil))
	job := servicetest.HeldJob("win", 8, 1, nil)
	job.TaskGroups[0].Constraints = append(job.TaskGroups[0].Constraints, api.NewConstraint("${attr.kernel.name}", "=", "windows"))
	h.Nomad.Register(job)
	h.Round()
	const reason = "no ready node satisfies the constraint `${attr.kernel.name} = windows`"
	if e := queueByKey(h)["default/win/train"]; !e.Infeasible || e.Reason != reason {
		t.Fatalf("queue entry = %+v", e)
	}
	if l := uiLine(h, "win"); !strings.Contains(l, "cannot run on this cluster: "+reason) {
		t.Fatalf("ui line = %q", l)
	}

	h.Nomad.AddNode("node-win-000", "win", "Tesla V100-SXM2-16GB", 8)
	h.Nomad.UpdateNode("node-win-000", "NodeDrain", func(n *api.Node) {
		n.Attributes["kernel.name"] = "windows"
		n.DrainStrategy = &api.DrainStrategy{}
		n.SchedulingEligibility = api.NodeSchedulingIneligible
	})
	h.Round()
	ex, err := h.Service.Explain("default", "win")
	if err != nil {
		t.Fatal(err)
	}
	g := ex.Groups[0]
	if g.Status != "waiting" || g.Infeasible || g.Wait != "capacity" ||
		g.Reason != "no node open to new work satisfies the constraint `${attr.kernel.name} = windows`" ||
		!strings.Contains(g.Summary, "waits for capacity: no node open to new work") {
		t.Errorf("explanation after the join = %+v", g)
	}
	if l := uiLine(h, "win"); !strings.Contains(l, "held by hetgpu: rank 1 of 1, waiting for 8 GPUs") {
		t.Errorf("ui line = %q; want the infeasible line replaced by the held one", l)
	}
	if m := scrape(t, h); !strings.Contains(m, "hetgpu_infeasible_groups 0\n") || !strings.Contains(m, `hetgpu_waiting_groups{wait="capacity"} 1`+"\n") {
		t.Errorf("metrics after the join:\n%s", m)
	}
}

// Groups with malformed annotations count as invalid waits and say so in their explanation.
func TestInvalidAnnotationsAreAWait(t *testing.T) {
	h := servicetest.NewHarness(t, nil)
	h.Nomad.Register(servicetest.HeldJob("bad", 1, 1, map[string]string{"hetgpu.batch_size": "sixty"}))
	h.Round()
	ex, err := h.Service.Explain("default", "bad")
	if err != nil {
		t.Fatal(err)
	}
	if g := ex.Groups[0]; g.Status != "invalid" || g.Wait != "invalid" || !strings.Contains(g.Reason, "hetgpu.batch_size") {
		t.Errorf("explanation = %+v", g)
	}
	if m := scrape(t, h); !strings.Contains(m, `hetgpu_waiting_groups{wait="invalid"} 1`+"\n") {
		t.Error("the invalid group is not counted as an invalid wait")
	}
}

// A group that waits for GPUs says when enough of a type it can use are expected free, from
// the runtime estimates of the jobs that hold them, and which types it runs best on; the
// job's note is written once for the kind of wait, not again as the estimate moves.
func TestWaitingGroupSaysWhenGPUsFree(t *testing.T) {
	h := servicetest.NewHarness(t, nil)
	// FIFO and first fit on the fastest type: a takes the A100s, b the V100s; c (8 GPUs: the
	// T4 node has 4) waits for one of them to end. Runtimes are on the reference V100: a's 70
	// minutes are 30 on the A100s, 7/3 as fast in the test table.
	for _, j := range [][2]string{{"a", "70m"}, {"b", "3h"}} {
		h.Nomad.Register(servicetest.HeldJob(j[0], 8, 1, map[string]string{"hetgpu.enable": "true", "hetgpu.model": "resnet/ResNet-50",
			"hetgpu.preemptible": "true", "hetgpu.runtime": j[1]}))
		h.Round()
	}
	if nodes, _ := pinOf(t, h.Nomad.Job("default", "a")); len(nodes) != 1 || nodes[0] != "node-a100-00" {
		t.Fatalf("a pinned to %v, want the A100 node", nodes)
	}
	h.Nomad.Register(servicetest.HeldJob("c", 8, 1, nil))
	h.Round()
	e := queueByKey(h)["default/c/train"]
	if e.Wait != "capacity" || e.FreeInS <= 25*60 || e.FreeInS > 30*60 || strings.Join(e.PreferredTypes, ",") != "a100" {
		t.Fatalf("queue entry = %+v; want capacity, free in 30 min (a's estimate), A100 preferred", e)
	}
	const want = "held by hetgpu: rank 1 of 1, waiting for 8 GPUs of one type (nvidia/gpu, A100 preferred), next free in about 30 min (estimate); the cluster has such GPUs, none free now"
	if l := uiLine(h, "c"); !strings.HasPrefix(l, "- group `train`: "+want) {
		t.Fatalf("ui line = %q, want %q", l, want)
	}
	// a has run 20 minutes (50 of its 70 on the V100 left: 21 on the A100s), and one more
	// group is ranked: the estimate and the rank move, the note stays as written (each write
	// is a job version).
	before := *h.Nomad.Job("default", "c").Version
	h.Nomad.SetAllocStatus(h.Nomad.Allocs("default", "a")[0].ID, api.AllocClientStatusRunning, time.Now().Add(-20*time.Minute), time.Time{})
	h.Nomad.Register(servicetest.HeldJob("d", 8, 1, nil))
	h.Round()
	if e := queueByKey(h)["default/c/train"]; e.Rank != 1 || e.FreeInS < 21*60 || e.FreeInS > 22*60 {
		t.Errorf("queue entry = %+v; want free in 21 min", e)
	}
	if after := *h.Nomad.Job("default", "c").Version; after != before {
		t.Errorf("the note was written again (version %d -> %d): %q", before, after, uiLine(h, "c"))
	}
}
