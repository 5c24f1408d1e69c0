package ppo

import (
	"errors"
	"fmt"
	"slices"

	"github.com/hetgpu/hetgpu/sidecar/stages/rank"
)

// Writing and resuming checkpoints: the file format and reading it are rank's (the runtime
// loads policies); the training state in it is produced and consumed here.

// Checkpoint captures the trainer's full state.
func (t *Trainer) Checkpoint() *rank.Checkpoint {
	c := rank.PolicyCheckpoint(t.Policy)
	curve := slices.Clone(t.Curve)
	// Wall time depends on the machine and its load; a checkpoint must not (make train is
	// compared byte for byte).
	for i := range curve {
		curve[i].Seconds = 0
	}
	c.Training = &rank.TrainState{Config: t.Config, Epoch: t.Epoch, AdamPi: t.AdamPi.Clone(), AdamV: t.AdamV.Clone(), Curve: curve}
	return c
}

// Resume rebuilds a trainer that continues exactly where the checkpoint's training stopped.
func Resume(c *rank.Checkpoint) (*Trainer, error) {
	if c.Training == nil {
		return nil, errors.New("checkpoint has no training state (a policy stripped for shipping cannot be resumed)")
	}
	p, err := c.Policy()
	if err != nil {
		return nil, err
	}
	ts := c.Training
	cfg := withDefaults(ts.Config)
	if ts.AdamPi == nil || ts.AdamV == nil {
		return nil, errors.New("training: adam_policy and adam_value are required to resume")
	}
	if err := ts.AdamPi.Validate(len(p.Actor.Params), "training.adam_policy"); err != nil {
		return nil, err
	}
	if err := ts.AdamV.Validate(len(p.Critic.Params), "training.adam_value"); err != nil {
		return nil, err
	}
	if ts.Epoch < 0 {
		return nil, fmt.Errorf("training.epoch: %d, expected >= 0", ts.Epoch)
	}
	return &Trainer{Config: cfg, Policy: p, Epoch: ts.Epoch, Curve: append([]EpochStats(nil), ts.Curve...), AdamPi: ts.AdamPi.Clone(), AdamV: ts.AdamV.Clone()}, nil
}
