package e2e

import (
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

// TestNomadChildrenOnRealAgent: what a real agent lets hetgpu do with the children of
// parameterized and periodic jobs, and what hetgpu does with them.
//   - Nomad refuses any update of a dispatched child (the HTTP API ignores Dispatched on a
//     register): hetgpu never pins it, reports it in /v1/queue's invalid list with the reason,
//     and writes nothing to it or to its parameterized parent.
//   - A periodic child can be re-registered, but the register drops its ParentID. hetgpu pins
//     it (tagging the pinned version in the register: Nomad's tag endpoint refuses IDs with a
//     "/"), it runs once and is learned once; the parent is never written.
func TestNomadChildrenOnRealAgent(t *testing.T) {
	e := newFaultEnv(t, "dispatched and periodic children end to end", []clusterClient{{Name: "v100", Fake: []string{"4x V100"}}}, "")
	c, bins := e.cluster, e.bins
	e.startSidecar(t)

	param := toyJob(t, c.API, bins, "param", 30, "100ms")
	param.ParameterizedJob = &api.ParameterizedJobConfig{MetaOptional: []string{"run"}}
	_, _, err := c.API.Jobs().Register(param, nil)
	must(t, err)
	var children []string
	start := time.Now()
	for i := range 3 {
		resp, _, err := c.API.Jobs().Dispatch("param", map[string]string{"run": fmt.Sprint(i)}, nil, "", &api.WriteOptions{IdempotencyToken: fmt.Sprintf("tok-%d", i)})
		must(t, err)
		children = append(children, resp.DispatchedJobID)
	}
	// Nomad's own answer to a re-registration of a dispatched child, as hetgpu would send it.
	cj, _, err := c.API.Jobs().Info(children[0], nil)
	must(t, err)
	cj.Constraints = nil
	_, _, err = c.API.Jobs().RegisterOpts(cj, &api.RegisterOptions{EnforceIndex: true, ModifyIndex: *cj.JobModifyIndex}, nil)
	t.Logf("Nomad on re-registering dispatched child %s: %v", children[0], err)
	if err == nil || !(strings.Contains(err.Error(), "read-only") || strings.Contains(err.Error(), "parameterized")) {
		t.Fatalf("Nomad accepted an update of a dispatched child (err %v): hetgpu could pin it", err)
	}
	for _, id := range children {
		waitFor(t, 30*time.Second, id+" in the queue's invalid list", func() bool {
			var q struct {
				Invalid []struct {
					JobKey string `json:"job_key"`
					Error  string `json:"error"`
				} `json:"invalid"`
			}
			if scGet(e.sidecarURL+"/v1/queue", &q) != nil {
				return false
			}
			for _, inv := range q.Invalid {
				if strings.HasPrefix(inv.JobKey, "default/"+id+"/") && strings.Contains(inv.Error, "dispatched") {
					return true
				}
			}
			return false
		})
	}
	t.Logf("dispatch -> reported undecidable in /v1/queue: %s for the three children", time.Since(start).Round(10*time.Millisecond))
	time.Sleep(3 * time.Second) // a few more rounds
	for _, id := range append([]string{"param"}, children...) {
		j, _, err := c.API.Jobs().Info(id, nil)
		must(t, err)
		if *j.Version != 0 {
			t.Errorf("%s: version %d; hetgpu wrote to it", id, *j.Version)
		}
		if id != "param" && (deref(j.ParentID) != "param" || !j.Dispatched) {
			t.Errorf("%s: ParentID %q dispatched %v; want its link to param", id, deref(j.ParentID), j.Dispatched)
		}
	}

	// A periodic job with prohibit_overlap and the hold: every launch is a held child.
	per := toyJob(t, c.API, bins, "nightly", 60, "100ms")
	per.Periodic = &api.PeriodicConfig{Spec: ptrTo("0 0 1 1 *"), SpecType: ptrTo("cron"), ProhibitOverlap: ptrTo(true)}
	_, _, err = c.API.Jobs().Register(per, nil)
	must(t, err)
	launched := time.Now()
	_, _, err = c.API.Jobs().PeriodicForce("nightly", nil)
	must(t, err)
	var child string
	waitFor(t, 10*time.Second, "the periodic child", func() bool {
		js, _, err := c.API.Jobs().PrefixList("nightly/periodic-")
		if err != nil || len(js) == 0 {
			return false
		}
		child = js[0].ID
		return true
	})
	scCheckPinned(t, c.API, e.sidecarURL, child)
	t.Logf("periodic force -> child %s pinned in %s", child, time.Since(launched).Round(10*time.Millisecond))
	versions, _, _, err := c.API.Jobs().Versions(child, false, nil)
	must(t, err)
	pinTags := 0
	for _, v := range versions {
		if v.VersionTag != nil && strings.HasPrefix(v.VersionTag.Name, "hetgpu-pin-") {
			pinTags++
		}
		t.Logf("child version %d: ParentID %q tag %v", *v.Version, deref(v.ParentID), v.VersionTag)
	}
	if pinTags != 1 {
		t.Errorf("the pinned child carries %d hetgpu-pin tags, want 1", pinTags)
	}
	waitDead(t, c.API, child, 2*time.Minute)
	waitFor(t, 60*time.Second, "the child's run learned", func() bool { return finishedRuns(t, e.sidecarURL, url.QueryEscape(child)) >= 1 })
	if n := finishedRuns(t, e.sidecarURL, url.QueryEscape(child)); n != 1 {
		t.Errorf("the child's run was learned %d times, want once", n)
	}
	stubs, _, err := c.API.Jobs().Allocations(child, true, nil)
	must(t, err)
	if len(stubs) != 1 {
		t.Errorf("the child ran %d allocations, want 1", len(stubs))
	}
	pj, _, err := c.API.Jobs().Info("nightly", nil)
	must(t, err)
	if *pj.Version != 0 {
		t.Errorf("the periodic parent is at version %d; hetgpu must never write it", *pj.Version)
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
	var q struct {
		Jobs []struct {
			JobID   string  `json:"job_id"`
			FreeInS float64 `json:"free_in_s"`
		} `json:"jobs"`
	}
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
