package e2e

import (
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

// TestDispatchedChildrenPinned: three children dispatched from a held parameterized job
// are each pinned, run once and are learned once; the parent is never written. The pin goes
// through the servers' RPC (Nomad's HTTP API refuses any update of a dispatched job), so every
// link Nomad keeps between a child and its parent survives it: ParentID, Dispatched, the
// dispatch meta, the idempotency token (a dispatch repeated with it answers the same child)
// and the parent's children summary. A child with a payload cannot be registered again by
// anyone (Nomad refuses any register carrying one): it is reported undecidable, with why.
func TestDispatchedChildrenPinned(t *testing.T) {
	e := newFaultEnv(t, "dispatched children end to end", []clusterClient{{Name: "v100", Fake: []string{"4x V100"}}}, "")
	c, bins := e.cluster, e.bins
	e.startSidecar(t)

	param := toyJob(t, c.API, bins, "param", 30, "100ms")
	param.ParameterizedJob = &api.ParameterizedJobConfig{MetaOptional: []string{"run"}, Payload: "optional"}
	_, _, err := c.API.Jobs().Register(param, nil)
	must(t, err)
	var children []string
	start := time.Now()
	for i := range 3 {
		resp, _, err := c.API.Jobs().Dispatch("param", map[string]string{"run": fmt.Sprint(i)}, nil, "", &api.WriteOptions{IdempotencyToken: fmt.Sprintf("tok-%d", i)})
		must(t, err)
		children = append(children, resp.DispatchedJobID)
	}
	withPayload, _, err := c.API.Jobs().Dispatch("param", map[string]string{"run": "p"}, []byte("inputs"), "", nil)
	must(t, err)
	for _, id := range children {
		scCheckPinned(t, c.API, e.sidecarURL, id)
	}
	t.Logf("dispatch -> three children pinned and placed in %s", time.Since(start).Round(10*time.Millisecond))
	for i, id := range children {
		waitDead(t, c.API, id, 2*time.Minute)
		j, _, err := c.API.Jobs().Info(id, nil)
		must(t, err)
		if deref(j.ParentID) != "param" || !j.Dispatched || j.Meta["run"] != fmt.Sprint(i) || deref(j.DispatchIdempotencyToken) != fmt.Sprintf("tok-%d", i) {
			t.Errorf("%s after the pin: ParentID %q dispatched %v meta run %q token %q; want its link to param kept",
				id, deref(j.ParentID), j.Dispatched, j.Meta["run"], deref(j.DispatchIdempotencyToken))
		}
		if *j.Version == 0 {
			t.Errorf("%s: still at version 0; hetgpu never pinned it", id)
		}
		if tags := taggedVersions(t, c.API, id, "hetgpu-pin-"); tags != 1 {
			t.Errorf("%s carries %d hetgpu-pin tags, want 1", id, tags)
		}
		versions, _, _, err := c.API.Jobs().Versions(id, false, nil)
		must(t, err)
		checkLinkedPin(t, versions, id, ".Payload")
		stubs, _, err := c.API.Jobs().Allocations(id, true, nil)
		must(t, err)
		if len(stubs) != 1 {
			t.Errorf("%s ran %d allocations, want 1", id, len(stubs))
		}
		waitFor(t, 60*time.Second, id+"'s run learned", func() bool { return finishedRuns(t, e.sidecarURL, url.QueryEscape(id)) >= 1 })
		if n := finishedRuns(t, e.sidecarURL, url.QueryEscape(id)); n != 1 {
			t.Errorf("%s's run was learned %d times, want once", id, n)
		}
	}
	pid := withPayload.DispatchedJobID
	waitFor(t, 30*time.Second, pid+" (with a payload) in the queue's invalid list", func() bool {
		var q scQueue
		if scGet(e.sidecarURL+"/v1/queue", &q) != nil {
			return false
		}
		for _, inv := range q.Invalid {
			if strings.HasPrefix(inv.JobKey, "default/"+pid+"/") && strings.Contains(inv.Error, "payload") {
				return true
			}
		}
		return false
	})
	if j, _, err := c.API.Jobs().Info(pid, nil); err != nil || *j.Version != 0 {
		t.Errorf("the child with a payload: %v; want it untouched at version 0", err)
	}
	// Nomad's idempotency check finds the pinned child by its token.
	again, _, err := c.API.Jobs().Dispatch("param", map[string]string{"run": "0"}, nil, "", &api.WriteOptions{IdempotencyToken: "tok-0"})
	must(t, err)
	if again.DispatchedJobID != children[0] {
		t.Errorf("dispatch again with tok-0 gave %s, want the pinned child %s", again.DispatchedJobID, children[0])
	}
	pj, _, err := c.API.Jobs().Info("param", nil)
	must(t, err)
	if *pj.Version != 0 {
		t.Errorf("the parameterized parent is at version %d; hetgpu must never write it", *pj.Version)
	}
	sum, _, err := c.API.Jobs().Summary("param", nil)
	must(t, err)
	if sum.Children == nil || sum.Children.Dead != 3 || sum.Children.Pending != 1 {
		t.Errorf("the parent's children summary %+v, want 3 dead and the held one with a payload pending", sum.Children)
	}
	kids, _, err := c.API.Jobs().PrefixList("param/dispatch-")
	must(t, err)
	for _, k := range kids {
		if k.ParentID != "param" {
			t.Errorf("nomad job status param lists %s with ParentID %q", k.ID, k.ParentID)
		}
	}
}

// TestPeriodicOverlapKept: a periodic job with prohibit_overlap launches no child while its
// pinned child runs, as the same job without the hold does: the pin (through the servers'
// RPC) keeps the child's ParentID, by which Nomad's launcher finds it running.
func TestPeriodicOverlapKept(t *testing.T) {
	e := newFaultEnv(t, "periodic children end to end", []clusterClient{{Name: "v100", Fake: []string{"4x V100"}}}, "")
	c, bins := e.cluster, e.bins
	e.startSidecar(t)

	// Every 2 s (Nomad's cron takes a seconds field); each child runs about 15 s.
	mk := func(id string, held bool) {
		j := toyJob(t, c.API, bins, id, 150, "100ms")
		if !held {
			var keep []*api.Constraint
			for _, cs := range j.Constraints {
				if !scIsHold(cs) {
					keep = append(keep, cs)
				}
			}
			j.Constraints = keep
			for _, tg := range j.TaskGroups {
				keep = nil
				for _, cs := range tg.Constraints {
					if !scIsHold(cs) {
						keep = append(keep, cs)
					}
				}
				tg.Constraints = keep
			}
		}
		j.Periodic = &api.PeriodicConfig{Spec: ptrTo("*/2 * * * * * *"), SpecType: ptrTo("cron"), ProhibitOverlap: ptrTo(true)}
		_, _, err := c.API.Jobs().Register(j, nil)
		must(t, err)
	}
	mk("cron-held", true)
	mk("cron-plain", false)
	first := func(parent string) string {
		var id string
		waitFor(t, 30*time.Second, "the first child of "+parent, func() bool {
			js, _, err := c.API.Jobs().PrefixList(parent + "/periodic-")
			if err != nil || len(js) == 0 {
				return false
			}
			id = js[0].ID
			return true
		})
		return id
	}
	held, plain := first("cron-held"), first("cron-plain")
	scCheckPinned(t, c.API, e.sidecarURL, held)
	// Count each parent's children while the held child runs (the launcher fires every 2 s).
	count := func(parent string) int {
		js, _, err := c.API.Jobs().PrefixList(parent + "/periodic-")
		must(t, err)
		return len(js)
	}
	maxHeld, maxPlain, polls := 0, 0, 0
	for {
		j, _, err := c.API.Jobs().Info(held, nil)
		must(t, err)
		if deref(j.Status) == "dead" {
			break
		}
		maxHeld, maxPlain, polls = max(maxHeld, count("cron-held")), max(maxPlain, count("cron-plain")), polls+1
		if polls > 240 {
			t.Fatalf("the pinned child %s did not finish in 2 min: %s", held, jobState(c.API, held))
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Logf("children launched while the first (%s, %s) ran: with hetgpu %d, without %d (%d polls)", held, plain, maxHeld, maxPlain, polls)
	if polls < 10 {
		t.Fatalf("the pinned child %s finished after %d polls; the window proves nothing", held, polls)
	}
	if maxHeld != 1 || maxPlain != 1 {
		t.Errorf("children while the first ran: with hetgpu %d, without %d; want 1 and 1 (prohibit_overlap)", maxHeld, maxPlain)
	}
	j, _, err := c.API.Jobs().Info(held, nil)
	must(t, err)
	if deref(j.ParentID) != "cron-held" {
		t.Errorf("the pinned child %s has ParentID %q, want cron-held", held, deref(j.ParentID))
	}
	versions, _, _, err := c.API.Jobs().Versions(held, false, nil)
	must(t, err)
	checkLinkedPin(t, versions, held)
	for _, p := range []string{"cron-held", "cron-plain"} {
		pj, _, err := c.API.Jobs().Info(p, nil)
		must(t, err)
		if p == "cron-held" && *pj.Version != 0 {
			t.Errorf("the periodic parent is at version %d; hetgpu must never write it", *pj.Version)
		}
		_, _, err = c.API.Jobs().Deregister(p, true, nil)
		must(t, err)
	}
}

// TestWaitingJobSaysWhy: a job held for capacity says so in its ui description, where
// `nomad job status` and the Nomad UI show it: its rank and what it waits for, written when it
// is first ranked and again only when the kind of wait changes, at most wait_notes times,
// each version tagged hetgpu-wait-N; the user's own description stays.
func TestWaitingJobSaysWhy(t *testing.T) {
	e := newFaultEnv(t, "the waiting job's ui description end to end", []clusterClient{{Name: "v100", Fake: []string{"2x V100"}}}, "")
	c, bins := e.cluster, e.bins
	startSidecarNomad(t, c, bins, e.port, "  wait_notes = 2", `reconcile = "1s"`)
	submitToy(t, c.API, bins, "hog", 250, "100ms", nil)
	scCheckPinned(t, c.API, e.sidecarURL, "hog")
	start := time.Now()
	for _, id := range []string{"w1", "w2"} {
		job := toyJob(t, c.API, bins, id, 20, "100ms")
		job.UI = &api.JobUIConfig{Description: "the user's words about " + id}
		_, _, err := c.API.Jobs().Register(job, nil)
		must(t, err)
	}
	for _, id := range []string{"w1", "w2"} {
		var desc string
		waitFor(t, 30*time.Second, id+" says why it waits", func() bool {
			j, _, err := c.API.Jobs().Info(id, nil)
			if err != nil || j.UI == nil {
				return false
			}
			desc = j.UI.Description
			return strings.Contains(desc, "held by hetgpu: rank ") && strings.Contains(desc, "waiting for 2 GPUs") &&
				strings.Contains(desc, "[why]("+e.sidecarURL+"/v1/jobs/default/"+id+"/explain")
		}, func() string { return desc })
		t.Logf("%s: submit -> ui note %s:\n%s", id, time.Since(start).Round(10*time.Millisecond), desc)
		if !strings.Contains(desc, "the user's words about "+id) {
			t.Errorf("%s: the user's description is gone: %q", id, desc)
		}
	}
	time.Sleep(15 * time.Second) // rounds go by while both wait; the ranks may move
	for _, id := range []string{"w1", "w2"} {
		j, _, err := c.API.Jobs().Info(id, nil)
		must(t, err)
		if !scHeld(j) {
			continue // pinned meanwhile
		}
		versions, _, _, err := c.API.Jobs().Versions(id, false, nil)
		must(t, err)
		notes := 0
		for _, v := range versions {
			if v.VersionTag != nil && strings.HasPrefix(v.VersionTag.Name, "hetgpu-wait-") {
				notes++
			}
		}
		t.Logf("%s after 15 s of waiting: %d versions, %d tagged hetgpu-wait", id, len(versions), notes)
		if notes < 1 || notes > 2 || len(versions) != notes+1 {
			t.Errorf("%s: %d versions, %d hetgpu-wait tags; want 1 or 2 notes (wait_notes = 2) and no other version", id, len(versions), notes)
		}
	}
}

// TestWaitingJobSaysWhenGPUsFree: a job waiting behind a job with a runtime estimate,
// preemptible or not, says when its GPUs are expected free, and the estimate going down as the
// holder runs writes no new version.
func TestWaitingJobSaysWhenGPUsFree(t *testing.T) {
	for _, preemptible := range []bool{true, false} {
		t.Run(fmt.Sprintf("preemptible=%v", preemptible), func(t *testing.T) { waitingSaysWhenFree(t, preemptible) })
	}
}

func waitingSaysWhenFree(t *testing.T, preemptible bool) {
	e := newFaultEnv(t, "the waiting job's next-free estimate end to end", []clusterClient{{Name: "v100", Fake: []string{"2x V100"}}}, "")
	c, bins := e.cluster, e.bins
	startSidecarNomad(t, c, bins, e.port, "  wait_notes = 2", `reconcile = "1s"`)
	submitToy(t, c.API, bins, "holder", 900, "100ms", map[string]string{"hetgpu.runtime": "40m", "hetgpu.preemptible": fmt.Sprint(preemptible)})
	scCheckPinned(t, c.API, e.sidecarURL, "holder")
	start := time.Now()
	// Longer than what the holder has left, so it ranks behind and preempts nothing.
	submitToy(t, c.API, bins, "next", 20, "100ms", map[string]string{"hetgpu.runtime": "3h"})
	var desc string
	waitFor(t, 30*time.Second, "next says when GPUs free up", func() bool {
		j, _, err := c.API.Jobs().Info("next", nil)
		if err != nil || j.UI == nil {
			return false
		}
		desc = j.UI.Description
		return strings.Contains(desc, "held by hetgpu: rank 1 of 1, waiting for 2 GPUs of one type") &&
			strings.Contains(desc, ", next free in about ")
	}, func() string { return desc })
	t.Logf("submit -> ui note %s:\n%s", time.Since(start).Round(10*time.Millisecond), desc)
	// The holder declared 40 min: the estimate is its expected time left as the sidecar reads a
	// hetgpu.runtime (ranker.estimate_error 0.5: the log-normal's mean, 40 x e^(0.5^2/2) = 45 min).
	if !strings.Contains(desc, "next free in about 40 min (estimate)") && !strings.Contains(desc, "next free in about 45 min (estimate)") {
		t.Errorf("note %q: want the holder's 40 min estimate read as 40 to 45 min", desc)
	}
	time.Sleep(10 * time.Second)
	j, _, err := c.API.Jobs().Info("next", nil)
	must(t, err)
	if scHeld(j) {
		versions, _, _, err := c.API.Jobs().Versions("next", false, nil)
		must(t, err)
		if len(versions) != 2 {
			t.Errorf("after 10 s of waiting: %d versions, want 2 (the job and one note)", len(versions))
		}
	}
	var q scQueue
	must(t, scGet(e.sidecarURL+"/v1/queue", &q))
	seen := false
	for _, qj := range q.Jobs {
		if qj.JobID == "next" {
			seen = true
			t.Logf("/v1/queue free_in_s = %.0f", qj.FreeInS)
			if !(qj.FreeInS > 35*60 && qj.FreeInS <= 46*60) {
				t.Errorf("/v1/queue free_in_s = %.0f, want 35 to 46 min", qj.FreeInS)
			}
		}
	}
	if !seen && scHeld(j) {
		t.Errorf("/v1/queue lists no entry for the waiting job next")
	}
}

// checkLinkedPin compares a child's version as dispatched or launched with its latest
// (pinned, after any waiting note) field by field, as TestReregisterRoundTrip does for a plain
// job: only what hetgpu's writes mean to change (a ui block where the job had none included)
// and what Nomad changes on any register may differ, and the fields named in also.
func checkLinkedPin(t *testing.T, versions []*api.Job, id string, also ...string) {
	t.Helper()
	var before, after *api.Job
	for _, v := range versions {
		if *v.Version == 0 {
			before = v
		}
		if after == nil || *v.Version > *after.Version {
			after = v
		}
	}
	if before == nil || after == before {
		t.Errorf("%s: want version 0 and a later (pinned) one, have %d versions", id, len(versions))
		return
	}
	for _, v := range versions {
		if v.VersionTag != nil && strings.HasPrefix(v.VersionTag.Name, "hetgpu-pin-") && v.SubmitTime != nil && before.SubmitTime != nil {
			t.Logf("%s: launched -> pinned version registered in %s", id, time.Duration(*v.SubmitTime-*before.SubmitTime).Round(time.Millisecond))
		}
	}
	for _, d := range jobDiff(t, before, after) {
		path, _, _ := strings.Cut(d, ":")
		if !expectedPinChange(d) && path != ".UI" && !slices.Contains(also, path) {
			t.Errorf("%s: changed by the pin: %s", id, d)
		}
	}
}
