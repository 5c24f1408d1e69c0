// Package rltrain trains the prioritiser in the simulator and evaluates the full hetgpu policy
// against the baselines on held-out traces. It is what `hetgpu train` runs.
package rltrain

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"strings"

	"github.com/hashicorp/go-hclog"

	"github.com/hetgpu/hetgpu/model/throughput"
	"github.com/hetgpu/hetgpu/model/trace"
	"github.com/hetgpu/hetgpu/sidecar/backends/sim"
	"github.com/hetgpu/hetgpu/sidecar/learning/ppo"
	"github.com/hetgpu/hetgpu/sidecar/learning/rlsim"
	"github.com/hetgpu/hetgpu/sidecar/policies"
	"github.com/hetgpu/hetgpu/sidecar/sched"
	"github.com/hetgpu/hetgpu/sidecar/stages/rank"
)

// Defaults of `hetgpu train` (and so of `make train`).
const (
	DefaultEpisodeJobs = rlsim.DefaultEpisodeJobs
	DefaultStride      = 50
	DefaultBaseline    = "heuristic"
	DefaultEvalEvery   = 5
	DefaultEvalEps     = 8
	// DefaultImitationEpochs start training by imitating the fallback heuristic.
	DefaultImitationEpochs = 4
	// DefaultPrefixLen: exploring only the first picks of a round keeps sampled orders close
	// to the policy's (a round rarely starts more than a few contended jobs).
	DefaultPrefixLen = 4
	// DefaultMinBSLD keeps the episodes where the baseline's jobs queue (see
	// rlsim.Env.KeepContended).
	DefaultMinBSLD = 1.5
)

// TrainOptions configure a training run.
type TrainOptions struct {
	// Cluster is a bundled cluster name or HCL file, or several separated by commas (the
	// trace's episodes are then played on each, one environment per cluster); Trace a trace
	// reference (trace.Load).
	Cluster, Trace string
	Epochs         int
	Seed           uint64
	// Resume continues from a checkpoint (its config and seed win over Seed).
	Resume *rank.Checkpoint
	// EpisodeJobs and Stride cut the trace into episodes (see rlsim.EnvConfig).
	EpisodeJobs, Stride int
	Rollouts            int
	Score               rank.ScoreKind
	// Baseline is the reward's reference: "heuristic" (the hetgpu pipeline with the fallback
	// heuristic ranker, so the reward isolates the ranker's contribution) or a registered
	// simulator policy name.
	Baseline string
	// EvalEvery epochs, the greedy policy is scored on EvalEpisodes evenly spaced episodes (the
	// learning curve's second line); 0 disables it.
	EvalEvery, EvalEpisodes int
	// MinBSLD drops episodes whose baseline mean bounded slowdown is below it (default
	// DefaultMinBSLD; negative keeps all).
	MinBSLD float64
	Workers int
	// Residual trains a residual policy (rank.NewResidualPolicy, no imitation epochs): it starts
	// exactly at the fallback heuristic's order.
	Residual bool
	// Hidden overrides the networks' hidden widths (ppo.DefaultConfig's when empty).
	Hidden []int
	// ValidateTraces, when set, choose the policy training keeps (see selectValidated): the
	// ValidateTop best greedy-evaluated epochs are judged against the heuristic on these windows,
	// on every training cluster, with the held-out verdict's rule (ValidateMax pooled,
	// rank.VerdictWindowMax per window), and the best one that beats it is kept; when none
	// does, a residual run keeps its start, the heuristic's order.
	ValidateTraces []string
	ValidateTop    int
	ValidateMax    float64
	// EstimateReplay is the regime training plays in (what users tell: with estimates, none, a
	// share; sim.EstimateReplay), recorded in the checkpoint's meta (MetaEstimates). Validation
	// replays the same.
	EstimateReplay sim.EstimateReplay
	// Pipeline builds the policy under training around a ranker (policies.HetgpuPipeline).
	Pipeline func(o policies.Options, r sched.Ranker) (*sim.PipelinePolicy, error)
	// Checkpoint, when set, is called after every epoch with the trainer's state (saving it
	// makes an interrupted run resumable).
	Checkpoint func(*rank.Checkpoint) error
	Progress   ppo.Progress
	Logger     hclog.Logger
}

