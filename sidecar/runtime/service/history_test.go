package service_test

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/hetgpu/hetgpu/model/cluster"
	"github.com/hetgpu/hetgpu/model/history"
	"github.com/hetgpu/hetgpu/sidecar/runtime/service/servicetest"
	"github.com/hetgpu/hetgpu/sidecar/runtime/store"
)

// occupyAll pins a job to every GPU of the harness's nodes (fastest type first).
func occupyAll(t *testing.T, h *servicetest.Harness) {
	t.Helper()
	for _, b := range []struct {
		id   string
		gpus uint64
	}{{"busy-a100", 8}, {"busy-v100", 8}, {"busy-t4", 4}} {
		h.Nomad.Register(servicetest.HeldJob(b.id, b.gpus, 1, nil))
		h.Round()
		if as := h.Nomad.Allocs("default", b.id); len(as) != 1 || as[0].AllocatedResources == nil {
			t.Fatalf("%s not placed", b.id)
		}
	}
}

// pendingJob is the last snapshot's pending job id.
func pendingJob(t *testing.T, h *servicetest.Harness, id string) cluster.Job {
	t.Helper()
	for _, j := range h.Service.LastSnapshot().Pending {
		if j.ID == id {
			return j
		}
	}
	t.Fatalf("%s is not pending", id)
	return cluster.Job{}
}

// TestHistoryFromFinishedRuns: with a runtime history (ranker.history), every finished run
// teaches it the run's whole runtime on the reference type: two resnet jobs that declare no
// hetgpu.runtime run 100 s on an A100 (7/3 times as fast as the reference V100 in the test
// table), 233 s each on the reference type. A third such job, waiting while every GPU is
// busy, is then read by those two runs (level "model": its namespace's jobs of the same model,
// batch size and GPU count); explain, health and metrics say so. A restart restores the window
// from the store, and the backend's second report of the two runs does not count them again.
func TestHistoryFromFinishedRuns(t *testing.T) {
	h := servicetest.NewHarness(t, nil, servicetest.WithHistory)
	for _, id := range []string{"r1", "r2"} {
		h.Nomad.Register(servicetest.HeldJob(id, 1, 1, nil))
	}
	h.Round()
	h.EndRuns(api.AllocClientStatusComplete, 100*time.Second, "r1", "r2")

	took := 100 * 700.0 / 300
	want, err := history.New(history.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		want.Observe(history.Run{Key: fmt.Sprint(i), Job: history.Job{Namespace: "default", Family: fmt.Sprintf("r%d", i+1),
			Model: "resnet/ResNet-50", Batch: 64, GPUs: 1}, RuntimeS: took})
	}
	check := func(when string, observed, skipped int) {
		t.Helper()
		st := h.History.Stats()
		w := want.Stats()
		if st.Runs != 2 || st.Namespaces != 1 || st.Observed != observed || st.Skipped != skipped ||
			math.Abs(st.MedianS-w.MedianS) > 1e-6 || math.Abs(st.Sigma-w.Sigma) > 1e-9 {
			t.Errorf("%s: history %+v, want 2 runs of 1 namespace, %d observed, %d skipped, median %.3f s, sigma %.4f",
				when, st, observed, skipped, w.MedianS, w.Sigma)
		}
		hl := h.Service.Health()
		if hl.Ranker == nil || hl.Ranker.History == nil || *hl.Ranker.History != st {
			t.Errorf("%s: health ranker %+v, want the history %+v", when, hl.Ranker, st)
		}
		if body := scrape(t, h); !strings.Contains(body, `hetgpu_runtime_history{param="runs"} 2`) ||
			!strings.Contains(body, fmt.Sprintf(`hetgpu_runtime_history{param="skipped"} %d`, skipped)) ||
			!strings.Contains(body, fmt.Sprintf(`hetgpu_runtime_history{param="median_s"} %v`, st.MedianS)) {
			t.Errorf("%s: metrics lack the runtime history:\n%s", when, body)
		}
		var saved []history.Run
		if err := json.Unmarshal([]byte(h.Store.Meta(store.MetaRuntimeHistory)), &saved); err != nil || len(saved) != 2 ||
			math.Abs(saved[0].RuntimeS-took) > 1e-6 || saved[0].Family != "r1" || saved[0].Model != "resnet/ResNet-50" || saved[0].GPUs != 1 {
			t.Errorf("%s: saved window %+v (%v), want the two runs of %.1f s", when, saved, err, took)
		}
	}
	check("after two runs", 2, 0)

	// Every GPU busy: the third job waits, read by the two runs.
	occupyAll(t, h)
	h.Nomad.Register(servicetest.HeldJob("r3", 1, 1, nil))
	h.Round()
	explained := func(when string) {
		t.Helper()
		j := pendingJob(t, h, "r3")
		exp := want.Estimate(history.JobOf(&j), 0)
		near := func(a, b float64) bool { return math.Abs(a-b) < 1e-3 } // the run's time in ns is rounded
		if e := j.Hetgpu.Est; !near(j.Hetgpu.EstRuntime.Seconds(), exp.Rank.Seconds()) || !near(e.Left.Seconds(), exp.Left.Seconds()) ||
			e.Source != cluster.EstHistory || e.Level != "model" || e.Runs != 2 {
			t.Errorf("%s: r3 ranked as %v %+v, want %v (%v left) from the history's 2 runs at level model", when, j.Hetgpu.EstRuntime, e, exp.Rank, exp.Left)
		}
		ex, err := h.Service.Explain("default", "r3")
		if err != nil || len(ex.Groups) != 1 {
			t.Fatalf("%s: explain r3: %+v, %v", when, ex, err)
		}
		g := ex.Groups[0]
		if r := g.Runtime; r == nil || r.Source != "history" || r.Level != "model" || r.Runs != 2 || r.DeclaredS != 0 ||
			!near(r.LeftS, exp.Left.Seconds()) || !near(r.RankS, exp.Rank.Seconds()) || math.Abs(r.Confidence-2.0/7) > 1e-9 || r.Calibrated {
			t.Errorf("%s: explained runtime %+v, want source history, level model, 2 runs, %v left, confidence 2/7", when, g.Runtime, exp.Left)
		}
		if w := fmt.Sprintf("no hetgpu.runtime; read as %v left from 2 finished runs of namespace default's resnet/ResNet-50 jobs (batch 64, 1 GPUs)",
			exp.Left.Round(time.Second)); !strings.Contains(g.Summary, w) {
			t.Errorf("%s: explain summary %q lacks %q", when, g.Summary, w)
		}
	}
	explained("before the restart")

	// Restart: the window comes back from the store; the backend reports r1 and r2 again (its
	// memory of them is gone) and they are not counted twice.
	h.Stop()
	h.Start()
	if st := h.History.Stats(); st.Runs != 2 || st.Observed != 0 {
		t.Errorf("restored history %+v, want the 2 saved runs", st)
	}
	h.Round()
	h.Round()
	check("after the runs were reported again", 2, 2)
	explained("after the restart")
}

