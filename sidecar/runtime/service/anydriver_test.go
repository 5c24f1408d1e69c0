package service_test

import (
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/hetgpu/hetgpu/model/cluster"
	"github.com/hetgpu/hetgpu/model/estimates"
	"github.com/hetgpu/hetgpu/sidecar/backends/nomad"
	"github.com/hetgpu/hetgpu/sidecar/runtime/service/servicetest"
	"github.com/hetgpu/hetgpu/sidecar/runtime/store"
)

// TestAnyDriverRunsLearnedOnce: jobs whose task runs under docker are placed, and the
// sidecar's own records of them are stored once each: the finished one learned (its
// throughput from the progress file) and calibrating the estimates, the stopped one partial,
// neither learned nor calibrating.
func TestAnyDriverRunsLearnedOnce(t *testing.T) {
	h := servicetest.NewHarness(t, nil, func(h *servicetest.Harness) {
		h.Calibrate = &estimates.Config{Prior: cluster.EstimateModel{Sigma: 0.5}}
	})
	meta := map[string]string{"hetgpu.enable": "true", "hetgpu.model": "BERT", "hetgpu.runtime": "10m", "hetgpu.batch_size": "32"}
	for _, id := range []string{"done", "stopped"} {
		job := servicetest.HeldJob(id, 1, 1, meta)
		job.TaskGroups[0].Tasks[0].Driver = "docker"
		h.Nomad.Register(job)
	}
	h.Round()
	start := time.Now().Add(-2 * time.Minute)
	allocs := map[string]*api.Allocation{}
	for _, id := range []string{"done", "stopped"} {
		a := h.Nomad.Allocs("default", id)[0]
		if a.AllocatedResources == nil {
			t.Fatalf("docker job %s not placed", id)
		}
		allocs[id] = a
		h.Nomad.SetAllocStatus(a.ID, api.AllocClientStatusRunning, start, time.Time{})
	}
	h.Nomad.SetAllocFile(allocs["done"].ID, nomad.ProgressPath, []byte(`{"steps": 500}`))
	h.Nomad.SetAllocFile(allocs["stopped"].ID, nomad.ProgressPath, []byte(`{"steps": 120}`))
	h.Nomad.SetAllocStatus(allocs["done"].ID, api.AllocClientStatusComplete, start, start.Add(100*time.Second))
	job := h.Nomad.Job("default", "stopped")
	job.Stop = ptr(true)
	h.Nomad.Register(job)
	for range 3 {
		h.Round()
	}
	got := map[string]store.ObservationRecord{}
	n := 0
	if err := h.Store.Observations(func(r store.ObservationRecord) error {
		got[r.Obs.JobID] = r
		n++
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	done, stopped := got["done"], got["stopped"]
	if n != 2 || done.Source != "sidecar" || done.Obs.Partial || done.Obs.Steps != 500 || done.Obs.Throughput != 5 {
		t.Errorf("%d records; finished run %+v: want one sidecar record with the progress file's 500 steps over 100 s", n, done)
	}
	if !stopped.Obs.Partial || stopped.Obs.Steps != 120 || stopped.Source != "sidecar" {
		t.Errorf("stopped run %+v: want a partial sidecar record with 120 steps", stopped)
	}
	if st := h.Estimates.Stats(); st.Runs != 1 {
		t.Errorf("estimate calibration from %d runs, want the finished one only", st.Runs)
	}
	if got := h.Pred.Learned(); len(got) != 1 || got[0].JobID != "done" {
		t.Errorf("learned %+v, want the finished run only", got)
	}
}

// TestAnyDriverStoppedRunTeachesPartialLearner: a stopped docker run whose progress file
// measured its rate reaches a learner that takes partial runs, marked partial, with that
// rate as its throughput; one that only counted steps (no steady rate: its runtime includes
// the start) does not.
func TestAnyDriverStoppedRunTeachesPartialLearner(t *testing.T) {
	for _, tc := range []struct {
		name     string
		progress string
		learned  bool
	}{
		{"measured rate", `{"steps": 120, "samples_per_s": 64}`, true},
		{"steps only", `{"steps": 120}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := servicetest.NewHarness(t, nil, func(h *servicetest.Harness) { h.Pred.Partial = true })
			meta := map[string]string{"hetgpu.enable": "true", "hetgpu.model": "BERT", "hetgpu.runtime": "10m", "hetgpu.batch_size": "32"}
			job := servicetest.HeldJob("stopped", 1, 1, meta)
			job.TaskGroups[0].Tasks[0].Driver = "docker"
			h.Nomad.Register(job)
			h.Round()
			a := h.Nomad.Allocs("default", "stopped")[0]
			if a.AllocatedResources == nil {
				t.Fatal("docker job not placed")
			}
			h.Nomad.SetAllocStatus(a.ID, api.AllocClientStatusRunning, time.Now().Add(-2*time.Minute), time.Time{})
			h.Nomad.SetAllocFile(a.ID, nomad.ProgressPath, []byte(tc.progress))
			job = h.Nomad.Job("default", "stopped")
			job.Stop = ptr(true)
			h.Nomad.Register(job)
			for range 3 {
				h.Round()
			}
			got := h.Pred.Learned()
			switch {
			case tc.learned && (len(got) != 1 || !got[0].Partial || got[0].Throughput != 2):
				t.Errorf("learned %+v, want the stopped run marked partial at 64 samples/s / batch 32 = 2 steps/s", got)
			case !tc.learned && len(got) != 0:
				t.Errorf("learned %+v, want nothing (no measured rate)", got)
			}
		})
	}
}
