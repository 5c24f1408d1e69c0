// Package ppo trains the prioritiser's policy (sidecar/stages/rank): PPO with a Plackett-Luce
// ranking head, imitation of a teacher, checkpoints and resume, guarded online fine-tuning
// and learning-curve plots. The runtime ranker only loads a policy and scores; this package
// is what `hetgpu train` and the sidecar's opt-in online tuner run.
package ppo

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"time"

	"github.com/hetgpu/hetgpu/internal/nn"
	"github.com/hetgpu/hetgpu/internal/parallel"
	"github.com/hetgpu/hetgpu/sidecar/stages/rank"
)

// Env is a training environment: a fixed, indexed set of episodes (for the simulator: trace
// windows on a cluster) that an agent plays to the end.
type Env interface {
	// Episodes is how many distinct episodes there are; with G = GroupSize and R =
	// RolloutsPerEpoch, rollout r of epoch e plays episode (e x R/G + r/G) mod Episodes.
	Episodes() int
	// Play runs episode ep with agent making every ordering decision and returns the episode's
	// reward (see Reward). It must be deterministic given the episode and the agent's choices,
	// and safe to call concurrently for different agents.
	Play(ctx context.Context, ep int, agent *Agent) (float64, error)
}

// Config are PPO's hyper-parameters; they are stored in a checkpoint's training state.
type Config = rank.TrainConfig

// EpochStats summarise one training epoch (one point of the learning curve).
type EpochStats = rank.EpochStats

// DefaultConfig are the hyper-parameters of the bundled policy.
func DefaultConfig() Config {
	return Config{
		Seed: 1, Hidden: []int{32, 32}, RolloutsPerEpoch: 8, GroupSize: 4,
		PolicyLR: 3e-4, ValueLR: 1e-3, Clip: 0.2, Gamma: 1, Lambda: 0.97, TargetKL: 0.02,
		PolicyIters: 20, ValueIters: 20, Minibatch: 256, EntropyCoef: 0.003, PrefixLen: 16,
		ImitationLR: 3e-3, ImitationIters: 60,
	}
}

func withDefaults(c Config) Config {
	d := DefaultConfig()
	if len(c.Hidden) == 0 {
		c.Hidden = d.Hidden
	}
	c.RolloutsPerEpoch = positiveOr(c.RolloutsPerEpoch, d.RolloutsPerEpoch)
	if c.GroupSize <= 0 {
		c.GroupSize = 1
	}
	c.GroupSize = min(c.GroupSize, c.RolloutsPerEpoch)
	c.PolicyLR = positiveOr(c.PolicyLR, d.PolicyLR)
	c.ValueLR = positiveOr(c.ValueLR, d.ValueLR)
	c.Clip = positiveOr(c.Clip, d.Clip)
	c.Gamma = positiveOr(c.Gamma, d.Gamma)
	c.Lambda = positiveOr(c.Lambda, d.Lambda)
	c.TargetKL = positiveOr(c.TargetKL, d.TargetKL)
	c.PolicyIters = positiveOr(c.PolicyIters, d.PolicyIters)
	c.ValueIters = positiveOr(c.ValueIters, d.ValueIters)
	c.Minibatch = positiveOr(c.Minibatch, d.Minibatch)
	if c.EntropyCoef < 0 {
		c.EntropyCoef = 0
	}
	c.PrefixLen = positiveOr(c.PrefixLen, d.PrefixLen)
	c.ImitationLR = positiveOr(c.ImitationLR, d.ImitationLR)
	c.ImitationIters = positiveOr(c.ImitationIters, d.ImitationIters)
	return c
}

// positiveOr is v, or d when v is unset (zero or negative).
func positiveOr[T int | float64](v, d T) T {
	if v <= 0 {
		return d
	}
	return v
}

func workers(c Config) int {
	if c.Workers > 0 {
		return c.Workers
	}
	return runtime.GOMAXPROCS(0)
}

// gradChunks is the fixed number of pieces a minibatch gradient is split into; the pieces are
// summed in order, so the result does not depend on how many cores computed them.
const gradChunks = 8

// Trainer runs PPO on an Env.
type Trainer struct {
	Config Config
	Policy *rank.Policy
	// Epoch is the number of epochs completed (training resumes after it).
	Epoch  int
	Curve  []EpochStats
	AdamPi *nn.Adam
	AdamV  *nn.Adam
	// Teacher scores a raw feature row for imitation epochs (higher first); without one they
	// are skipped.
	Teacher func(raw []float64) float64
}