// TestHistoryParentFamily: a dispatched child's run teaches its parent's family, so the next
// child of the same parent is read by its siblings' runs (level "job"), and its explanation
// names the parent. hetgpu.steps, when declared, is preferred over the history.
func TestHistoryParentFamily(t *testing.T) {
	h := servicetest.NewHarness(t, nil, servicetest.WithHistory)
	child := func(id string, meta map[string]string) *api.Job {
		j := servicetest.HeldJob(id, 1, 1, meta)
		j.ParentID = ptr("nightly")
		return j
	}
	h.Nomad.Register(child("nightly-1", nil))
	h.Round()
	h.EndRuns(api.AllocClientStatusComplete, 10*time.Minute, "nightly-1")
	if st := h.History.Stats(); st.Runs != 1 {
		t.Fatalf("history %+v, want the child's run", st)
	}
	if rs := h.History.Runs(); rs[0].Family != "nightly" {
		t.Errorf("the child's run %+v, want it in family nightly", rs[0])
	}
	occupyAll(t, h)
	// Another child on 2 GPUs: no run of its shape, but its parent's.
	h.Nomad.Register(child("nightly-2", map[string]string{"hetgpu.enable": "true", "hetgpu.model": "BERT"}))
	steps := map[string]string{"hetgpu.enable": "true", "hetgpu.model": "resnet/ResNet-50", "hetgpu.steps": "600000"}
	h.Nomad.Register(child("nightly-steps", steps))
	h.Round()
	j := pendingJob(t, h, "nightly-2")
	if j.ParentID != "nightly" || j.Hetgpu.Est.Source != cluster.EstHistory || j.Hetgpu.Est.Level != "job" || j.Hetgpu.Est.Runs != 1 {
		t.Errorf("nightly-2: parent %q, estimate %+v; want read by its parent's 1 run", j.ParentID, j.Hetgpu.Est)
	}
	ex, err := h.Service.Explain("default", "nightly-2")
	if err != nil || len(ex.Groups) != 1 || ex.Groups[0].Runtime == nil {
		t.Fatalf("explain nightly-2: %+v, %v", ex, err)
	}
	if w := "from 1 finished runs of job nightly (namespace default), the parent of this one"; !strings.Contains(ex.Groups[0].Summary, w) {
		t.Errorf("summary %q lacks %q", ex.Groups[0].Summary, w)
	}
	// 600000 steps at the reference V100's 300 steps/s of the test table: 2000 s, the
	// log-normal mean with the steps' spread.
	js := pendingJob(t, h, "nightly-steps")
	if js.Hetgpu.Steps != 600000 || js.Hetgpu.Est.Source != cluster.EstSteps ||
		math.Abs(js.Hetgpu.EstRuntime.Seconds()-2000*math.Exp(0.25*0.25/2)) > 0.01 {
		t.Errorf("nightly-steps: steps %v, read as %v %+v; want 2000 s from hetgpu.steps", js.Hetgpu.Steps, js.Hetgpu.EstRuntime, js.Hetgpu.Est)
	}
	ex, err = h.Service.Explain("default", "nightly-steps")
	w := fmt.Sprintf("no hetgpu.runtime; read as %v left from hetgpu.steps = 600000 at the predicted speed", js.Hetgpu.EstRuntime.Round(time.Second))
	if err != nil || len(ex.Groups) != 1 || ex.Groups[0].Runtime == nil || ex.Groups[0].Runtime.Source != "steps" || ex.Groups[0].Runtime.Steps != 600000 ||
		!strings.Contains(ex.Groups[0].Summary, w) {
		t.Errorf("explain nightly-steps: %+v, %v", ex, err)
	}
}

