package rlsim

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/hetgpu/hetgpu/model/throughput"
	"github.com/hetgpu/hetgpu/model/trace"
	"github.com/hetgpu/hetgpu/sidecar/backends/sim"
	"github.com/hetgpu/hetgpu/sidecar/learning/ppo"
	"github.com/hetgpu/hetgpu/sidecar/sched"
	"github.com/hetgpu/hetgpu/sidecar/stages/rank"
)

// DefaultEpisodeJobs is an episode's length in jobs, for `hetgpu train` and the live tuner alike.
const DefaultEpisodeJobs = 100

// PolicyFunc builds the simulator policy under training around a ranker (for hetgpu: the
// production pipeline with the predictor and the placement MILP).
type PolicyFunc func(r sched.Ranker) (*sim.PipelinePolicy, error)

// EnvConfig describes a training environment.
type EnvConfig struct {
	Spec       *sim.Spec
	Throughput *throughput.Table
	Trace      *trace.Trace
	// EpisodeJobs is the length of one episode (a window of consecutive jobs, re-based to start
	// at 0); Stride the offset between episode starts (EpisodeJobs when zero).
	EpisodeJobs, Stride int
	Score               rank.ScoreKind
	// Policy is the pipeline under training; Baseline the scheduler the reward compares with on
	// the same job sequence.
	Policy   PolicyFunc
	Baseline func() (*sim.PipelinePolicy, error)
	// EstimateReplay is what users tell in every episode (sim.EstimateReplay: with estimates,
	// none, or a share): the policy under training and the baseline see the same.
	EstimateReplay sim.EstimateReplay
}

// Env is a ppo.Env: episode i replays the i-th window of the trace on the cluster under the
// training pipeline (the agent ranks every round) and under the baseline, and the reward is the
// relative improvement of the chosen score. Baseline results are computed once per episode.
type Env struct {
	cfg      EnvConfig
	episodes []*episode
}

type episode struct {
	tr   *trace.Trace
	once sync.Once
	res  *sim.Result
	err  error
}

// NewEnv cuts the trace into episodes.
func NewEnv(cfg EnvConfig) (*Env, error) {
	if cfg.Spec == nil || cfg.Throughput == nil || cfg.Trace == nil || cfg.Policy == nil || cfg.Baseline == nil {
		return nil, errors.New("rlsim: spec, throughput, trace, policy and baseline are required")
	}
	if cfg.EpisodeJobs <= 0 {
		return nil, fmt.Errorf("rlsim: episode length %d jobs, expected > 0", cfg.EpisodeJobs)
	}
	if cfg.Stride <= 0 {
		cfg.Stride = cfg.EpisodeJobs
	}
	if cfg.Score == "" {
		cfg.Score = rank.ScoreBSLD
	}
	e := &Env{cfg: cfg}
	n := len(cfg.Trace.Jobs)
	for from := 0; from < n; from += cfg.Stride {
		if from+cfg.EpisodeJobs > n && from > 0 {
			break
		}
		w, err := cfg.Trace.Window(fmt.Sprintf("%s[%d:%d]", cfg.Trace.Name, from, min(n, from+cfg.EpisodeJobs)), from, cfg.EpisodeJobs)
		if err != nil {
			return nil, err
		}
		e.episodes = append(e.episodes, &episode{tr: w})
	}
	if len(e.episodes) == 0 {
		return nil, fmt.Errorf("rlsim: trace %s has no jobs", cfg.Trace.Name)
	}
	return e, nil
}

// Episodes implements ppo.Env.
func (e *Env) Episodes() int { return len(e.episodes) }

// Episode returns the trace window of episode i.
func (e *Env) Episode(i int) *trace.Trace { return e.episodes[i].tr }

func (e *Env) setup(ep int) sim.Setup {
	return sim.Setup{Spec: e.cfg.Spec, Throughput: e.cfg.Throughput, Trace: e.episodes[ep].tr, NoSeries: true,
		EstimateReplay: e.cfg.EstimateReplay}
}

// Summary converts a simulator result into the reward's inputs.
func Summary(r *sim.Result) rank.Summary {
	return rank.Summary{Jobs: r.Jobs, AvgJCT: r.AvgJCTS, AvgWait: r.AvgQueueS, AvgBSLD: r.BoundedSlowdown,
		Util: r.GPUUtil, EnergyPerWork: r.EnergyPerWork}
}

// Baseline returns the baseline's result on episode ep (computed once).
func (e *Env) Baseline(ctx context.Context, ep int) (*sim.Result, error) {
	b := e.episodes[ep]
	b.once.Do(func() {
		p, err := e.cfg.Baseline()
		if err != nil {
			b.err = fmt.Errorf("baseline: %w", err)
			return
		}
		b.res, b.err = sim.Simulate(ctx, e.setup(ep), p, nil)
	})
	return b.res, b.err
}

// KeepContended drops the episodes in which the baseline's jobs hardly queue (mean bounded
// slowdown below minBSLD): there every order gives the same schedule, so they only cost
// simulation time and dilute the learning signal. It simulates the baseline on every episode
// (workers at a time) and returns how many episodes remain.
func (e *Env) KeepContended(ctx context.Context, minBSLD float64, workers int) (int, error) {
	errs := make([]error, len(e.episodes))
	sem := make(chan struct{}, max(1, workers))
	var wg sync.WaitGroup
	for i := range e.episodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			_, errs[i] = e.Baseline(ctx, i)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return 0, err
	}
	var kept []*episode
	for _, ep := range e.episodes {
		if ep.res.BoundedSlowdown >= minBSLD {
			kept = append(kept, ep)
		}
	}
	if len(kept) == 0 {
		return 0, fmt.Errorf("no episode of trace %s has a baseline bounded slowdown >= %g", e.cfg.Trace.Name, minBSLD)
	}
	e.episodes = kept
	return len(kept), nil
}

// Play implements ppo.Env.
func (e *Env) Play(ctx context.Context, ep int, agent *ppo.Agent) (float64, error) {
	if ep < 0 || ep >= len(e.episodes) {
		return 0, fmt.Errorf("episode %d outside 0..%d", ep, len(e.episodes)-1)
	}
	base, err := e.Baseline(ctx, ep)
	if err != nil {
		return 0, err
	}
	r, err := rank.New(agent.Policy(), rank.WithDecider(agent), rank.WithExplain(false))
	if err != nil {
		return 0, err
	}
	p, err := e.cfg.Policy(r)
	if err != nil {
		return 0, err
	}
	res, err := sim.Simulate(ctx, e.setup(ep), p, nil)
	if err != nil {
		return 0, err
	}
	return Reward(e.cfg.Score, res, base), nil
}

// Reward is rank.Reward on simulator results, with jobs a policy left unfinished (that the
// baseline finished) costing the worst reward: averages over finished jobs must not reward
// leaving hard jobs waiting. Energy is compared over one window (sim.CommonEnergyWindow), on
// copies: the baseline's result is shared by every rollout.
func Reward(kind rank.ScoreKind, pol, base *sim.Result) float64 {
	if pol.Unfinished > base.Unfinished {
		return -rank.RewardClip
	}
	p, b := *pol, *base
	sim.CommonEnergyWindow([]*sim.Result{&p, &b})
	return rank.Reward(kind, Summary(&p), Summary(&b))
}
