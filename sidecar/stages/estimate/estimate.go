// Package estimate is the pipeline's estimates step (sched.Estimator): it gives every pending
// and preemptible job of a round a runtime estimate, so that the ranker and the preemption
// planner order by expected remaining GPU-time whether or not the user wrote hetgpu.runtime.
//
// Sources, in the order they are preferred:
//
//  1. the user's hetgpu.runtime, as the backend read it (cluster.EstimateModel): kept;
//  2. hetgpu.steps, the job's total work, over the predicted throughput on the reference GPU
//     type: the work is known, the speed is the predictor's (its error read as StepsSigma);
//  3. the history of finished runs of similar jobs (model/history), given the time the job
//     has already run: its attained service. The job ranks by the reciprocal of its Gittins
//     index (history.Estimate.Rank), not by its mean time left: with heavy-tailed runtimes
//     the mean is the tail's, and a fresh job is most likely one of the many short ones.
//
// Both backends run this same step (the live sidecar and the simulator) and both feed the
// history the whole runtimes of the jobs that finish (ObserveRuntime).
package estimate

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/hetgpu/hetgpu/model/cluster"
	"github.com/hetgpu/hetgpu/model/gpuspec"
	"github.com/hetgpu/hetgpu/model/history"
	"github.com/hetgpu/hetgpu/sidecar/sched"
)

// DefaultStepsSigma is how far a runtime read from hetgpu.steps is off: the predictor's error
// on the reference type (a quarter either way at one sigma).
const DefaultStepsSigma = 0.25

// Stage implements sched.Estimator. Safe for concurrent use when History is.
type Stage struct {
	// History learns runtimes from finished runs; nil gives no history estimates.
	History *history.Model
	// RefGPU is the type estimates refer to (gpuspec.ReferenceGPU when empty).
	RefGPU string
	// StepsSigma is the log-normal spread of a steps-based runtime (DefaultStepsSigma when
	// zero; negative trusts it exactly).
	StepsSigma float64
}

var _ sched.Estimator = (*Stage)(nil)

// New returns the step around a history (nil: steps only).
func New(h *history.Model) *Stage { return &Stage{History: h} }

// Estimate implements sched.Estimator.
func (s *Stage) Estimate(ctx context.Context, snap *cluster.Snapshot, pred sched.Predictor) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	for _, jobs := range [][]cluster.Job{snap.Pending, snap.Preemptible} {
		for i := range jobs {
			s.estimate(&jobs[i], pred)
		}
	}
	return nil
}

func (s *Stage) estimate(j *cluster.Job, pred sched.Predictor) {
	h := &j.Hetgpu
	ran := Ran(j)
	if h.EstRuntime > 0 {
		if h.Est.Source == cluster.EstNone {
			h.Est = cluster.EstimateInfo{Source: cluster.EstUser, Ran: ran}
		}
		return
	}
	if h.Steps > 0 && pred != nil {
		if thr := pred.Predict(j, s.refGPU(), max(1, j.GPUs)).Throughput; thr > 0 {
			total := time.Duration(math.Min(h.Steps/thr, maxSeconds) * float64(time.Second))
			h.EstRuntime = cluster.EstimateModel{Sigma: s.stepsSigma()}.Remaining(total, ran)
			h.Est = cluster.EstimateInfo{Source: cluster.EstSteps, Ran: ran, Confidence: 1}
			return
		}
	}
	if s.History == nil {
		return
	}
	e := s.History.Estimate(history.JobOf(j), ran)
	h.EstRuntime = e.Rank
	h.Est = cluster.EstimateInfo{Source: cluster.EstHistory, Level: e.Level.String(), Runs: e.Runs,
		Confidence: e.Confidence, Ran: ran, Left: e.Left}
}

// maxSeconds bounds a steps-based runtime (a year): a tiny predicted throughput must not
// overflow a Duration.
const maxSeconds = 365 * 24 * 3600

// Ran is how long a job has run so far, per GPU: its attained service (this run and the
// ones before a preemption).
func Ran(j *cluster.Job) time.Duration {
	if j.AttainedGPUSeconds <= 0 {
		return j.Hetgpu.Ran
	}
	return time.Duration(j.AttainedGPUSeconds / float64(max(1, j.GPUs)) * float64(time.Second))
}

// ObserveRuntime implements sched.Estimator.
func (s *Stage) ObserveRuntime(r history.Run) {
	if s.History != nil {
		s.History.Observe(r)
	}
}

func (s *Stage) refGPU() string {
	if s.RefGPU != "" {
		return s.RefGPU
	}
	return gpuspec.ReferenceGPU
}

func (s *Stage) stepsSigma() float64 { return cluster.SigmaSetting(s.StepsSigma, DefaultStepsSigma) }

// Describe says in words how a job's estimate was read, for explanations: "no hetgpu.runtime;
// read as 3h10m left from 41 finished runs of namespace ml's resnet/ResNet-50 jobs, has run
// 2h5m". Empty for a user estimate (the backend's reading says that) and for none.
func Describe(j *cluster.Job) string {
	e := j.Hetgpu.Est
	left := round(j.Hetgpu.EstRuntime)
	if e.Left > 0 {
		left = round(e.Left)
	}
	ran := ""
	if e.Ran > 0 {
		ran = ", has run " + round(e.Ran).String()
	}
	switch e.Source {
	case cluster.EstSteps:
		return fmt.Sprintf("no hetgpu.runtime; read as %v left from hetgpu.steps = %g at the predicted speed%s", left, j.Hetgpu.Steps, ran)
	case cluster.EstHistory:
		if e.Runs == 0 || e.Level == history.LevelPrior.String() {
			return fmt.Sprintf("no hetgpu.runtime; read as %v left from the prior (no finished runs yet)%s", left, ran)
		}
		return fmt.Sprintf("no hetgpu.runtime; read as %v left from %d finished runs of %s%s", left, e.Runs, peers(j, e.Level), ran)
	}
	return ""
}

// peers names the group of similar jobs a history level stands for.
func peers(j *cluster.Job, level string) string {
	hj := history.JobOf(j)
	switch level {
	case history.LevelJob.String():
		if j.ParentID != "" {
			return fmt.Sprintf("job %s (namespace %s), the parent of this one", hj.Family, hj.Namespace)
		}
		return fmt.Sprintf("job %s (namespace %s)", hj.Family, hj.Namespace)
	case history.LevelModel.String():
		return fmt.Sprintf("namespace %s's %s jobs (batch %d, %d GPUs)", hj.Namespace, hj.Model, hj.Batch, hj.GPUs)
	case history.LevelGPUs.String():
		return fmt.Sprintf("namespace %s's %d-GPU jobs", hj.Namespace, hj.GPUs)
	case history.LevelNamespace.String():
		return fmt.Sprintf("namespace %s's jobs", hj.Namespace)
	}
	return "the cluster's jobs"
}

func round(d time.Duration) time.Duration {
	if d >= time.Hour {
		return d.Round(time.Minute)
	}
	return d.Round(time.Second)
}
