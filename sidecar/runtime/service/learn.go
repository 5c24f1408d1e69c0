package service

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/hetgpu/hetgpu/model/cluster"
	"github.com/hetgpu/hetgpu/model/gpuspec"
	"github.com/hetgpu/hetgpu/sidecar/runtime/store"
	"github.com/hetgpu/hetgpu/sidecar/sched"
)

// Observation sources.
const (
	SourceDriver  = "driver"
	SourceSidecar = "sidecar"
)

// ValidationError is a malformed or implausible observation field.
type ValidationError struct {
	Field, Value, Expected string
	// OutOfRange marks a well-formed value outside its plausible range (HTTP 422; a
	// malformed one is 400). Expected then names the bound.
	OutOfRange bool
}

func (e *ValidationError) Error() string {
	return fmt.Sprintf("field %s = %s: expected %s", e.Field, e.Value, e.Expected)
}

// Plausible ranges of a run record. They come from physics and the datasheets, with wide
// margins: a record outside them is a broken or hostile reporter, never a real run.
const (
	// MaxStepsPerTFLOPS bounds the steps per second of one GPU by its FP32 TFLOPS: the
	// fastest published per-GPU rate (Gavel's LM batch 5 on V100) is 7 steps/s per TFLOPS.
	MaxStepsPerTFLOPS = 1000
	// MaxAvgPowerFactor and MaxPeakPowerFactor bound average and peak power by the GPUs'
	// TDP (boost and transients exceed TDP for milliseconds, not on average).
	MaxAvgPowerFactor  = 1.25
	MaxPeakPowerFactor = 2.0
	// MaxRuntime bounds one run (a year).
	MaxRuntime = 366 * 24 * time.Hour
	// MaxBatchSize and MaxParamCount bound the workload's description.
	MaxBatchSize  = 16777216
	MaxParamCount = 1e13
	// MaxStringLen bounds every string field.
	MaxStringLen = 256
	// MaxEstimateFactor bounds the throughput against the predictor's estimate for the run.
	MaxEstimateFactor = 100
	// MaxClockSkew is how far in the future a record's time may be.
	MaxClockSkew = time.Hour
)

// MinObservationTime is the earliest plausible end of a run (before the oldest GPU type
// hetgpu knows, the K80, shipped).
var MinObservationTime = time.Date(2014, 1, 1, 0, 0, 0, 0, time.UTC)

