package service_test

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/hetgpu/hetgpu/model/cluster"
	"github.com/hetgpu/hetgpu/model/estimates"
	"github.com/hetgpu/hetgpu/sidecar/runtime/service/servicetest"
)

// TestCalibrateFromFinishedRuns: with a calibrator (ranker.calibrate_estimates), each finished
// run teaches how far its hetgpu.runtime was off, on the reference type: two jobs estimated at
// 10 min (on a V100) run 100 s on an A100 (7/3 times as fast in the test table), so each took
// 233 s on the reference type. The waiting job is then read with the learned model; health and
// metrics show it; a restart restores it from the store and does not count the runs again when
// the backend reports them anew.
func TestCalibrateFromFinishedRuns(t *testing.T) {
	prior := cluster.EstimateModel{Sigma: 0.5}
	h := servicetest.NewHarness(t, nil, func(h *servicetest.Harness) { h.Calibrate = &estimates.Config{Prior: prior} })
	meta := map[string]string{"hetgpu.enable": "true", "hetgpu.model": "BERT", "hetgpu.runtime": "10m"}
	for _, id := range []string{"c1", "c2"} {
		h.Nomad.Register(servicetest.HeldJob(id, 1, 1, meta))
	}
	h.Round()
	start := time.Now().Add(-2 * time.Minute)
	for _, id := range []string{"c1", "c2"} {
		a := h.Nomad.Allocs("default", id)[0]
		if a.AllocatedResources == nil {
			t.Fatalf("%s not placed", id)
		}
		h.Nomad.SetAllocStatus(a.ID, api.AllocClientStatusComplete, start, start.Add(100*time.Second))
	}
	h.Round()
	h.Round()
	want, err := estimates.NewSet(estimates.Config{Prior: prior})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		took := 100 * 700.0 / 300 * float64(time.Second)
		want.ObserveRun("default", fmt.Sprint(i), 10*time.Minute, time.Duration(took))
	}
	w := want.Stats()
	nsModel := want.Model("default")
	check := func(when string) {
		t.Helper()
		st := h.Estimates.Stats()
		if st.Runs != 2 || math.Abs(st.Bias-w.Bias) > 1e-9 || math.Abs(st.Sigma-w.Sigma) > 1e-9 {
			t.Errorf("%s: calibration %+v, want 2 runs, bias %.4f, sigma %.4f", when, st, w.Bias, w.Sigma)
		}
		hl := h.Service.Health()
		if hl.Ranker == nil || hl.Ranker.Estimates == nil || hl.Ranker.Estimates.Runs != 2 || hl.Ranker.Estimates.PriorSigma != 0.5 ||
			len(hl.Ranker.Estimates.Namespaces) != 1 || hl.Ranker.Estimates.Namespaces[0].Bias != nsModel.Bias {
			t.Errorf("%s: health ranker %+v, want the calibration", when, hl.Ranker)
		}
		if body := scrape(t, h); !strings.Contains(body, `hetgpu_estimate_model{param="runs"} 2`) ||
			!strings.Contains(body, fmt.Sprintf(`hetgpu_estimate_model{param="bias"} %v`, st.Bias)) ||
			!strings.Contains(body, fmt.Sprintf(`hetgpu_namespace_estimate_model{namespace="default",param="bias"} %v`, nsModel.Bias)) {
			t.Errorf("%s: metrics lack the estimate model:\n%s", when, body)
		}
	}
	check("after two runs")
	if !(w.Bias < -0.04) {
		t.Fatalf("bias %v: two runs at 0.39 x their estimate should move it below 0", w.Bias)
	}
	// A new job is read with the learned model; it asks for more GPUs than a node has, so it
	// waits, and its explanation says how its estimate is read.
	h.Nomad.Register(servicetest.HeldJob("c3", 9, 1, meta))
	h.Round()
	var got time.Duration
	for _, j := range h.Service.LastSnapshot().Pending {
		if j.ID == "c3" {
			got = j.Hetgpu.EstRuntime
		}
	}
	exp := nsModel.Remaining(10*time.Minute, 0)
	if got != exp {
		t.Errorf("waiting job read as %v, want %v (its namespace's learned model), not %v (prior)", got, exp, prior.Remaining(10*time.Minute, 0))
	}
	ex, err := h.Service.Explain("default", "c3")
	if err != nil || len(ex.Groups) != 1 {
		t.Fatalf("explain c3: %+v, %v", ex, err)
	}
	g := ex.Groups[0]
	if r := g.Runtime; r == nil || r.DeclaredS != 600 || r.LeftS != exp.Seconds() || !r.Calibrated || r.Bias != nsModel.Bias || r.Runs != 2 {
		t.Errorf("explained runtime %+v, want 600 s declared, %v left, the namespace's model from 2 runs", g.Runtime, exp)
	}
	if want := fmt.Sprintf("hetgpu.runtime 10m0s read as %s left (namespace default's runs take %.2fx", exp.Round(time.Second), math.Exp(nsModel.Bias)); !strings.Contains(g.Summary, want) {
		t.Errorf("explain summary %q lacks %q", g.Summary, want)
	}
	// Restart: the window comes back from the store; the backend reports the two runs again
	// (its own memory of them is gone) and they are not counted twice.
	h.Stop()
	h.Start()
	check("restored")
	h.Round()
	h.Round()
	check("after the runs were reported again")
}