// NewTrainer starts training a fresh policy for schema.
func NewTrainer(cfg Config, schema rank.Schema) (*Trainer, error) {
	cfg = withDefaults(cfg)
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x9e3779b97f4a7c15))
	newPolicy := rank.NewPolicy
	if cfg.Residual {
		newPolicy = rank.NewResidualPolicy
	}
	p, err := newPolicy(schema, cfg.Hidden, rng)
	if err != nil {
		return nil, err
	}
	return &Trainer{
		Config: cfg, Policy: p,
		AdamPi: nn.NewAdam(len(p.Actor.Params), cfg.PolicyLR),
		AdamV:  nn.NewAdam(len(p.Critic.Params), cfg.ValueLR),
	}, nil
}

// rolloutRand derives the random source of rollout r of epoch e from the seed alone, so a
// resumed run continues exactly as an uninterrupted one.
func (t *Trainer) rolloutRand(epoch, r int) *rand.Rand {
	return rand.New(rand.NewPCG(t.Config.Seed, uint64(epoch)<<20|uint64(r)+1))
}

// Progress is called after every epoch.
type Progress func(EpochStats)

// Train runs epochs more epochs of PPO. evalEps, when non-empty, are episodes the greedy policy
// is scored on after every epoch (EvalReward).
func (t *Trainer) Train(ctx context.Context, env Env, epochs int, evalEps []int, progress Progress) error {
	if env.Episodes() <= 0 {
		return errors.New("train: the environment has no episodes")
	}
	for e := 0; e < epochs; e++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		st, err := t.epoch(ctx, env)
		if err != nil {
			return fmt.Errorf("epoch %d: %w", t.Epoch+1, err)
		}
		if len(evalEps) > 0 {
			rs, err := Evaluate(ctx, env, t.Policy, evalEps, workers(t.Config))
			if err != nil {
				return fmt.Errorf("epoch %d: evaluate: %w", t.Epoch+1, err)
			}
			st.EvalReward, st.Evaluated = mean(rs), true
		}
		t.Epoch++
		st.Epoch = t.Epoch
		t.Curve = append(t.Curve, st)
		if progress != nil {
			progress(st)
		}
	}
	return nil
}

// epoch collects rollouts in parallel and applies one PPO update.
func (t *Trainer) epoch(ctx context.Context, env Env) (EpochStats, error) {
	start := time.Now()
	cfg := t.Config
	R := cfg.RolloutsPerEpoch
	imitate := t.Epoch < cfg.ImitationEpochs && t.Teacher != nil
	agents := make([]*Agent, R)
	for r := range agents {
		agents[r] = &Agent{
			pol: t.Policy, rng: t.rolloutRand(t.Epoch, r), record: true, prefixMax: cfg.PrefixLen,
			s: newScratch(t.Policy), stats: rank.NewNormalizer(t.Policy.NumFeatures()), gstats: rank.NewNormalizer(t.Policy.NumGlobals()),
		}
		if imitate {
			agents[r].teacher = t.Teacher
		}
	}
	errs := make([]error, R)
	G := cfg.GroupSize
	groups := max(1, R/G)
	parallel.For(R, workers(cfg), func(r int) {
		ep := (t.Epoch*groups + min(r/G, groups-1)) % env.Episodes()
		rew, err := env.Play(ctx, ep, agents[r])
		if err != nil {
			errs[r] = fmt.Errorf("rollout %d (episode %d): %w", r, ep, err)
			return
		}
		if math.IsNaN(rew) || math.IsInf(rew, 0) {
			errs[r] = fmt.Errorf("rollout %d (episode %d): reward %v is not finite", r, ep, rew)
			return
		}
		agents[r].traj.reward = rew
	})
	if err := errors.Join(errs...); err != nil {
		return EpochStats{}, err
	}
	// Ordered reduction: trajectories and statistics in rollout order.
	var st EpochStats
	trajs := make([]*trajectory, R)
	rews := make([]float64, R)
	for r, a := range agents {
		rews[r] = a.traj.reward
	}
	for r, a := range agents {
		// Leave-one-out baseline within the rollout's group.
		lo := min(r/G, groups-1) * G
		hi := R
		if r/G < groups-1 {
			hi = lo + G
		}
		if hi-lo > 1 {
			sum := 0.0
			for i := lo; i < hi; i++ {
				if i != r {
					sum += rews[i]
				}
			}
			a.traj.reward = rews[r] - sum/float64(hi-lo-1)
		}
		trajs[r] = &a.traj
		t.gae(&a.traj)
		st.Steps += len(a.traj.steps)
	}
	st.Reward = mean(rews)
	st.RewardMin, st.RewardMax = minMax(rews)
	if st.Steps > 0 {
		t.update(trajs, &st, imitate)
	}
	// New normalisation statistics apply from the next epoch on; the update above used the
	// inputs exactly as the rollouts saw them.
	for _, a := range agents {
		t.Policy.Norm.Merge(a.stats)
		t.Policy.GNorm.Merge(a.gstats)
	}
	st.Seconds = time.Since(start).Seconds()
	return st, nil
}