// Validate checks an observation and normalises it (canonical GPU type, default namespace,
// time). The error names the field, its value and what is expected (the bound).
func Validate(o *cluster.Observation, now time.Time) error {
	bad := func(field string, v any, exp string) error {
		return &ValidationError{Field: field, Value: fmt.Sprintf("%#v", v), Expected: exp}
	}
	far := func(field string, v any, exp string) error {
		return &ValidationError{Field: field, Value: fmt.Sprintf("%v", v), Expected: exp, OutOfRange: true}
	}
	if o.Namespace == "" {
		o.Namespace = "default"
	}
	for _, f := range []struct {
		name, v  string
		required bool
	}{
		{"namespace", o.Namespace, true}, {"job_id", o.JobID, true}, {"group", o.Group, true}, {"task", o.Task, false},
		{"alloc_id", o.AllocID, false}, {"model_family", o.ModelFamily, false}, {"model_name", o.ModelName, false},
		{"framework", o.Framework, false}, {"gpu_type", o.GPUType, false}, {"gpu_name", o.GPUName, false}, {"co_runner", o.CoRunner, false},
		{"co_runner_job", o.CoRunnerJob, false},
	} {
		switch {
		case f.required && f.v == "":
			return bad(f.name, f.v, fmt.Sprintf("a non-empty string of at most %d bytes", MaxStringLen))
		case len(f.v) > MaxStringLen:
			return far(f.name, fmt.Sprintf("a string of %d bytes", len(f.v)), fmt.Sprintf("at most %d bytes", MaxStringLen))
		case !printable(f.v):
			return bad(f.name, f.v, "printable UTF-8 text (no control characters)")
		}
	}
	// TypeOf keeps a MIG slice's own type ("a100-mig-3g.20gb").
	t := gpuspec.TypeOf(o.GPUType)
	if t == "" {
		t = gpuspec.TypeOf(o.GPUName)
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
	if o.BatchSize < 0 || o.BatchSize > MaxBatchSize {
		return bad("batch_size", o.BatchSize, fmt.Sprintf("an integer from 0 to %d", MaxBatchSize))
	}
	if o.CoRunnerBatchSize < 0 || o.CoRunnerBatchSize > MaxBatchSize {
		return bad("co_runner_batch_size", o.CoRunnerBatchSize, fmt.Sprintf("an integer from 0 to %d", MaxBatchSize))
	}
	for _, f := range []struct {
		name     string
		v        float64
		positive bool
	}{
		{"throughput", o.Throughput, false}, {"samples_per_sec", o.SamplesPerSec, false}, {"energy_j", o.EnergyJ, false}, {"avg_power_w", o.AvgPowerW, false},
		{"peak_power_w", o.PeakPowerW, false}, {"param_count", o.ParamCount, false}, {"runtime_s", o.RuntimeS, true},
		{"steps", o.Steps, false},
	} {
		if math.IsNaN(f.v) || math.IsInf(f.v, 0) || f.v < 0 || (f.positive && f.v == 0) {
			exp := "a finite number >= 0"
			if f.positive {
				exp = "a finite number > 0 (seconds)"
			}
			return bad(f.name, f.v, exp)
		}
	}
	if o.ExitCode < -255 || o.ExitCode > 255 {
		return bad("exit_code", o.ExitCode, "an exit status from -255 to 255")
	}
	// Plausible ranges.
	spec, _ := gpuspec.Default().Lookup(t)
	gpus := float64(o.GPUs)
	maxSteps := MaxStepsPerTFLOPS * spec.FP32TFLOPS * gpus
	if maxSteps <= 0 {
		maxSteps = MaxStepsPerTFLOPS * 100 * gpus
	}
	if o.Throughput > maxSteps {
		return far("throughput", o.Throughput, fmt.Sprintf("at most %g steps/s for %d %s GPU(s) (%d steps/s per FP32 TFLOPS of %g)",
			maxSteps, o.GPUs, t, MaxStepsPerTFLOPS, spec.FP32TFLOPS))
	}
	if maxSamples := maxSteps * float64(max(o.BatchSize, 1)); o.BatchSize > 0 && o.SamplesPerSec > maxSamples {
		return far("samples_per_sec", o.SamplesPerSec, fmt.Sprintf("at most %g samples/s (the throughput bound x batch_size %d)", maxSamples, o.BatchSize))
	} else if o.BatchSize == 0 && o.SamplesPerSec > maxSteps*MaxBatchSize {
		return far("samples_per_sec", o.SamplesPerSec, fmt.Sprintf("at most %g samples/s", maxSteps*MaxBatchSize))
	}
	// A run cannot have done more steps than its throughput bound allows in its runtime.
	if lim := maxSteps*o.RuntimeS + 1; o.Steps > lim {
		return far("steps", o.Steps, fmt.Sprintf("at most %g steps (%g steps/s x runtime_s %g)", lim, maxSteps, o.RuntimeS))
	}
	if o.ParamCount > MaxParamCount {
		return far("param_count", o.ParamCount, fmt.Sprintf("at most %g parameters", MaxParamCount))
	}
	if o.RuntimeS > MaxRuntime.Seconds() {
		return far("runtime_s", o.RuntimeS, fmt.Sprintf("at most %g s (a year)", MaxRuntime.Seconds()))
	}
	if spec.TDPW > 0 {
		if lim := MaxAvgPowerFactor * spec.TDPW * gpus; o.AvgPowerW > lim {
			return far("avg_power_w", o.AvgPowerW, fmt.Sprintf("at most %g W (%g x TDP %g W x %d GPU(s))", lim, MaxAvgPowerFactor, spec.TDPW, o.GPUs))
		}
		if lim := MaxPeakPowerFactor * spec.TDPW * gpus; o.PeakPowerW > lim {
			return far("peak_power_w", o.PeakPowerW, fmt.Sprintf("at most %g W (%g x TDP %g W x %d GPU(s))", lim, MaxPeakPowerFactor, spec.TDPW, o.GPUs))
		}
		// Energy is power over time: never more than the GPUs' limit for the whole runtime.
		if lim := MaxAvgPowerFactor*spec.TDPW*gpus*o.RuntimeS + 1; o.EnergyJ > lim {
			return far("energy_j", o.EnergyJ, fmt.Sprintf("at most %g J (%g x TDP %g W x %d GPU(s) x runtime_s %g)", lim, MaxAvgPowerFactor, spec.TDPW, o.GPUs, o.RuntimeS))
		}
	}
	// Everything downstream counts steps; a reporter that only counted samples gets them
	// converted with its batch size.
	o.Throughput = o.StepsPerSec()
	if o.Time.IsZero() {
		o.Time = now
	} else if o.Time.After(now.Add(MaxClockSkew)) {
		return far("time", o.Time.Format(time.RFC3339), fmt.Sprintf("not after %s (now + %s; RFC 3339)", now.Add(MaxClockSkew).UTC().Format(time.RFC3339), MaxClockSkew))
	}
	if start := o.Time.Add(-time.Duration(o.RuntimeS * float64(time.Second))); start.Before(MinObservationTime) {
		return far("time", o.Time.UTC().Format(time.RFC3339), fmt.Sprintf("a run that started (time - runtime_s) after %s", MinObservationTime.Format(time.RFC3339)))
	}
	return nil
}

func printable(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return false
		}
	}
	return true
}