// Result is a finished (or interrupted) training run.
type Result struct {
	// Trainer is the state after the last epoch.
	Trainer  *ppo.Trainer
	Episodes int
	Meta     map[string]string
	// Best is the policy of the best greedy-evaluated epoch when that is not the last one
	// (BestEpoch); it is what the final checkpoint holds.
	Best      *rank.Policy
	BestEpoch int
}

// Train runs PPO in the simulator.
func Train(ctx context.Context, o TrainOptions) (*Result, error) {
	if o.Epochs <= 0 {
		return nil, fmt.Errorf("epochs = %d, expected > 0", o.Epochs)
	}
	if o.Pipeline == nil {
		return nil, errors.New("train: no pipeline constructor")
	}
	if o.Logger == nil {
		o.Logger = hclog.NewNullLogger()
	}
	if o.EpisodeJobs <= 0 {
		o.EpisodeJobs = DefaultEpisodeJobs
	}
	if o.Stride <= 0 {
		o.Stride = DefaultStride
	}
	if o.Score == "" {
		o.Score = rank.ScoreBSLD
	}
	if o.Baseline == "" {
		o.Baseline = DefaultBaseline
	}
	if err := o.EstimateReplay.Validate(); err != nil {
		return nil, fmt.Errorf("train: %w", err)
	}
	tab, err := throughput.Bundled()
	if err != nil {
		return nil, fmt.Errorf("throughput table: %w", err)
	}
	var specs []*sim.Spec
	for _, c := range strings.Split(o.Cluster, ",") {
		if c = strings.TrimSpace(c); c == "" {
			continue
		}
		spec, err := sim.LoadSpec(c)
		if err != nil {
			return nil, err
		}
		specs = append(specs, spec)
	}
	if len(specs) == 0 {
		return nil, fmt.Errorf("cluster %q: expected a cluster name or spec file", o.Cluster)
	}
	var tr *ppo.Trainer
	if o.Resume != nil {
		if tr, err = ppo.Resume(o.Resume); err != nil {
			return nil, fmt.Errorf("resume: %w", err)
		}
		o.Seed = tr.Config.Seed
	} else {
		cfg := ppo.DefaultConfig()
		cfg.Seed = o.Seed
		if o.Rollouts > 0 {
			cfg.RolloutsPerEpoch = o.Rollouts
		}
		cfg.ImitationEpochs = DefaultImitationEpochs
		if o.Residual {
			// The residual policy starts at the heuristic: nothing to imitate.
			cfg.ImitationEpochs, cfg.Residual = 0, true
		}
		if len(o.Hidden) > 0 {
			cfg.Hidden = o.Hidden
		}
		cfg.PrefixLen = DefaultPrefixLen
		if tr, err = ppo.NewTrainer(cfg, rank.DefaultSchema()); err != nil {
			return nil, err
		}
	}
	tr.Config.Workers = o.Workers
	tr.Teacher = rank.Heuristic{}.Score
	trc, err := trace.Load(o.Trace, sim.TraceOptions(tab, o.Seed))
	if err != nil {
		return nil, err
	}
	var env ppo.MultiEnv
	for _, spec := range specs {
		popts := policies.Options{Spec: spec, Throughput: tab, Seed: o.Seed, Logger: o.Logger}
		baseline := func() (*sim.PipelinePolicy, error) {
			if o.Baseline == DefaultBaseline {
				h, err := rank.New(nil, rank.WithExplain(false))
				if err != nil {
					return nil, err
				}
				return o.Pipeline(popts, h)
			}
			return policies.New(o.Baseline, popts)
		}
		if _, err := baseline(); err != nil {
			return nil, fmt.Errorf("baseline %q: %w", o.Baseline, err)
		}
		e, err := rlsim.NewEnv(rlsim.EnvConfig{Spec: spec, Throughput: tab, Trace: trc, EpisodeJobs: o.EpisodeJobs,
			Stride: o.Stride, Score: o.Score,
			Policy:   func(r sched.Ranker) (*sim.PipelinePolicy, error) { return o.Pipeline(popts, r) },
			Baseline: baseline, EstimateReplay: o.EstimateReplay})
		if err != nil {
			return nil, err
		}
		if o.MinBSLD == 0 {
			o.MinBSLD = DefaultMinBSLD
		}
		if o.MinBSLD > 0 {
			w := o.Workers
			if w <= 0 {
				w = runtime.GOMAXPROCS(0)
			}
			before := e.Episodes()
			if _, err := e.KeepContended(ctx, o.MinBSLD, w); err != nil {
				return nil, err
			}
			o.Logger.Info("episodes with queueing", "cluster", spec.Name, "kept", e.Episodes(), "of", before)
		}
		env = append(env, e)
	}
	var evalEps []int
	if o.EvalEvery > 0 {
		k := o.EvalEpisodes
		if k <= 0 {
			k = DefaultEvalEps
		}
		k = min(k, env.Episodes())
		for i := 0; i < k; i++ {
			evalEps = append(evalEps, i*env.Episodes()/k)
		}
	}
	meta := map[string]string{
		"cluster": o.Cluster, "trace": o.Trace, "score": string(o.Score), "baseline": o.Baseline,
		"episode_jobs": fmt.Sprint(o.EpisodeJobs), "stride": fmt.Sprint(o.Stride), "episodes": fmt.Sprint(env.Episodes()),
		"min_bsld": fmt.Sprint(o.MinBSLD), rank.MetaTrainEstimates: o.EstimateReplay.Regime(),
	}
	o.Logger.Info("training the prioritiser", "cluster", o.Cluster, "trace", trc.Name, "jobs", len(trc.Jobs),
		"episodes", env.Episodes(), "epochs", o.Epochs, "rollouts", tr.Config.RolloutsPerEpoch, "start_epoch", tr.Epoch)
	if o.Residual {
		meta["residual"] = "true"
	}
	res := &Result{Trainer: tr, Episodes: env.Episodes(), Meta: meta}
	start := tr.Checkpoint()
	start.Meta = meta
	var evaluated []*rank.Checkpoint
	// The best greedy-evaluated state is what training keeps: PPO on few decisive episodes
	// can drift, and imitation guarantees a start as good as the fallback heuristic.
	var best *rank.Checkpoint
	bestReward := math.Inf(-1)
	for e := 0; e < o.Epochs; e++ {
		var eps []int
		if len(evalEps) > 0 && ((tr.Epoch+1)%o.EvalEvery == 0 || e == o.Epochs-1) {
			eps = evalEps
		}
		if err := tr.Train(ctx, env, 1, eps, o.Progress); err != nil {
			return res, err
		}
		c := tr.Checkpoint()
		c.Meta = meta
		if st := tr.Curve[len(tr.Curve)-1]; st.Evaluated {
			evaluated = append(evaluated, c)
		}
		if st := tr.Curve[len(tr.Curve)-1]; st.Evaluated && st.EvalReward > bestReward && len(o.ValidateTraces) == 0 {
			bestReward, best = st.EvalReward, c
			meta["best_epoch"] = fmt.Sprint(st.Epoch)
			meta["best_eval_reward"] = fmt.Sprintf("%.4f", st.EvalReward)
		}
		if o.Checkpoint != nil {
			if err := o.Checkpoint(c); err != nil {
				return res, err
			}
		}
	}
	if len(o.ValidateTraces) > 0 {
		if best, err = selectValidated(ctx, o, specs, evaluated, start, meta); err != nil {
			return res, err
		}
	}
	if best != nil && best.Training.Epoch != tr.Epoch {
		o.Logger.Info("keeping an earlier epoch", "epoch", best.Training.Epoch, "best_epoch", meta["best_epoch"])
		if o.Checkpoint != nil {
			if err := o.Checkpoint(best); err != nil {
				return res, err
			}
		}
		if res.Best, err = best.Policy(); err != nil {
			return res, err
		}
		res.BestEpoch = best.Training.Epoch
	}
	return res, nil
}

// FormatEpoch is one progress line.
func FormatEpoch(s rank.EpochStats) string {
	var b strings.Builder
	fmt.Fprintf(&b, "epoch %3d  reward %+.4f [%+.3f, %+.3f]", s.Epoch, s.Reward, s.RewardMin, s.RewardMax)
	if s.Evaluated {
		fmt.Fprintf(&b, "  greedy %+.4f", s.EvalReward)
	}
	fmt.Fprintf(&b, "  steps %5d  kl %.4f  H %.2f  iters %2d  vloss %.4f  %.1fs", s.Steps, s.KL, s.Entropy, s.PolicyIters, s.ValueLoss, s.Seconds)
	if math.IsNaN(s.Reward) {
		b.WriteString("  (no rollouts)")
	}
	return b.String()
}
