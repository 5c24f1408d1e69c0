package rank

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/hashicorp/go-hclog"

	"github.com/hetgpu/hetgpu/sidecar/cluster"
)

// DefaultFineTuneLR is the policy learning rate of online fine-tuning: a tenth of training's,
// so live data nudges the pretrained policy instead of overwriting it.
const DefaultFineTuneLR = 3e-5

// FineTuner fine-tunes a policy from live outcomes, guarded: every Step evaluates the last good
// policy, trains a copy for a few epochs with a small learning rate, evaluates the copy on the
// same episodes, and adopts it only if its reward did not fall by more than Tolerance; otherwise
// the last good checkpoint stays.
type FineTuner struct {
	// Epochs per step (default 2).
	Epochs int
	// LR is the policy learning rate while fine-tuning (DefaultFineTuneLR when zero); the value
	// learning rate is scaled by the same factor.
	LR float64
	// Tolerance is how much lower the tuned policy's mean evaluation reward may be and still be
	// adopted (default 0: no regression allowed).
	Tolerance float64
	// Save, when set, persists each newly adopted checkpoint.
	Save func(*Checkpoint) error

	mu   sync.Mutex
	good *Checkpoint
}

// NewFineTuner starts from a checkpoint with training state.
func NewFineTuner(c *Checkpoint) (*FineTuner, error) {
	if c.Training == nil {
		return nil, errors.New("fine-tune: the checkpoint has no training state")
	}
	if _, err := c.Resume(); err != nil {
		return nil, fmt.Errorf("fine-tune: %w", err)
	}
	return &FineTuner{good: c}, nil
}

// Good returns the last good checkpoint.
func (f *FineTuner) Good() *Checkpoint {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.good
}

// StepResult reports one guarded fine-tuning step.
type StepResult struct {
	Before, After float64
	Accepted      bool
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
	tr, err := good.Resume()
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
	before, err := Evaluate(ctx, evalEnv, gp, evalEps, tr.Config.workers())
	if err != nil {
		return StepResult{}, fmt.Errorf("fine-tune: evaluate the last good policy: %w", err)
	}
	if err := tr.Train(ctx, trainEnv, epochs, nil, nil); err != nil {
		return StepResult{}, fmt.Errorf("fine-tune: %w", err)
	}
	after, err := Evaluate(ctx, evalEnv, tr.Policy, evalEps, tr.Config.workers())
	if err != nil {
		return StepResult{}, fmt.Errorf("fine-tune: evaluate the tuned policy: %w", err)
	}
	res := StepResult{Before: mean(before), After: mean(after)}
	if res.After < res.Before-f.Tolerance {
		return res, nil
	}
	// Restore the training learning rates so a later full training run is unaffected.
	tr.AdamPi.LR /= scale
	tr.AdamV.LR /= scale
	c := tr.Checkpoint()
	c.Meta = good.Meta
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

// SetPolicy swaps the ranker's policy (nil selects the heuristic); rounds in flight finish with
// the old one.
func (r *Ranker) SetPolicy(p *Policy) error {
	if p != nil && !p.Schema.Equal(DefaultSchema()) {
		return fmt.Errorf("rank: policy schema version %d does not match this build's %d", p.Schema.Version, SchemaVersion)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.policy = p
	r.agent = nil
	if p != nil {
		r.agent = NewGreedyAgent(p)
	}
	return nil
}

// EnvBuilder turns recent live outcomes into a training environment and evaluation episodes
// (for the simulator: a trace of the recent jobs replayed on the cluster's layout).
type EnvBuilder func(recent []cluster.Observation) (train, eval Env, evalEps []int, err error)

// OnlineTuner is a sched.Learner that keeps the most recent finished runs and, when asked,
// fine-tunes the ranker's policy on episodes rebuilt from them, adopting the result only if it
// does not regress (FineTuner).
type OnlineTuner struct {
	Ranker *Ranker
	Tuner  *FineTuner
	Build  EnvBuilder
	// Every is the number of new observations between tuning steps (default 200); Keep how many
	// recent observations are kept (default 2000).
	Every, Keep int
	Logger      hclog.Logger

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
	return true, res, nil
}