// MaxBatch bounds the records of one request (HTTP 413 beyond it).
const MaxBatch = 10000

// BatchError is an observation of a request refused before anything was stored.
type BatchError struct {
	Index int
	Err   error
}

func (e *BatchError) Error() string { return fmt.Sprintf("observation %d: %v", e.Index, e.Err) }
func (e *BatchError) Unwrap() error { return e.Err }

// ObserveResult says exactly what a request stored.
type ObserveResult struct {
	// Accepted records were stored (durably, before the answer).
	Accepted int `json:"accepted"`
	// Duplicates were already stored under one of their keys (not an error).
	Duplicates int `json:"duplicates"`
	// Learned of the accepted were fed to the predictor as finished runs; Partial were
	// partial or failed runs: stored, never fed to the tuner, and fed to a learner that takes
	// them (PartialLearner), marked partial, when they measured a throughput (LearnedPartial).
	Learned        int `json:"learned"`
	Partial        int `json:"partial"`
	LearnedPartial int `json:"learned_partial,omitempty"`
	// Records is the outcome of each record, in order.
	Records []store.Outcome `json:"records"`
	// LearnError is set when learning failed after storing (the records are kept and
	// learned at the next start).
	LearnError string `json:"learn_error,omitempty"`
}

// Observe records one measured run; a duplicate is not an error. See ObserveBatch.
func (s *Service) Observe(ctx context.Context, o cluster.Observation, source string) error {
	_, err := s.ObserveBatch(ctx, []cluster.Observation{o}, source, "")
	var be *BatchError
	if errors.As(err, &be) {
		return be.Err
	}
	return err
}

// ObserveBatch records the measured runs of one request: all are validated (and checked
// against the predictor's estimate) first, then stored in one transaction, each under its
// claims (the allocation and task, the request's Idempotency-Key, else its content), so a
// retry or a second reporter never stores one twice. Freshly stored runs that finished
// normally feed the learner and the tuner; partial and failed runs with a throughput feed
// only a learner that takes them (PartialLearner), marked partial; duplicates feed neither.
func (s *Service) ObserveBatch(ctx context.Context, obs []cluster.Observation, source, idemKey string) (*ObserveResult, error) {
	if len(obs) > MaxBatch {
		return nil, fmt.Errorf("%d observations in one request: at most %d", len(obs), MaxBatch)
	}
	if len(idemKey) > MaxStringLen || !printable(idemKey) {
		return nil, &ValidationError{Field: "Idempotency-Key", Value: fmt.Sprintf("a %d-byte key", len(idemKey)), Expected: fmt.Sprintf("printable text of at most %d bytes", MaxStringLen)}
	}
	now := s.cfg.Now()
	recs := make([]store.NewObservation, len(obs))
	for i := range obs {
		o := obs[i]
		claims := claimsOf(&o, idemKey, i, len(obs))
		if err := Validate(&o, now); err != nil {
			s.metrics.Rejected.Inc()
			return nil, &BatchError{Index: i, Err: err}
		}
		if err := s.plausibleThroughput(&o); err != nil {
			s.metrics.Rejected.Inc()
			return nil, &BatchError{Index: i, Err: err}
		}
		if err := s.withinAllocation(&o, now); err != nil {
			s.metrics.Rejected.Inc()
			return nil, &BatchError{Index: i, Err: err}
		}
		recs[i] = store.NewObservation{Obs: o, Source: source, Claims: claims}
	}
	return s.storeRecords(ctx, recs)
}

