package dashboard

import (
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

// policyInfo is a checkpoint's provenance and training record; nil without one (the
// heuristic, a baseline).
func policyInfo(ck *rank.Checkpoint) *PolicyInfo {
	if ck == nil {
		return nil
	}
	info := &PolicyInfo{Meta: ck.Meta}
	if ck.Training != nil {
		info.Epochs = ck.Training.Epoch
		for _, e := range ck.Training.Curve {
			info.Curve = append(info.Curve, CurvePoint{Epoch: e.Epoch, Reward: e.Reward, EvalReward: e.EvalReward, Evaluated: e.Evaluated})
		}
	}
	return info
}
