package ppo

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"

	"github.com/hashicorp/go-hclog"

	"github.com/hetgpu/hetgpu/model/cluster"
	"github.com/hetgpu/hetgpu/sidecar/stages/rank"
)

// DefaultFineTuneLR is the policy learning rate of online fine-tuning: a tenth of training's,
// so live data nudges the pretrained policy instead of overwriting it.
const DefaultFineTuneLR = 3e-5

// FineTuner fine-tunes a policy from live outcomes, guarded: every Step evaluates the last good
// policy, trains a copy for a few epochs with a small learning rate, evaluates the copy on the
// same episodes, and adopts it only if its reward did not fall by more than Tolerance (and, with
// BeatBaseline, beat the environment's baseline); otherwise the last good checkpoint stays.
type FineTuner struct {
	// Epochs per step (default 2).
	Epochs int
	// LR is the policy learning rate while fine-tuning (DefaultFineTuneLR when zero); the value
	// learning rate is scaled by the same factor.
	LR float64
	// Tolerance is how much lower the tuned policy's mean evaluation reward may be and still be
	// adopted (default 0: no regression allowed).
	Tolerance float64
	// BeatBaseline also requires the tuned policy's mean evaluation reward to be above 0: a
	// reward is ln(baseline score / policy score), so above 0 it beat the environment's
	// baseline on the evaluation episodes. With the fallback heuristic as the baseline (the
	// sidecar's live tuner) a step is adopted only when it beats both the last good policy and
	// the heuristic.
	BeatBaseline bool
	// Save, when set, persists each newly adopted checkpoint.
	Save func(*rank.Checkpoint) error

	mu   sync.Mutex
	good *rank.Checkpoint
}

// NewFineTuner starts from a checkpoint with training state.
func NewFineTuner(c *rank.Checkpoint) (*FineTuner, error) {
	if c.Training == nil {
		return nil, errors.New("fine-tune: the checkpoint has no training state")
	}
	if _, err := Resume(c); err != nil {
		return nil, fmt.Errorf("fine-tune: %w", err)
	}
	return &FineTuner{good: c}, nil
}

// Good returns the last good checkpoint.
func (f *FineTuner) Good() *rank.Checkpoint {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.good
}

// StepResult reports one guarded fine-tuning step: the mean evaluation rewards of the last good
// policy (Before) and of the tuned one (After) on Episodes evaluation episodes.
type StepResult struct {
	Before, After float64
	Accepted      bool
	Episodes      int
}

// tunedMeta is an adopted checkpoint's meta: the last good one's provenance without its
// held-out verdict (it judged other weights), plus the step's evidence.
func tunedMeta(good map[string]string, res StepResult, beatBaseline bool) map[string]string {
	m := maps.Clone(good)
	if m == nil {
		m = map[string]string{}
	}
	rank.ClearVerdict(m)
	m[rank.MetaTunedReward] = strconv.FormatFloat(res.After, 'f', 4, 64)
	m[rank.MetaTunedRewardBefore] = strconv.FormatFloat(res.Before, 'f', 4, 64)
	m[rank.MetaTunedEpisodes] = strconv.Itoa(res.Episodes)
	m[rank.MetaTunedBeatsBaseline] = strconv.FormatBool(beatBaseline && res.After > 0)
	return m
}

