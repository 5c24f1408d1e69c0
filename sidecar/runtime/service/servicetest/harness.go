package servicetest

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/hetgpu/hetgpu/model/estimates"
	"github.com/hetgpu/hetgpu/model/history"
	"github.com/hetgpu/hetgpu/sidecar/backends/nomad"
	"github.com/hetgpu/hetgpu/sidecar/backends/nomad/nomadtest"
	"github.com/hetgpu/hetgpu/sidecar/runtime/service"
	"github.com/hetgpu/hetgpu/sidecar/runtime/store"
	"github.com/hetgpu/hetgpu/sidecar/sched"
	"github.com/hetgpu/hetgpu/sidecar/stages/estimate"
	"github.com/hetgpu/hetgpu/sidecar/stages/queue"
)

// Harness is a service on the Nomad backend against a fake Nomad with three clients: 4x T4,
// 8x V100 and 8x A100, as the e2e suite's cluster.
type Harness struct {
	T         testing.TB
	Nomad     *nomadtest.Server
	Backend   *nomad.Backend
	Service   *service.Service
	Store     *store.Store
	Pred      *Table
	StatePath string
	cfg       service.Config
	bcfg      nomad.Config
	// Tuner, when set before Start, becomes the service's Tuner stage.
	Tuner service.Tuner
	// Placer, when set before Start, replaces FirstFit (e.g. the production MILP placer).
	Placer sched.Placer
	// Queues, when set before Start, becomes the service's queue stage.
	Queues *queue.Set
	// Stages, when set before Start, are the service's stages instead of all the above (a
	// registered policy).
	Stages *service.Stages
	// Calibrate, when set before Start, gives every start a new estimate calibrator, read by
	// the backend and taught by the service, as the sidecar wires ranker.calibrate_estimates.
	Calibrate *estimates.Config
	// Estimates is the calibration of the current start (with Calibrate).
	Estimates *estimates.Set
	// HistoryConfig, when set before Start, gives every start a new runtime history, read
	// by the stages' estimates step and taught by the service, as the sidecar wires
	// ranker.history; History is the current start's.
	HistoryConfig *history.Config
	History       *history.Model
}

// NewHarness builds and starts the harness; mod may change the service and backend
// configuration, and setup the fields read at Start (Tuner, Placer, Calibrate,
// HistoryConfig, ...) before the first start.
func NewHarness(t testing.TB, mod func(*service.Config, *nomad.Config), setup ...func(*Harness)) *Harness {
	t.Helper()
	h := &Harness{T: t, Nomad: nomadtest.New(), Pred: &Table{}, StatePath: filepath.Join(t.TempDir(), "sidecar.db")}
	t.Cleanup(h.Nomad.Close)
	h.Nomad.AddNode("node-t4-0000", "t4", "Tesla T4", 4)
	h.Nomad.AddNode("node-v100-00", "v100", "Tesla V100-SXM2-16GB", 8)
	h.Nomad.AddNode("node-a100-00", "a100", "NVIDIA A100-SXM4-40GB", 8)
	h.cfg = service.Config{Reconcile: time.Second, Debounce: 5 * time.Millisecond, BackendName: "nomad"}
	h.bcfg = nomad.Config{Client: h.Nomad.Client(), ExplainBaseURL: "http://127.0.0.1:4656", RetryBackoff: 10 * time.Millisecond}
	if mod != nil {
		mod(&h.cfg, &h.bcfg)
	}
	for _, f := range setup {
		f(h)
	}
	h.Start()
	return h
}

// WithHistory is a NewHarness setup: a runtime history of the default configuration
// (HistoryConfig) for every start.
func WithHistory(h *Harness) { h.HistoryConfig = &history.Config{} }

// EndRuns ends the one placed allocation of each job of ids in the default namespace with
// the client status (complete, failed, ...), each after ran, ending 30 s ago (past the
// backend's grace), and runs the rounds that report them.
func (h *Harness) EndRuns(status string, ran time.Duration, ids ...string) {
	h.T.Helper()
	end := time.Now().Add(-30 * time.Second)
	for _, id := range ids {
		as := h.Nomad.Allocs("default", id)
		if len(as) != 1 || as[0].AllocatedResources == nil {
			h.T.Fatalf("%s not placed: %+v", id, as)
		}
		h.Nomad.SetAllocStatus(as[0].ID, status, end.Add(-ran), end)
	}
	h.Round()
	h.Round()
}

// Start (re)creates backend, store and service, as a sidecar process start does.
func (h *Harness) Start() {
	h.T.Helper()
	cfg, bcfg := h.cfg, h.bcfg
	h.Estimates = nil
	if h.Calibrate != nil {
		cal, err := estimates.NewSet(*h.Calibrate)
		if err != nil {
			h.T.Fatal(err)
		}
		h.Estimates, cfg.Estimates, bcfg.EstimateModel = cal, cal, cal.Model
	}
	b, err := nomad.New(bcfg)
	if err != nil {
		h.T.Fatal(err)
	}
	st, err := store.Open(h.StatePath, store.Options{})
	if err != nil {
		h.T.Fatal(err)
	}
	var placer sched.Placer = FirstFit{}
	if h.Placer != nil {
		placer = h.Placer
	}
	stages := service.Stages{Ranker: FIFO{}, Predictor: h.Pred, Placer: placer, Learner: h.Pred, Tuner: h.Tuner, Queues: h.Queues}
	if h.Stages != nil {
		stages = *h.Stages
	}
	h.History = nil
	if h.HistoryConfig != nil {
		hist, err := history.New(*h.HistoryConfig)
		if err != nil {
			h.T.Fatal(err)
		}
		h.History, cfg.History = hist, hist
		if stages.Estimator == nil {
			stages.Estimator = estimate.New(hist)
		}
	}
	svc, err := service.New(cfg, b, stages, st)
	if err != nil {
		h.T.Fatal(err)
	}
	h.Backend, h.Store, h.Service = b, st, svc
	h.T.Cleanup(func() { _ = st.Close() })
}

// Stop closes the store, as a sidecar process exit does.
func (h *Harness) Stop() {
	_ = h.Store.Close()
}

// Round resyncs the backend with Nomad (as Watch would) and runs one round.
func (h *Harness) Round() {
	h.T.Helper()
	if err := h.Backend.Resync(context.Background()); err != nil {
		h.T.Fatal(err)
	}
	if _, err := h.Service.Round(context.Background()); err != nil {
		h.T.Fatal(err)
	}
}

// HeldJob is a one-group batch job held for hetgpu.
func HeldJob(id string, gpus uint64, count int, meta map[string]string) *api.Job {
	return nomadtest.HeldJob(id, gpus, count, meta)
}
