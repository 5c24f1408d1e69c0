package sched

import (
	"context"
	"time"

	"github.com/hetgpu/hetgpu/model/cluster"
)

// Stages is a scheduling policy: the stages a Pipeline runs. Every policy, the baselines
// included, is one of these (sidecar/policies registers them), so any of them can decide for
// either backend: the live sidecar (sidecar/runtime/service) and the simulator (sim.PipelinePolicy).
// Ranker, Predictor and Placer are required; the rest may be nil.
type Stages struct {
	Ranker    Ranker
	Predictor Predictor
	Placer    Placer
	// Learner receives measured runs (the predictor's catalog and P2).
	Learner Learner
	// Preemptor, when set, lets rounds stop preemptible running jobs on backends that can
	// (cluster.Preempter); nil never preempts.
	Preemptor Preemptor
	// Tuner, when set, gets every measured run and is asked to learn from them in the
	// background (online fine-tuning of the ranking policy; the live sidecar only).
	Tuner Tuner
	// Queues, when set, is the queue stage (caps, reclaim, fair share).
	Queues Queues
	// Estimator, when set, is the estimates step: runtime estimates for the jobs whose users
	// gave none.
	Estimator Estimator
}

// Options are what a backend adds to a policy's stages: the steps only it fills (triage,
// the users' estimates, the pin and record hooks) and its settings. The zero value adds
// nothing.
type Options struct {
	// Triage: Pipeline.Triage.
	Triage func(ctx context.Context, st *RoundState, snap *cluster.Snapshot) *cluster.Snapshot
	// UserEstimates: Pipeline.UserEstimates.
	UserEstimates func(snap *cluster.Snapshot)
	// Memoize: Pipeline.Memoize.
	Memoize bool
	// ReserveAfter: Pipeline.ReserveAfter.
	ReserveAfter time.Duration
	// Shadow: Pipeline.Shadow.
	Shadow bool
	// BeforePin: Pipeline.BeforePin.
	BeforePin func(ds []cluster.Decision)
	// Record: Pipeline.Record.
	Record func(ctx context.Context, r *Round)
	// Reuse: Pipeline.Reuse.
	Reuse *Scratch
	// OnCompile: Pipeline.OnCompile.
	OnCompile func(jobKey string)
}

// New is the pipeline that runs a policy's stages against a backend with its options: the
// one constructor of both backends (the live service and the simulator) for every policy.
func New(c cluster.Cluster, s Stages, o Options) *Pipeline {
	p := &Pipeline{Cluster: c, Triage: o.Triage, UserEstimates: o.UserEstimates, Estimator: s.Estimator,
		Ranker: s.Ranker, Predictor: s.Predictor, Memoize: o.Memoize, Preemptor: s.Preemptor, Placer: s.Placer,
		ReserveAfter: o.ReserveAfter, Shadow: o.Shadow, BeforePin: o.BeforePin, Record: o.Record, Reuse: o.Reuse,
		OnCompile: o.OnCompile}
	if s.Queues != nil {
		p.Queues = s.Queues
	}
	return p
}

// Pipeline is New without options: the stages against a backend, no reservations.
func (s Stages) Pipeline(c cluster.Cluster) *Pipeline { return New(c, s, Options{}) }

// Tuner learns from finished runs in the background: Tune may train for a while and replaces
// what the stages use only when it judges the result better.
type Tuner interface {
	Learner
	// Tune runs one step if enough new runs arrived; snap is the cluster's current layout.
	// It reports whether a step ran and whether its result was adopted.
	Tune(ctx context.Context, snap *cluster.Snapshot) (ran, adopted bool, err error)
}

// Waker is implemented by a stage whose decisions change with time alone (least attained
// service demotes running jobs as they run; a starving job is promoted): NextRound is when it
// wants the next round, given the round's snapshot as the round left it (AfterPins); the zero
// time means no such need. The simulator schedules a round then; the live sidecar's periodic
// reconcile covers it. NextRound must not keep snap: the simulator reuses its arrays (PinsView).
type Waker interface {
	NextRound(snap *cluster.Snapshot) time.Time
}

// AfterPins is the snapshot once a round's applied pins took effect, as far as the queue goes:
// the jobs pinned wait no longer, and those that may be preempted are listed as preemptible.
// Running allocations are not rebuilt (their nodes and GPUs are the backend's to report).
func AfterPins(snap *cluster.Snapshot, pins []cluster.PinResult) *cluster.Snapshot {
	return (*PinsView)(nil).After(snap, pins)
}

// PinsView computes AfterPins again and again (the simulator asks its Wakers after every
// round) into the same arrays: each answer is valid until the next call, so it may only be
// read in between, as a Waker reads its snapshot.
type PinsView struct {
	pending, preemptible []cluster.Job
	snap                 cluster.Snapshot
}

// After is AfterPins reusing v's arrays; a nil v allocates new ones.
func (v *PinsView) After(snap *cluster.Snapshot, pins []cluster.PinResult) *cluster.Snapshot {
	started := appliedKeys(pins)
	if len(started) == 0 {
		return snap
	}
	out := &cluster.Snapshot{}
	var pend, pre []cluster.Job
	if v != nil {
		out, pend, pre = &v.snap, v.pending, v.preemptible
	}
	*out = *snap
	out.Pending, out.Preemptible = moveJobs(snap.Pending, snap.Preemptible, started,
		func(j *cluster.Job) bool { return j.Hetgpu.Preemptible }, pend, pre)
	if v != nil {
		v.pending, v.preemptible = out.Pending, out.Preemptible
	}
	return out
}
