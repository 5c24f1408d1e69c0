package dashboard

import (
	"fmt"
	"strings"

	"github.com/hetgpu/hetgpu/sidecar/stages/rank"
)

// PolicyInfo is the ranking policy's provenance and training record, from its checkpoint.
type PolicyInfo struct {
	// Meta is how it was trained (clusters, trace, score, baseline, best epoch and its
	// evaluation reward), as `hetgpu train` records it.
	Meta map[string]string `json:"meta,omitempty"`
	// Epochs is the training epochs the checkpoint holds; Curve their rewards.
	Epochs int          `json:"epochs"`
	Curve  []CurvePoint `json:"curve,omitempty"`
}

// CurvePoint is one training epoch: the mean reward of its exploring rollouts and, when it
// was evaluated, the greedy policy's reward on the evaluation episodes. A reward is
// ln(baseline score / policy score): above 0 the policy beat the baseline.
type CurvePoint struct {
	Epoch      int     `json:"epoch"`
	Reward     float64 `json:"reward"`
	EvalReward float64 `json:"eval_reward,omitempty"`
	Evaluated  bool    `json:"evaluated"`
}

// loadPolicy reads the checkpoint a policy reference names, as app.Stages wrote it
// ("bundled:default", "tuned:PATH" or a path); nil without one (the heuristic).
func loadPolicy(ref string) (*PolicyInfo, error) {
	var ck *rank.Checkpoint
	var err error
	switch {
	case ref == "" || strings.HasPrefix(ref, "heuristic"):
		return nil, nil
	case ref == "bundled:default":
		ck, err = rank.DefaultCheckpoint()
	default:
		ck, err = rank.LoadCheckpoint(strings.TrimPrefix(ref, "tuned:"))
	}
	if err != nil {
		return nil, fmt.Errorf("ranking policy %s: %w", ref, err)
	}
	if ck == nil {
		return nil, nil
	}
	info := &PolicyInfo{Meta: ck.Meta}
	if ck.Training != nil {
		info.Epochs = ck.Training.Epoch
		for _, e := range ck.Training.Curve {
			info.Curve = append(info.Curve, CurvePoint{Epoch: e.Epoch, Reward: e.Reward, EvalReward: e.EvalReward, Evaluated: e.Evaluated})
		}
	}
	return info, nil
}