// gae fills advantages and returns; the only reward is the episode's, at its last decision.
func (t *Trainer) gae(tr *trajectory) {
	g, l := t.Config.Gamma, t.Config.Lambda
	adv := 0.0
	next := 0.0
	for i := len(tr.steps) - 1; i >= 0; i-- {
		s := &tr.steps[i]
		r := 0.0
		if i == len(tr.steps)-1 {
			r = tr.reward
		}
		delta := r + g*next - s.value
		adv = delta + g*l*adv
		s.adv = adv
		s.ret = adv + s.value
		next = s.value
	}
}

type stepRef struct {
	tr *trajectory
	i  int
}

// update runs the clipped-surrogate policy iterations (stopped early on KL) and the value
// iterations on the collected steps.
func (t *Trainer) update(trajs []*trajectory, st *EpochStats, imitate bool) {
	cfg := t.Config
	var refs []stepRef
	for _, tr := range trajs {
		for i := range tr.steps {
			refs = append(refs, stepRef{tr, i})
		}
	}
	// Advantage normalisation over the batch.
	mu, sd := 0.0, 0.0
	for _, r := range refs {
		mu += r.tr.steps[r.i].adv
	}
	mu /= float64(len(refs))
	for _, r := range refs {
		d := r.tr.steps[r.i].adv - mu
		sd += d * d
	}
	sd = math.Sqrt(sd/float64(len(refs))) + 1e-8
	advs := make([]float64, len(refs))
	for j, r := range refs {
		advs[j] = (r.tr.steps[r.i].adv - mu) / sd
	}
	rng := rand.New(rand.NewPCG(cfg.Seed^0x5bd1e995, uint64(t.Epoch)))
	perm := make([]int, len(refs))
	for i := range perm {
		perm[i] = i
	}
	w := workers(cfg)
	chunkScratch := make([]*scratch, gradChunks)
	chunkGrad := make([][]float64, gradChunks)
	chunkOut := make([][4]float64, gradChunks)
	for c := range chunkScratch {
		chunkScratch[c] = newScratch(t.Policy)
		chunkGrad[c] = make([]float64, max(len(t.Policy.Actor.Params), len(t.Policy.Critic.Params)))
	}
	grad := make([]float64, len(t.Policy.Actor.Params))
	gradV := make([]float64, len(t.Policy.Critic.Params))
	mb := min(cfg.Minibatch, len(refs))
	// minibatch computes batch's gradient into grad in gradChunks parallel pieces (part fills
	// g for its share idx and returns its loss terms) and sums the pieces' loss terms. Both
	// sums run in chunk order, whatever the workers, so training stays bit-reproducible.
	minibatch := func(batch []int, grad []float64, part func(c int, idx []int, g []float64) [4]float64) [4]float64 {
		parallel.For(gradChunks, w, func(c int) {
			g := chunkGrad[c][:len(grad)]
			clear(g)
			lo, hi := c*len(batch)/gradChunks, (c+1)*len(batch)/gradChunks
			chunkOut[c] = part(c, batch[lo:hi], g)
		})
		clear(grad)
		var sum [4]float64
		for c := 0; c < gradChunks; c++ {
			for i, v := range chunkGrad[c][:len(grad)] {
				grad[i] += v
			}
			for k := range sum {
				sum[k] += chunkOut[c][k]
			}
		}
		return sum
	}

	// Policy iterations.
	stopped := false
	iters := cfg.PolicyIters
	if imitate {
		iters = cfg.ImitationIters
		lr := t.AdamPi.LR
		t.AdamPi.LR = cfg.ImitationLR
		defer func() { t.AdamPi.LR = lr }()
	}
	for it := 0; it < iters && !stopped; it++ {
		rng.Shuffle(len(perm), func(i, j int) { perm[i], perm[j] = perm[j], perm[i] })
		for b := 0; b+mb <= len(perm); b += mb {
			batch := perm[b : b+mb]
			out := minibatch(batch, grad, func(c int, idx []int, g []float64) [4]float64 {
				return t.actorGrad(chunkScratch[c], refs, advs, idx, float64(len(batch)), g, imitate)
			})
			st.PolicyLoss, st.KL, st.Entropy = out[0], out[1], out[2]
			if !imitate && out[1] > 1.5*cfg.TargetKL {
				stopped = true
				break
			}
			t.AdamPi.Step(t.Policy.Actor.Params, grad)
		}
		if !stopped {
			st.PolicyIters++
		}
	}
	// Value iterations.
	for it := 0; it < cfg.ValueIters; it++ {
		rng.Shuffle(len(perm), func(i, j int) { perm[i], perm[j] = perm[j], perm[i] })
		for b := 0; b+mb <= len(perm); b += mb {
			batch := perm[b : b+mb]
			out := minibatch(batch, gradV, func(c int, idx []int, g []float64) [4]float64 {
				return [4]float64{t.criticGrad(chunkScratch[c], refs, idx, float64(len(batch)), g)}
			})
			st.ValueLoss = out[0]
			t.AdamV.Step(t.Policy.Critic.Params, gradV)
		}
	}
}