// allocSlack is how much longer than its allocation a run may report (clock skew, rounding).
const allocSlack = time.Minute

// withinAllocation refuses a runtime longer than the named allocation lived, when the
// backend knows it.
func (s *Service) withinAllocation(o *cluster.Observation, now time.Time) error {
	al, ok := s.backend.(cluster.AllocLifetimes)
	if !ok || o.AllocID == "" {
		return nil
	}
	start, end, ok := al.AllocLifetime(o.AllocID)
	if !ok || start.IsZero() {
		return nil
	}
	if end.IsZero() || end.After(now) {
		end = now
	}
	if lim := end.Sub(start) + allocSlack; o.RuntimeS > lim.Seconds() {
		return &ValidationError{Field: "runtime_s", Value: fmt.Sprint(o.RuntimeS), OutOfRange: true,
			Expected: fmt.Sprintf("at most %.0f s: allocation %s ran from %s to %s (+%s)", lim.Seconds(), o.AllocID,
				start.UTC().Format(time.RFC3339), end.UTC().Format(time.RFC3339), allocSlack)}
	}
	return nil
}

// claimsOf keys a record before validation fills defaults (so a retry hashes the same).
func claimsOf(o *cluster.Observation, idemKey string, i, n int) []string {
	var claims []string
	if o.AllocID != "" {
		c := "alloc/" + o.AllocID
		if o.Task != "" {
			c += "/" + o.Task
		}
		claims = append(claims, c)
	}
	if idemKey != "" {
		c := "idem/" + idemKey
		if n > 1 {
			c += fmt.Sprintf("/%d", i)
		}
		claims = append(claims, c)
	}
	if len(claims) == 0 {
		claims = append(claims, store.ContentClaim(o))
	}
	return claims
}

// store writes validated records and feeds the fresh, learnable ones to the learner.
func (s *Service) storeRecords(ctx context.Context, recs []store.NewObservation) (*ObserveResult, error) {
	if err := s.beforeStore(ctx); err != nil {
		return nil, err
	}
	out, err := s.store.AddObservations(recs, s.cfg.Now())
	s.health.set(healthStore, err)
	if err != nil {
		return nil, err
	}

	res := &ObserveResult{Records: out}
	var learn []cluster.Observation
	var seqs []uint64
	partialOK := learnsPartial(s.stages.Learner)
	for i, oc := range out {
		o := &recs[i].Obs
		switch {
		case oc.Duplicate:
			res.Duplicates++
			continue
		case !o.Learnable():
			res.Partial++
			if partialOK && o.Throughput > 0 {
				learn = append(learn, asPartial(*o))
				seqs = append(seqs, oc.Seq)
				res.LearnedPartial++
			}
		case o.Throughput > 0:
			learn = append(learn, *o)
			seqs = append(seqs, oc.Seq)
		}
		res.Accepted++
		s.metrics.Observations.WithLabelValues(recs[i].Source).Inc()
		s.predictionError(o)
	}
	if len(learn) > 0 {
		if err := s.learner.learn(ctx, seqs, learn); err != nil {
			res.LearnError, res.LearnedPartial = err.Error(), 0
			s.log.Warn("learning from stored runs failed; they are learned at the next start", "runs", len(learn), "error", err)
		} else {
			res.Learned = len(learn) - res.LearnedPartial
		}
	}
	// A duplicate too (the first try may have been stored here but not shared): the runs
	// are acknowledged only once the other replicas can find them.
	if err := s.share(ctx); err != nil {
		return nil, err
	}
	return res, nil
}

// PartialLearner is a Learner that takes partial and failed runs as evidence of the
// workload's throughput: the service gives it those that measured one, marked Partial (a
// failed run too), and it weighs them less than finished runs (the predictor: half a run,
// never enough alone to trust a slot). Other learners and the tuner see finished runs only.
type PartialLearner interface {
	LearnsPartial() bool
}

func learnsPartial(l any) bool {
	pl, ok := l.(PartialLearner)
	return ok && pl.LearnsPartial()
}

// asPartial is a run that did not finish normally as a partial learner receives it.
func asPartial(o cluster.Observation) cluster.Observation {
	o.Partial = true
	return o
}

