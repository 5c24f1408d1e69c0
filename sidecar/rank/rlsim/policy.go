// Package rlsim connects the prioritiser (sidecar/rank) to the simulator (sidecar/sim): the
// simulator policies built around a ranker (the production pipeline, and ranked first-fit for
// queue-order baselines such as Slurm multifactor and F1), the user runtime estimates they see,
// and the training environment whose episodes are trace windows replayed on a cluster.
package rlsim

import (
	"context"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"time"

	"github.com/hetgpu/hetgpu/sidecar/cluster"
	"github.com/hetgpu/hetgpu/sidecar/sched"
	"github.com/hetgpu/hetgpu/sidecar/sim"
)

// DefaultEstimateSigma is the spread of simulated user runtime estimates: each job's estimate is
// its true runtime (on gpuspec.ReferenceGPU) times exp(Sigma x z), z ~ N(0, 1) fixed per job. With
// 0.5, half of the estimates are off by more than 40 %: what a user who declares a step count and
// reads a throughput off a dashboard, or who stops early, would give. Policies that use
// estimates (hetgpu, F1) all see the same noisy values; sjf alone sees exact ones.
const DefaultEstimateSigma = 0.5

// Estimates controls the runtime estimates (cluster.Annotations.EstRuntime) a policy sees.
type Estimates struct {
	// Off hides estimates altogether.
	Off bool
	// Sigma is the log-normal error (DefaultEstimateSigma when zero; negative = exact).
	Sigma float64
	// Seed makes the per-job errors reproducible.
	Seed uint64
}

func (e Estimates) sigma() float64 {
	switch {
	case e.Sigma < 0:
		return 0
	case e.Sigma == 0:
		return DefaultEstimateSigma
	}
	return e.Sigma
}

// factor is the job's fixed estimate error.
func (e Estimates) Factor(key string) float64 {
	s := e.sigma()
	if s == 0 {
		return 1
	}
	h := fnv.New64a()
	h.Write([]byte(key))
	z := rand.New(rand.NewPCG(e.Seed, h.Sum64())).NormFloat64()
	return math.Exp(s * z)
}

// estimating wraps the simulator's State so snapshots carry noisy estimates (the engine, asked
// for oracle information, fills exact remaining runtimes; the wrapper perturbs or hides them).
type estimating struct {
	s   *sim.State
	est Estimates
}

func (c estimating) Snapshot(ctx context.Context) (*cluster.Snapshot, error) {
	snap, err := c.s.Snapshot(ctx)
	if err != nil {
		return nil, err
	}
	for _, jobs := range [][]cluster.Job{snap.Pending, snap.Preemptible} {
		for i := range jobs {
			j := &jobs[i]
			if c.est.Off {
				j.Hetgpu.EstRuntime = 0
				continue
			}
			if j.Hetgpu.EstRuntime > 0 {
				j.Hetgpu.EstRuntime = time.Duration(float64(j.Hetgpu.EstRuntime) * c.est.Factor(j.Key()))
			}
		}
	}
	return snap, nil
}

// Preempt implements cluster.Preempter.
func (c estimating) Preempt(ctx context.Context, ps []cluster.Preemption) ([]cluster.PinResult, error) {
	return c.s.Preempt(ctx, ps)
}

func (c estimating) Pin(ctx context.Context, ds []cluster.Decision) ([]cluster.PinResult, error) {
	return c.s.Pin(ctx, ds)
}

// Pipeline is the production pipeline (rank -> predict -> place -> pin) as a simulator policy,
// seeing runtime estimates as configured.
type Pipeline struct {
	PolicyName string
	Ranker     sched.Ranker
	Predictor  sched.Predictor
	Placer     sched.Placer
	// Learner, when set, receives the engine's observations.
	Learner   sched.Learner
	Estimates Estimates
	// Preemptor, when set, lets the pipeline stop running jobs (every simulated job
	// checkpoints).
	Preemptor sched.Preemptor
	// Queues, when set, is the queue stage (sidecar/queue).
	Queues sched.Queues

	partialGangPins int
}

// PartialGangPins counts the gangs the rounds pinned in part (sim.GangCounter; must stay 0).
func (p *Pipeline) PartialGangPins() int { return p.partialGangPins }

// Name implements sim.Policy.
func (p *Pipeline) Name() string { return p.PolicyName }

// NeedsOracle asks the engine for true runtimes, which the policy only ever sees through
// Estimates.
func (p *Pipeline) NeedsOracle() bool { return !p.Estimates.Off }

// Schedule implements sim.Policy.
func (p *Pipeline) Schedule(ctx context.Context, s *sim.State) error {
	pl := sched.Pipeline{Cluster: estimating{s, p.Estimates}, Ranker: p.Ranker, Predictor: p.Predictor, Placer: p.Placer,
		Preemptor: p.Preemptor, Queues: p.Queues}
	r, err := pl.RunRound(ctx)
	if r != nil {
		p.partialGangPins += r.PartialGangPins
	}
	return err
}

// Observe implements sched.Learner.
func (p *Pipeline) Observe(ctx context.Context, obs cluster.Observation) error {
	if p.Learner == nil {
		return nil
	}
	return p.Learner.Observe(ctx, obs)
}

// ObserveAll implements sched.BatchLearner.
func (p *Pipeline) ObserveAll(ctx context.Context, obs []cluster.Observation) error {
	if p.Learner == nil {
		return nil
	}
	return sched.ObserveAll(ctx, p.Learner, obs)
}

// RankedFirstFit starts jobs in the ranker's order wherever Nomad's bin-packing would put them
// (sim.State.BestFit, heterogeneity-unaware), every job that fits (greedy backfilling, as the
// simulator's sjf baseline). It turns a queue-priority function (Slurm multifactor, F1) into a
// scheduler comparable with fifo and sjf.
type RankedFirstFit struct {
	PolicyName string
	Ranker     sched.Ranker
	Estimates  Estimates
}

// Name implements sim.Policy.
func (p *RankedFirstFit) Name() string { return p.PolicyName }

// NeedsOracle: see Pipeline.
func (p *RankedFirstFit) NeedsOracle() bool { return !p.Estimates.Off }

// Schedule implements sim.Policy.
func (p *RankedFirstFit) Schedule(ctx context.Context, s *sim.State) error {
	snap, err := estimating{s, p.Estimates}.Snapshot(ctx)
	if err != nil {
		return err
	}
	if len(snap.Pending) == 0 {
		return nil
	}
	ranked, err := p.Ranker.Rank(ctx, snap, nil)
	if err != nil {
		return fmt.Errorf("rank %d pending jobs: %w", len(snap.Pending), err)
	}
	byKey := make(map[string]*sim.JobState, len(snap.Pending))
	for _, j := range s.Pending() {
		byKey[j.Key] = j
	}
	for _, r := range ranked {
		j := byKey[r.Job.Key()]
		if j == nil || j.Status != sim.StatusPending {
			continue
		}
		pl, ok := s.BestFit(j, "")
		if !ok {
			continue
		}
		if err := s.Start(j, pl); err != nil {
			return fmt.Errorf("start %s: %w", j.Key, err)
		}
	}
	return nil
}
