package rank

// The training state a checkpoint carries: data only. Training itself (PPO, resuming,
// fine-tuning, learning-curve plots) lives in sidecar/stages/rank/ppo.

// TrainConfig are PPO's hyper-parameters (sidecar/stages/rank/ppo.Config), stored in a checkpoint's
// training state. Zero fields take the defaults of ppo.DefaultConfig.
type TrainConfig struct {
	Seed uint64 `json:"seed"`
	// Hidden are the hidden layer widths of actor and critic.
	Hidden           []int `json:"hidden"`
	RolloutsPerEpoch int   `json:"rollouts_per_epoch"`
	// GroupSize rollouts play the same episode each epoch, and each one's reward is taken
	// relative to the mean of the others (a leave-one-out baseline): episodes differ far more
	// than the policy's choices within one, so this removes most of the reward's variance.
	// RolloutsPerEpoch should be a multiple of it; 1 disables grouping.
	GroupSize int `json:"group_size"`
	// PolicyLR and ValueLR are the two Adam learning rates.
	PolicyLR float64 `json:"policy_lr"`
	ValueLR  float64 `json:"value_lr"`
	// Clip is PPO's ratio clip epsilon.
	Clip float64 `json:"clip"`
	// Gamma discounts per decision; Lambda is GAE's lambda.
	Gamma  float64 `json:"gamma"`
	Lambda float64 `json:"lambda"`
	// TargetKL stops an epoch's policy iterations once the approximate KL to the rollout policy
	// exceeds 1.5 x TargetKL.
	TargetKL    float64 `json:"target_kl"`
	PolicyIters int     `json:"policy_iters"`
	ValueIters  int     `json:"value_iters"`
	Minibatch   int     `json:"minibatch"`
	EntropyCoef float64 `json:"entropy_coef"`
	// PrefixLen caps how many leading picks of one decision are sampled and credited.
	PrefixLen int `json:"prefix_len"`
	// ImitationEpochs are the first epochs of training, in which the trainer's Teacher decides and
	// the actor learns to reproduce its orders (maximum likelihood of the Plackett-Luce
	// prefix), so PPO starts from the fallback heuristic instead of a random ranking.
	ImitationEpochs int `json:"imitation_epochs"`
	// ImitationLR and ImitationIters drive the supervised imitation updates (larger than PPO's
	// steps: there is no trust region to respect, and a sharp imitation keeps PPO's first
	// explorations close to the teacher).
	ImitationLR    float64 `json:"imitation_lr"`
	ImitationIters int     `json:"imitation_iters"`
	// Residual trains a residual policy (rank.NewResidualPolicy): the heuristic's score plus a
	// correction that starts at zero, so training starts exactly at the heuristic's order.
	Residual bool `json:"residual,omitempty"`
	// Workers bounds parallel rollouts and gradient chunks; 0 = GOMAXPROCS. Results do not
	// depend on it.
	Workers int `json:"-"`
}

// EpochStats summarise one training epoch (one point of the learning curve).
type EpochStats struct {
	Epoch int `json:"epoch"`
	// Reward is the mean episode reward of the epoch's (exploring) rollouts.
	Reward    float64 `json:"reward"`
	RewardMin float64 `json:"reward_min"`
	RewardMax float64 `json:"reward_max"`
	// EvalReward is the greedy policy's mean reward on evaluation episodes, when Evaluated.
	EvalReward  float64 `json:"eval_reward"`
	Evaluated   bool    `json:"evaluated"`
	Steps       int     `json:"steps"`
	PolicyLoss  float64 `json:"policy_loss"`
	ValueLoss   float64 `json:"value_loss"`
	KL          float64 `json:"kl"`
	Entropy     float64 `json:"entropy"`
	PolicyIters int     `json:"policy_iters"`
	Seconds     float64 `json:"seconds"`
}
