package service

import (
	"github.com/hetgpu/hetgpu/model/cluster"
	"github.com/hetgpu/hetgpu/model/estimates"
	"github.com/hetgpu/hetgpu/sidecar/runtime/store"
)

// calibrate teaches Config.Estimates how far a finished run's hetgpu.runtime was off. The
// estimate is on the reference GPU type; the run's time (with hetgpu.ran, what it ran before a
// preemption) is taken to the reference type by the predicted speed of the type it ran on
// (refRuntime). A run counts once by its key, also when the backend reports it again after a
// restart.
func (s *Service) calibrate(fr cluster.FinishedRun) {
	cal := s.cfg.Estimates
	if cal == nil || fr.EstRuntime <= 0 || fr.Obs.RuntimeS <= 0 {
		return
	}
	actual := s.refRuntime(fr)
	if !cal.ObserveRun(fr.Obs.Namespace, fr.Key, fr.EstRuntime, actual) {
		return
	}
	st := cal.Stats()
	s.noteEstimates(st)
	m := cal.Model(fr.Obs.Namespace)
	s.log.Debug("runtime estimate calibrated", "run", fr.Key, "estimate", fr.EstRuntime, "took_on_reference", actual,
		"namespace_bias", m.Bias, "namespace_sigma", m.Sigma, "bias", st.Bias, "sigma", st.Sigma, "runs", st.Runs)
	s.saveMeta(store.MetaEstimateSamples, cal.Samples(), "saving the runtime-estimate calibration failed; it is learned again from runs after a restart")
}

// RestoreEstimates adds the calibration window saved in the store to the calibrator: at start,
// and when a new leader loaded the old one's (runs already in the window count once). A bad
// saved window is left out with a warning.
func (s *Service) RestoreEstimates() {
	cal := s.cfg.Estimates
	if cal == nil {
		return
	}
	defer func() { s.noteEstimates(cal.Stats()) }()
	if !restoreMeta(s, store.MetaEstimateSamples, cal.Restore, "saved runtime-estimate calibration unreadable; starting from ranker.estimate_error") {
		return
	}
	st := cal.Stats()
	s.log.Info("runtime-estimate calibration restored", "runs", st.Runs, "bias", st.Bias, "sigma", st.Sigma)
}

func (s *Service) noteEstimates(st estimates.Stats) {
	s.metrics.EstimateModel.WithLabelValues("bias").Set(st.Bias)
	s.metrics.EstimateModel.WithLabelValues("sigma").Set(st.Sigma)
	s.metrics.EstimateModel.WithLabelValues("runs").Set(float64(st.Runs))
	for _, n := range st.Namespaces {
		s.metrics.NamespaceEstimateModel.WithLabelValues(n.Namespace, "bias").Set(n.Bias)
		s.metrics.NamespaceEstimateModel.WithLabelValues(n.Namespace, "sigma").Set(n.Sigma)
		s.metrics.NamespaceEstimateModel.WithLabelValues(n.Namespace, "runs").Set(float64(n.Runs))
	}
}
