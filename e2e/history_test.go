package e2e

// Estimate-free ranking on a real agent: jobs that declare no hetgpu.runtime are read by the
// runtime history of the finished runs of similar jobs in their namespace, and the sidecar
// keeps that history across a restart (state file) and a fail-over (shared state, ha_test.go).

import (
	"encoding/json"
	"math"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

// runtimeHistoryStats is /v1/health's ranker.history.
type runtimeHistoryStats struct {
	Runs       int     `json:"runs"`
	MedianS    float64 `json:"median_s"`
	Sigma      float64 `json:"sigma"`
	Observed   int     `json:"observed"`
	Skipped    int     `json:"skipped"`
	Namespaces int     `json:"namespaces"`
}

func runtimeHistory(t *testing.T, sidecarURL string) runtimeHistoryStats {
	t.Helper()
	return rankerHealth[runtimeHistoryStats](t, sidecarURL, "history")
}

// runtimeExplained is a group's explanation with its runtime reading.
type runtimeExplained struct {
	Status  string `json:"status"`
	Wait    string `json:"wait"`
	Summary string `json:"summary"`
	Runtime *struct {
		DeclaredS  float64 `json:"declared_s"`
		LeftS      float64 `json:"left_s"`
		Source     string  `json:"source"`
		Level      string  `json:"level"`
		Runs       int     `json:"runs"`
		Confidence float64 `json:"confidence"`
	} `json:"runtime"`
	raw json.RawMessage
}

// explainRuntime is the one group of job ns/id as GET /v1/jobs/{ns}/{id}/explain has it.
func explainRuntime(sidecarURL, ns, id string) (runtimeExplained, error) {
	var ex struct {
		Groups []json.RawMessage `json:"groups"`
	}
	if err := scGet(sidecarURL+"/v1/jobs/"+ns+"/"+id+"/explain", &ex); err != nil {
		return runtimeExplained{}, err
	}
	if len(ex.Groups) != 1 {
		return runtimeExplained{}, nil
	}
	var g runtimeExplained
	err := json.Unmarshal(ex.Groups[0], &g)
	var rt struct {
		Runtime json.RawMessage `json:"runtime"`
	}
	_ = json.Unmarshal(ex.Groups[0], &rt)
	g.raw = rt.Runtime
	return g, err
}

// TestEstimateFreeRankingFromHistory: two resnet jobs of namespace ml that declare neither
// hetgpu.runtime nor hetgpu.steps finish; the sidecar's runtime history learns their runtimes
// once it reports the runs itself (after its grace). They are then purged from Nomad, so that
// only the sidecar's own state can remember them. With the node's GPUs taken by a long job, a
// third such job waits: its explanation reads its runtime from the history (source "history",
// the 2 runs of namespace ml's jobs of its model, batch size and GPU count). The sidecar is
// SIGKILLed and restarted: the explanation reads the same, from the state file.
func TestEstimateFreeRankingFromHistory(t *testing.T) {
	e := newFaultEnv(t, "estimate-free ranking end to end", []clusterClient{{Name: "v100", Fake: []string{"2x V100"}}}, "")
	c, bins, sidecarURL := e.cluster, e.bins, e.sidecarURL
	const ns = "ml"
	_, err := c.API.Namespaces().Register(&api.Namespace{Name: ns, Description: "hetgpu runtime history e2e"}, nil)
	must(t, err)
	ml, err := api.NewClient(&api.Config{Address: c.HTTP, Namespace: ns})
	must(t, err)
	sidecar := e.startSidecar(t)
	start := time.Now()
	// submit registers the example as job id in ns, doing steps steps of 100 ms, without
	// hetgpu.runtime or hetgpu.steps.
	submit := func(id string, steps int) {
		job := toyJob(t, c.API, bins, id, steps, "100ms")
		delete(job.Meta, "hetgpu.runtime")
		delete(job.Meta, "hetgpu.steps")
		job.Namespace = ptrTo(ns)
		if _, _, err := ml.Jobs().Register(job, nil); err != nil {
			t.Fatalf("register %s: %v", id, err)
		}
	}
	done := []string{"hist-1", "hist-2"}
	for _, id := range done {
		submit(id, 50)
	}
	for _, id := range done {
		waitDead(t, ml, id, 2*time.Minute)
	}
	waitFor(t, time.Minute, "both runs in the runtime history", func() bool { return runtimeHistory(t, sidecarURL).Runs == 2 })
	learned := runtimeHistory(t, sidecarURL)
	t.Logf("runtime history after the two runs (%s in): %+v", time.Since(start).Round(time.Second), learned)
	if learned.Namespaces != 1 || learned.Skipped != 0 {
		t.Errorf("runtime history %+v, want the 2 runs of 1 namespace, none skipped", learned)
	}
	var allocs []*api.AllocationListStub
	for _, id := range done {
		as, _, err := ml.Jobs().Allocations(id, true, nil)
		must(t, err)
		allocs = append(allocs, as...)
		_, _, err = ml.Jobs().Deregister(id, true, nil)
		must(t, err)
	}
	must(t, c.API.System().GarbageCollect())
	waitFor(t, 30*time.Second, "the finished jobs and their allocations collected", func() bool {
		for _, id := range done {
			if _, _, err := ml.Jobs().Info(id, nil); err == nil {
				return false
			}
		}
		for _, a := range allocs {
			if _, _, err := ml.Allocations().Info(a.ID, nil); err == nil {
				return false
			}
		}
		return true
	})

	// Every GPU taken: the next job without an estimate waits and is read by the history.
	submit("hist-busy", 3000)
	runningOn(t, ml, "hist-busy", 90*time.Second)
	submit("hist-wait", 50)
	read := func(when string) runtimeExplained {
		t.Helper()
		var g runtimeExplained
		waitFor(t, 30*time.Second, "hist-wait's runtime read from the history ("+when+")", func() bool {
			var err error
			g, err = explainRuntime(sidecarURL, ns, "hist-wait")
			return err == nil && g.Runtime != nil && g.Runtime.Source == "history"
		}, func() string { return string(g.raw) + " " + g.Summary })
		r := g.Runtime
		const peers = "from 2 finished runs of namespace ml's resnet/ResNet-50 jobs (batch 64, 2 GPUs)"
		if g.Status != "waiting" || r.Runs != 2 || r.Level != "model" || r.DeclaredS != 0 || !(r.LeftS > 0) ||
			math.Abs(r.Confidence-2.0/7) > 1e-9 || !strings.Contains(g.Summary, "no hetgpu.runtime; read as ") ||
			!strings.Contains(g.Summary, peers) {
			t.Errorf("%s: hist-wait %s (wait %s): runtime %s, summary %q; want its namespace's 2 runs at level model, %q",
				when, g.Status, g.Wait, g.raw, g.Summary, peers)
		}
		t.Logf("%s: hist-wait explain runtime %s; summary %q", when, g.raw, g.Summary)
		return g
	}
	before := read("before the restart")

	// A restart: the runs are gone from Nomad, so only the state file has them.
	sidecar.Stop(syscall.SIGKILL)
	sidecar.Start()
	waitFor(t, time.Minute, "the restarted sidecar's health", func() bool {
		var h struct{ Status string }
		return scGet(sidecarURL+"/v1/health", &h) == nil && h.Status == "ok"
	})
	after := read("after the restart")
	if math.Abs(after.Runtime.LeftS-before.Runtime.LeftS) > 1e-6 {
		t.Errorf("after the restart hist-wait reads %v s left, before %v s", after.Runtime.LeftS, before.Runtime.LeftS)
	}
	if h := runtimeHistory(t, sidecarURL); h.Runs != 2 || h.MedianS != learned.MedianS || h.Sigma != learned.Sigma {
		t.Errorf("restored runtime history %+v, want %+v", h, learned)
	}
	if sidecar.Exited() {
		t.Error("the sidecar exited on its own")
	}
}
