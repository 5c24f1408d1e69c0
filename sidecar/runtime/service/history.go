package service

import (
	"time"

	"github.com/hetgpu/hetgpu/model/cluster"
	"github.com/hetgpu/hetgpu/model/gpuspec"
	"github.com/hetgpu/hetgpu/model/history"
	"github.com/hetgpu/hetgpu/sidecar/runtime/store"
)

// refRuntime is a finished run's whole runtime on the reference GPU type, the type
// hetgpu.runtime and the runtime history are on: its own time plus hetgpu.ran (what it ran
// before a preemption), times the predicted speed of the type it ran on over the reference
// type's. A type the predictor cannot answer for counts as fast as the reference type.
func (s *Service) refRuntime(fr cluster.FinishedRun) time.Duration {
	wall := fr.Ran + time.Duration(fr.Obs.RuntimeS*float64(time.Second))
	if fr.Obs.GPUType == gpuspec.ReferenceGPU {
		return wall
	}
	ref := fr.Obs
	ref.GPUType = gpuspec.ReferenceGPU
	return time.Duration(gpuspec.RuntimeOn(float64(wall), s.estimate(&fr.Obs).Throughput, s.estimate(&ref).Throughput))
}

// historyRun is what the runtime history learns from a finished run: its job (the parent's
// family for a dispatched or periodic child) and its whole runtime on the reference type.
func (s *Service) historyRun(fr cluster.FinishedRun) history.Run {
	o := &fr.Obs
	j := cluster.Job{Namespace: o.Namespace, ID: o.JobID, ParentID: fr.ParentID, Group: o.Group, GPUs: o.GPUs,
		Hetgpu: cluster.Annotations{ModelFamily: o.ModelFamily, ModelName: o.ModelName, BatchSize: o.BatchSize}}
	return history.Run{Key: fr.Key, Job: history.JobOf(&j), RuntimeS: s.refRuntime(fr).Seconds()}
}

// learnHistory teaches Config.History a finished run's whole runtime, so that jobs without
// hetgpu.runtime are read by the runs of similar jobs (sidecar/stages/estimate). Only runs that
// finished their work count; a run counts once by its key, also when the backend reports it
// again after a restart or to a new leader. The window is saved in the store after each run
// it counts (and shared with the runs, for a new leader).
func (s *Service) learnHistory(fr cluster.FinishedRun) {
	h := s.cfg.History
	if h == nil || fr.Obs.RuntimeS <= 0 || !fr.Obs.Learnable() {
		return
	}
	r := s.historyRun(fr)
	counted := h.Observe(r)
	st := h.Stats()
	s.noteHistory(st)
	if !counted {
		s.log.Debug("finished run already in the runtime history (or out of bounds); not counted again", "run", fr.Key)
		return
	}
	s.log.Debug("runtime history learned a run", "run", fr.Key, "family", r.Family, "took_on_reference", time.Duration(r.RuntimeS*float64(time.Second)),
		"runs", st.Runs, "median_s", st.MedianS, "sigma", st.Sigma)
	s.saveMeta(store.MetaRuntimeHistory, h.Runs(), "saving the runtime history failed; it is learned again from the runs Nomad still shows after a restart")
}

// RestoreHistory adds the runtime history saved in the store to Config.History: at start,
// and when a new leader loaded the old one's (runs already in the window count once). A bad
// saved window is left out with a warning.
func (s *Service) RestoreHistory() {
	h := s.cfg.History
	if h == nil {
		return
	}
	defer func() { s.noteHistory(h.Stats()) }()
	if !restoreMeta(s, store.MetaRuntimeHistory, h.Restore,
		"saved runtime history unreadable; jobs without hetgpu.runtime are read from the runs finished from now on") {
		return
	}
	st := h.Stats()
	s.log.Info("runtime history restored", "runs", st.Runs, "namespaces", st.Namespaces, "median_s", st.MedianS, "sigma", st.Sigma)
}

// RuntimeHistory is what the runtime history holds (nil without one): the dashboard's
// Learning page.
func (s *Service) RuntimeHistory() *history.Stats {
	if s.cfg.History == nil {
		return nil
	}
	st := s.cfg.History.Stats()
	return &st
}

func (s *Service) noteHistory(st history.Stats) {
	for _, p := range []struct {
		name string
		v    float64
	}{{"runs", float64(st.Runs)}, {"median_s", st.MedianS}, {"sigma", st.Sigma}, {"observed", float64(st.Observed)},
		{"skipped", float64(st.Skipped)}, {"namespaces", float64(st.Namespaces)}} {
		s.metrics.RuntimeHistory.WithLabelValues(p.name).Set(p.v)
	}
}