// Step trains on trainEnv and judges on evalEnv's episodes evalEps (which should not overlap the
// training episodes).
func (f *FineTuner) Step(ctx context.Context, trainEnv, evalEnv Env, evalEps []int) (StepResult, error) {
	if len(evalEps) == 0 {
		return StepResult{}, errors.New("fine-tune: no evaluation episodes")
	}
	good := f.Good()
	gp, err := good.Policy()
	if err != nil {
		return StepResult{}, err
	}
	tr, err := Resume(good)
	if err != nil {
		return StepResult{}, err
	}
	lr := f.LR
	if lr <= 0 {
		lr = DefaultFineTuneLR
	}
	scale := lr / tr.AdamPi.LR
	tr.AdamPi.LR = lr
	tr.AdamV.LR *= scale
	epochs := f.Epochs
	if epochs <= 0 {
		epochs = 2
	}
	before, err := Evaluate(ctx, evalEnv, gp, evalEps, workers(tr.Config))
	if err != nil {
		return StepResult{}, fmt.Errorf("fine-tune: evaluate the last good policy: %w", err)
	}
	if err := tr.Train(ctx, trainEnv, epochs, nil, nil); err != nil {
		return StepResult{}, fmt.Errorf("fine-tune: %w", err)
	}
	after, err := Evaluate(ctx, evalEnv, tr.Policy, evalEps, workers(tr.Config))
	if err != nil {
		return StepResult{}, fmt.Errorf("fine-tune: evaluate the tuned policy: %w", err)
	}
	res := StepResult{Before: mean(before), After: mean(after), Episodes: len(evalEps)}
	if res.After < res.Before-f.Tolerance || f.BeatBaseline && !(res.After > 0) {
		return res, nil
	}
	// Restore the training learning rates so a later full training run is unaffected.
	tr.AdamPi.LR /= scale
	tr.AdamV.LR /= scale
	c := tr.Checkpoint()
	c.Meta = tunedMeta(good.Meta, res, f.BeatBaseline)
	if f.Save != nil {
		if err := f.Save(c); err != nil {
			return res, fmt.Errorf("fine-tune: save the adopted checkpoint: %w", err)
		}
	}
	f.mu.Lock()
	f.good = c
	f.mu.Unlock()
	res.Accepted = true
	return res, nil
}

// EnvBuilder turns recent live outcomes into a training environment and evaluation episodes
// (for the simulator: a trace of the recent jobs replayed on the cluster's layout).
type EnvBuilder func(recent []cluster.Observation) (train, eval Env, evalEps []int, err error)

// OnlineTuner is a sched.Learner that keeps the most recent finished runs and, when asked,
// fine-tunes the ranker's policy on episodes rebuilt from them, adopting the result only if it
// does not regress (FineTuner).
type OnlineTuner struct {
	Ranker *rank.Ranker
	Tuner  *FineTuner
	Build  EnvBuilder
	// Every is the number of new observations between tuning steps (default 200); Keep how many
	// recent observations are kept (default 2000).
	Every, Keep int
	Logger      hclog.Logger
	// OnAdopt, when set, is called after the ranker switched to an adopted checkpoint.
	OnAdopt func(c *rank.Checkpoint, res StepResult)

	mu     sync.Mutex
	recent []cluster.Observation
	fresh  int
}

// Observe implements sched.Learner: it records the run.
func (o *OnlineTuner) Observe(ctx context.Context, obs cluster.Observation) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	keep := o.Keep
	if keep <= 0 {
		keep = 2000
	}
	o.recent = append(o.recent, obs)
	if len(o.recent) > keep {
		o.recent = slices.Delete(o.recent, 0, len(o.recent)-keep)
	}
	o.fresh++
	return nil
}

// Tune runs one fine-tuning step when enough new observations arrived; it reports whether a
// step ran and its result. Callers run it off the decision path (it trains).
func (o *OnlineTuner) Tune(ctx context.Context) (bool, StepResult, error) {
	every := o.Every
	if every <= 0 {
		every = 200
	}
	o.mu.Lock()
	if o.fresh < every {
		o.mu.Unlock()
		return false, StepResult{}, nil
	}
	recent := slices.Clone(o.recent)
	o.fresh = 0
	o.mu.Unlock()
	train, eval, eps, err := o.Build(recent)
	if err != nil {
		return false, StepResult{}, fmt.Errorf("online tuning: build episodes from %d runs: %w", len(recent), err)
	}
	res, err := o.Tuner.Step(ctx, train, eval, eps)
	if err != nil {
		return true, res, err
	}
	if o.Logger != nil {
		o.Logger.Info("online policy fine-tuning", "runs", len(recent), "reward_before", res.Before,
			"reward_after", res.After, "adopted", res.Accepted)
	}
	if res.Accepted && o.Ranker != nil {
		p, err := o.Tuner.Good().Policy()
		if err != nil {
			return true, res, err
		}
		if err := o.Ranker.SetPolicy(p); err != nil {
			return true, res, err
		}
	}
	if res.Accepted && o.OnAdopt != nil {
		o.OnAdopt(o.Tuner.Good(), res)
	}
	return true, res, nil
}