// A saved window that cannot be read is left out with a warning; the sidecar starts, with an
// empty history, and learns on.
func TestHistoryBadSavedWindow(t *testing.T) {
	for _, tc := range []struct{ name, raw string }{
		{"not JSON", "{runs"},
		{"a runtime out of bounds", `[{"key":"k","ns":"default","runtime_s":-5}]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := servicetest.NewHarness(t, nil)
			h.Stop()
			h.HistoryConfig = &history.Config{}
			st, err := store.Open(h.StatePath, store.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if err := st.PutMeta(store.MetaRuntimeHistory, tc.raw); err != nil {
				t.Fatal(err)
			}
			st.Close()
			h.Start()
			if s := h.History.Stats(); s.Runs != 0 {
				t.Fatalf("history %+v from a bad window, want empty", s)
			}
			h.Nomad.Register(servicetest.HeldJob("r1", 1, 1, nil))
			h.Round()
			h.EndRuns(api.AllocClientStatusComplete, time.Minute, "r1")
			if s := h.History.Stats(); s.Runs != 1 {
				t.Errorf("history %+v, want the new run learned", s)
			}
		})
	}
}

// Runs that did not finish their work teach the history nothing.
func TestHistoryOnlyFinishedRuns(t *testing.T) {
	h := servicetest.NewHarness(t, nil, servicetest.WithHistory)
	h.Nomad.Register(servicetest.HeldJob("failed", 1, 1, nil))
	h.Round()
	h.EndRuns(api.AllocClientStatusFailed, time.Minute, "failed")
	if s := h.History.Stats(); s.Runs != 0 || s.Observed != 0 {
		t.Errorf("history %+v after a failed run, want nothing learned", s)
	}
}

// Without any estimate (no hetgpu.runtime, no hetgpu.steps, no runtime history: a pipeline
// without the estimates step), a waiting group's explanation says so (source "none"); a group
// that can never run, which is not ranked, gets no reading.
func TestExplainNoEstimate(t *testing.T) {
	h := servicetest.NewHarness(t, nil)
	occupyAll(t, h)
	h.Nomad.Register(servicetest.HeldJob("plain", 1, 1, nil))
	h.Nomad.Register(servicetest.HeldJob("huge", 64, 1, nil))
	h.Round()
	ex, err := h.Service.Explain("default", "plain")
	if err != nil || len(ex.Groups) != 1 {
		t.Fatalf("explain plain: %+v, %v", ex, err)
	}
	g := ex.Groups[0]
	if r := g.Runtime; g.Status != "waiting" || r == nil || r.Source != "none" || r.LeftS != 0 || r.DeclaredS != 0 ||
		!strings.Contains(g.Summary, "no hetgpu.runtime, and no estimate of it from hetgpu.steps or the runtime history") {
		t.Errorf("plain %s: runtime %+v, summary %q; want source none", g.Status, g.Runtime, g.Summary)
	}
	ex, err = h.Service.Explain("default", "huge")
	if err != nil || len(ex.Groups) != 1 || ex.Groups[0].Status != cluster.WaitInfeasible || ex.Groups[0].Runtime != nil {
		t.Errorf("explain huge: %+v, %v; want infeasible without a runtime reading", ex, err)
	}
}
