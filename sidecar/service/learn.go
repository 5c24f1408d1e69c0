package service

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/hetgpu/hetgpu/sidecar/cluster"
	"github.com/hetgpu/hetgpu/sidecar/gpuspec"
	"github.com/hetgpu/hetgpu/sidecar/store"
)

// Observation sources.
const (
	SourceDriver  = "driver"
	SourceSidecar = "sidecar"
)

// ValidationError is a malformed observation field.
type ValidationError struct {
	Field, Value, Expected string
}

func (e *ValidationError) Error() string {
	return fmt.Sprintf("field %s = %s: expected %s", e.Field, e.Value, e.Expected)
}

// Validate checks an observation and normalises it (canonical GPU type, default namespace,
// time). The error names the field, its value and what is expected.
func Validate(o *cluster.Observation, now time.Time) error {
	bad := func(field string, v any, exp string) error {
		return &ValidationError{Field: field, Value: fmt.Sprintf("%#v", v), Expected: exp}
	}
	if o.Namespace == "" {
		o.Namespace = "default"
	}
	if o.JobID == "" || len(o.JobID) > 256 || strings.ContainsAny(o.JobID, "\x00\n") {
		return bad("job_id", o.JobID, "the Nomad job ID (1 to 256 characters)")
	}
	if o.Group == "" || len(o.Group) > 256 {
		return bad("group", o.Group, "the task group name")
	}
	t := gpuspec.Canonical(o.GPUType)
	if t == "" {
		t = gpuspec.Canonical(o.GPUName)
	}
	if t == "" {
		return bad("gpu_type", o.GPUType, "a known GPU type (k80, p100, v100, t4, a10, l4, a100, h100, h200) or a gpu_name such as \"NVIDIA A100-SXM4-40GB\"")
	}
	o.GPUType = t
	if o.GPUs < 1 || o.GPUs > 4096 {
		return bad("gpus", o.GPUs, "an integer from 1 to 4096")
	}
	if o.Nodes < 0 || o.Nodes > o.GPUs {
		return bad("nodes", o.Nodes, "an integer from 0 to gpus")
	}
	if o.BatchSize < 0 {
		return bad("batch_size", o.BatchSize, "a non-negative integer")
	}
	for _, f := range []struct {
		name     string
		v        float64
		positive bool
	}{
		{"throughput", o.Throughput, false}, {"samples_per_sec", o.SamplesPerSec, false}, {"energy_j", o.EnergyJ, false}, {"avg_power_w", o.AvgPowerW, false},
		{"peak_power_w", o.PeakPowerW, false}, {"param_count", o.ParamCount, false}, {"runtime_s", o.RuntimeS, true},
	} {
		if math.IsNaN(f.v) || math.IsInf(f.v, 0) || f.v < 0 || (f.positive && f.v == 0) {
			exp := "a finite number >= 0"
			if f.positive {
				exp = "a finite number > 0 (seconds)"
			}
			return bad(f.name, f.v, exp)
		}
	}
	// Everything downstream counts steps; a reporter that only counted samples gets them
	// converted with its batch size.
	o.Throughput = o.StepsPerSec()
	if o.Time.IsZero() {
		o.Time = now
	} else if o.Time.After(now.Add(time.Hour)) {
		return bad("time", o.Time.Format(time.RFC3339), "a time not in the future (RFC 3339)")
	}
	return nil
}

// Observe records a measured run: the store keeps it, the learner gets it when it carries a
// throughput (a zero throughput means "did not run" to the predictor), and the prediction
// error is measured against what was predicted for it.
func (s *Service) Observe(ctx context.Context, o cluster.Observation, source string) error {
	if err := Validate(&o, s.cfg.Now()); err != nil {
		s.metrics.Rejected.Inc()
		return err
	}
	s.predictionError(&o)
	if _, err := s.store.AddObservation(o, source, s.cfg.Now()); err != nil {
		return err
	}
	s.metrics.Observations.WithLabelValues(source).Inc()
	if s.stages.Learner != nil && o.Throughput > 0 {
		if err := s.stages.Learner.Observe(ctx, o); err != nil {
			return fmt.Errorf("learner rejected the observation of %s/%s: %w", o.Namespace, o.JobID, err)
		}
	}
	if s.stages.Tuner != nil && o.Throughput > 0 {
		if err := s.stages.Tuner.Observe(ctx, o); err != nil {
			return fmt.Errorf("policy tuner rejected the observation of %s/%s: %w", o.Namespace, o.JobID, err)
		}
	}
	return nil
}

// predictionError compares a measured run with what the decision predicted (else with the
// predictor's current answer).
func (s *Service) predictionError(o *cluster.Observation) {
	key := o.Namespace + "/" + o.JobID + "/" + o.Group
	var thr, pw float64
	if r, ok := s.store.Latest(key); ok && r.Decision != nil && r.Decision.GPUType == o.GPUType && r.Decision.GPUs() == o.GPUs {
		thr, pw = r.Decision.PredThroughput, r.Decision.PredPowerW
	} else {
		j := &cluster.Job{Namespace: o.Namespace, ID: o.JobID, Group: o.Group, GPUs: o.GPUs,
			Hetgpu: cluster.Annotations{Enabled: true, ModelFamily: o.ModelFamily, ModelName: o.ModelName,
				BatchSize: o.BatchSize, ParamCount: o.ParamCount, Framework: o.Framework, MaxNodes: max(1, o.Nodes)}}
		e := s.stages.Predictor.Predict(j, o.GPUType, o.GPUs)
		thr, pw = e.Throughput, e.PowerW
	}
	if o.Throughput > 0 && thr > 0 {
		s.metrics.PredictionError.WithLabelValues("throughput").Observe(math.Abs(thr-o.Throughput) / o.Throughput)
	}
	avg := o.AvgPowerW
	if avg == 0 && o.EnergyJ > 0 && o.RuntimeS > 0 {
		avg = o.EnergyJ / o.RuntimeS
	}
	if avg > 0 && pw > 0 {
		s.metrics.PredictionError.WithLabelValues("power").Observe(math.Abs(pw-avg) / avg)
	}
}

// learnRun records a finished run the backend saw, unless the task driver already posted one
// for it or it was learned before a restart.
func (s *Service) learnRun(ctx context.Context, fr FinishedRun) {
	o := fr.Obs
	if s.store.DriverObservedSince(o.Namespace, o.JobID, o.Group, fr.Start) {
		_, _ = s.store.MarkLearned(fr.Key, s.cfg.Now())
		return
	}
	fresh, err := s.store.MarkLearned(fr.Key, s.cfg.Now())
	if err != nil || !fresh {
		return
	}
	if o.RuntimeS <= 0 {
		s.log.Debug("finished run without a runtime; not recorded", "run", fr.Key)
		return
	}
	if err := s.Observe(ctx, o, SourceSidecar); err != nil {
		s.log.Warn("recording a finished run failed", "run", fr.Key, "error", err)
	}
}

// latestDecision is a small helper for tests and the API.
func (s *Service) latestDecision(key string) (store.DecisionRecord, bool) { return s.store.Latest(key) }