// actorGrad accumulates the gradient of the PPO loss (clipped surrogate minus entropy bonus,
// averaged over a batch of size total) for the given steps; it returns loss, approximate KL and
// entropy contributions.
func (t *Trainer) actorGrad(s *scratch, refs []stepRef, advs []float64, idx []int, total float64, g []float64, imitate bool) [4]float64 {
	p := t.Policy
	f := p.NumFeatures()
	eps := t.Config.Clip
	var out [4]float64
	for _, j := range idx {
		tr, st := refs[j].tr, &refs[j].tr.steps[refs[j].i]
		n := st.n
		copy(s.x[:n*f], tr.feats[st.featOff:st.featOff+n*f])
		logits := logitsOf(p, s, n)
		for i, b := range tr.base[st.baseOff : st.baseOff+n] {
			logits[i] += b
		}
		var msk []bool
		if st.masked {
			msk = tr.masks[st.maskOff : st.maskOff+n]
		}
		prefix := tr.acts[st.actOff : st.actOff+st.k]
		dz := s.dz[:n]
		lp := plLogProb(logits, msk, prefix, s.taken, s.probs, dz)
		if imitate {
			// Maximum likelihood of the teacher's order.
			out[0] -= lp / total
			for i := range dz {
				dz[i] *= -1 / total
			}
			out[2] += firstPickEntropy(logits, msk, s.probs, nil, 0) / total
			p.Actor.Backward(s.aws, dz, n, g)
			continue
		}
		ratio := math.Exp(lp - st.logp)
		a := advs[j]
		surr := math.Min(ratio*a, math.Max(1-eps, math.Min(1+eps, ratio))*a)
		out[0] -= surr / total
		out[1] += (st.logp - lp) / total
		// The unclipped branch is the active one (gradient flows) unless the ratio left the
		// trust region in the direction the advantage pushes.
		dlp := 0.0
		if (a >= 0 && ratio < 1+eps) || (a < 0 && ratio > 1-eps) {
			dlp = -ratio * a / total
		}
		for i := range dz {
			dz[i] *= dlp
		}
		h := firstPickEntropy(logits, msk, s.probs, dz, -t.Config.EntropyCoef/total)
		out[2] += h / total
		p.Actor.Backward(s.aws, dz, n, g)
	}
	return out
}

// criticGrad accumulates the gradient of the mean squared value error / 2.
func (t *Trainer) criticGrad(s *scratch, refs []stepRef, idx []int, total float64, g []float64) float64 {
	p := t.Policy
	c := p.Critic.In()
	loss := 0.0
	var d [1]float64
	for _, j := range idx {
		tr, st := refs[j].tr, &refs[j].tr.steps[refs[j].i]
		v := p.Critic.Forward(s.cws, tr.cins[st.cinOff:st.cinOff+c], 1)[0]
		e := v - st.ret
		loss += e * e / 2 / total
		d[0] = e / total
		p.Critic.Backward(s.cws, d[:], 1, g)
	}
	return loss
}

// Evaluate plays episodes with the greedy policy and returns each episode's reward, in order.
func Evaluate(ctx context.Context, env Env, p *rank.Policy, episodes []int, workers int) ([]float64, error) {
	out := make([]float64, len(episodes))
	errs := make([]error, len(episodes))
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	parallel.For(len(episodes), workers, func(i int) {
		r, err := env.Play(ctx, episodes[i], NewGreedyAgent(p))
		if err != nil {
			errs[i] = fmt.Errorf("episode %d: %w", episodes[i], err)
		}
		out[i] = r
	})
	return out, errors.Join(errs...)
}

func mean(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

func minMax(xs []float64) (lo, hi float64) {
	lo, hi = math.Inf(1), math.Inf(-1)
	for _, x := range xs {
		lo, hi = math.Min(lo, x), math.Max(hi, x)
	}
	return lo, hi
}