// plausibleThroughput refuses a throughput more than MaxEstimateFactor times what the
// predictor expects for the run.
func (s *Service) plausibleThroughput(o *cluster.Observation) error {
	if o.Throughput <= 0 {
		return nil
	}
	e := s.estimate(o)
	if e.Throughput > 0 && o.Throughput > MaxEstimateFactor*e.Throughput {
		return &ValidationError{Field: "throughput", Value: fmt.Sprint(o.Throughput), OutOfRange: true,
			Expected: fmt.Sprintf("at most %g steps/s (%d x the predictor's estimate %.4g for %s on %d %s)", MaxEstimateFactor*e.Throughput,
				MaxEstimateFactor, e.Throughput, o.ModelName, o.GPUs, o.GPUType)}
	}
	return nil
}

// estimate is the predictor's answer for a run, from its last built state when it can
// give one without a rebuild (a rebuild per request would serialise concurrent posts).
func (s *Service) estimate(o *cluster.Observation) sched.Estimate {
	j := &cluster.Job{Namespace: o.Namespace, ID: o.JobID, Group: o.Group, GPUs: o.GPUs,
		Hetgpu: cluster.Annotations{Enabled: true, ModelFamily: o.ModelFamily, ModelName: o.ModelName,
			BatchSize: o.BatchSize, ParamCount: o.ParamCount, Framework: o.Framework, MaxNodes: max(1, o.Nodes)}}
	if b, ok := s.stages.Predictor.(builtPredictor); ok {
		return b.PredictBuilt(j, o.GPUType, o.GPUs)
	}
	return s.stages.Predictor.Predict(j, o.GPUType, o.GPUs)
}

// builtPredictor answers from its last built state without rebuilding it first.
type builtPredictor interface {
	PredictBuilt(job *cluster.Job, gpuType string, gpus int) sched.Estimate
}

// predictionError compares a measured run with what the decision predicted (else with the
// predictor's current answer).
func (s *Service) predictionError(o *cluster.Observation) {
	key := o.Key()
	var thr, pw float64
	if r, ok := s.store.Latest(key); ok && r.Decision != nil && r.Decision.GPUType == o.GPUType && r.Decision.GPUs() == o.GPUs {
		thr, pw = r.Decision.PredThroughput, r.Decision.PredPowerW
	} else {
		e := s.estimate(o)
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

// learnRun records a run the backend saw end (finished, or partial: stopped before it
// finished, learned only by a PartialLearner). Its record claims its allocations
// ("alloc/<id>"; FinishedRun.Key as "run/<key>" for a reporter without them), so whichever
// of the task driver and the sidecar reports an allocation first wins, across restarts.
func (s *Service) learnRun(ctx context.Context, fr cluster.FinishedRun) {
	o := fr.Obs
	if o.RuntimeS <= 0 {
		s.log.Debug("finished run without a runtime; not recorded", "run", fr.Key)
		return
	}
	var claims []string
	for _, id := range fr.AllocIDs {
		claims = append(claims, "alloc/"+id)
	}
	if len(claims) == 0 {
		claims = []string{"run/" + fr.Key}
	}
	if err := Validate(&o, s.cfg.Now()); err != nil {
		s.metrics.Rejected.Inc()
		s.log.Warn("finished run not recorded: implausible", "run", fr.Key, "error", err)
		return
	}
	if err := s.plausibleThroughput(&o); err != nil {
		s.metrics.Rejected.Inc()
		s.log.Warn("finished run not recorded: implausible", "run", fr.Key, "error", err)
		return
	}
	// Before the store: the task driver's record of the run usually came first and this one
	// is then a duplicate, but only the backend knows the run's estimate. A stopped run's
	// runtime says nothing about the estimate (learnHistory takes finished runs only).
	if !o.Partial {
		s.calibrate(fr)
	}
	s.learnHistory(fr)
	res, err := s.storeRecords(ctx, []store.NewObservation{{Obs: o, Source: SourceSidecar, Claims: claims}})
	if err != nil {
		s.log.Warn("recording a finished run failed", "run", fr.Key, "error", err)
		return
	}
	if res.Duplicates > 0 {
		s.log.Debug("finished run already reported", "run", fr.Key, "by", res.Records[0].DuplicateOf)
		return
	}
	s.log.Info("run recorded by the sidecar", "run", fr.Key, "partial", o.Partial, "runtime_s", o.RuntimeS,
		"throughput", o.Throughput, "steps", o.Steps, "progress_file", fr.Progress, "energy_j", o.EnergyJ, "energy_from", fr.EnergySource)
}

// latestDecision is a small helper for tests and the API.
func (s *Service) latestDecision(key string) (store.DecisionRecord, bool) { return s.store.Latest(key) }
