package ppo

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/hetgpu/hetgpu/sidecar/stages/rank"
)

// spptEnv is a one-machine scheduling problem whose optimum is known: all jobs are present at
// time 0 and mean completion time is minimised by shortest-processing-time first (Smith's rule).
// At every decision the agent orders the remaining jobs and the first one runs to completion.
// Each job shows its log length and a distracting noise feature; the reward is the relative
// improvement of mean completion time over FIFO (submission order, which is random here).
type spptEnv struct {
	jobs int
}

var spptSchema = rank.Schema{Version: 1, Features: []string{"log_len", "noise"}, Globals: []string{"remaining"}}

func (e spptEnv) Episodes() int { return 1 << 20 }

func (e spptEnv) lengths(ep int) ([]float64, []float64) {
	rng := rand.New(rand.NewPCG(uint64(ep), 7))
	p := make([]float64, e.jobs)
	noise := make([]float64, e.jobs)
	for i := range p {
		p[i] = math.Exp(3 * rng.Float64())
		noise[i] = rng.NormFloat64()
	}
	return p, noise
}

func meanCompletion(p []float64, seq []int) float64 {
	t, sum := 0.0, 0.0
	for _, i := range seq {
		t += p[i]
		sum += t
	}
	return sum / float64(len(seq))
}

func (e spptEnv) fifoAndOpt(ep int) (fifo, opt float64) {
	p, _ := e.lengths(ep)
	seq := make([]int, len(p))
	for i := range seq {
		seq[i] = i
	}
	fifo = meanCompletion(p, seq)
	slices.SortFunc(seq, func(a, b int) int {
		if p[a] < p[b] {
			return -1
		}
		return 1
	})
	return fifo, meanCompletion(p, seq)
}

func (e spptEnv) Play(ctx context.Context, ep int, a *Agent) (float64, error) {
	p, noise := e.lengths(ep)
	left := make([]int, len(p))
	for i := range left {
		left[i] = i
	}
	raw := make([]float64, len(p)*2)
	ord := make([]int, len(p))
	scores := make([]float64, len(p))
	var seq []int
	for len(left) > 0 {
		for r, j := range left {
			raw[2*r], raw[2*r+1] = math.Log(p[j]), noise[j]
		}
		g := []float64{float64(len(left)) / float64(len(p))}
		if err := a.Act(raw, len(left), g, nil, 1, ord, scores); err != nil {
			return 0, err
		}
		pick := left[ord[0]]
		seq = append(seq, pick)
		left = slices.Delete(left, ord[0], ord[0]+1)
	}
	fifo, _ := e.fifoAndOpt(ep)
	return (fifo - meanCompletion(p, seq)) / fifo, nil
}

// regret is the greedy policy's mean excess of mean completion time over the optimum.
func regret(t *testing.T, env spptEnv, p *rank.Policy, eps []int) float64 {
	t.Helper()
	rs, err := Evaluate(context.Background(), env, p, eps, 2)
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for i, ep := range eps {
		fifo, opt := env.fifoAndOpt(ep)
		got := fifo * (1 - rs[i])
		sum += got/opt - 1
	}
	return sum / float64(len(eps))
}

func smallConfig() Config {
	c := DefaultConfig()
	c.Seed = 3
	c.Hidden = []int{16}
	c.RolloutsPerEpoch = 16
	c.PolicyLR = 3e-3
	c.ValueLR = 3e-3
	c.TargetKL = 0.05
	c.PolicyIters = 10
	c.ValueIters = 10
	c.Workers = 2
	return c
}

// smithTeacher is Smith's rule on spptEnv's features: the shortest job first.
func smithTeacher(raw []float64) float64 { return -raw[0] }

// imitationTrainer is a trainer on smallConfig with the given imitation epochs, its teacher
// smithTeacher.
func imitationTrainer(t *testing.T, epochs int) *Trainer {
	t.Helper()
	c := smallConfig()
	c.ImitationEpochs = epochs
	tr, err := NewTrainer(c, spptSchema)
	if err != nil {
		t.Fatal(err)
	}
	tr.Teacher = smithTeacher
	return tr
}

// resume is tr's checkpoint written, read back and resumed.
func resume(t *testing.T, tr *Trainer) *Trainer {
	t.Helper()
	var buf bytes.Buffer
	if err := tr.Checkpoint().Write(&buf); err != nil {
		t.Fatal(err)
	}
	c, err := rank.ReadCheckpoint(&buf)
	if err != nil {
		t.Fatal(err)
	}
	r, err := Resume(c)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestPPOLearnsShortestFirst: PPO must discover Smith's rule from rewards alone.
func TestPPOLearnsShortestFirst(t *testing.T) {
	env := spptEnv{jobs: 10}
	tr, err := NewTrainer(smallConfig(), spptSchema)
	if err != nil {
		t.Fatal(err)
	}
	held := make([]int, 64)
	for i := range held {
		held[i] = 1<<19 + i // never played in training (training episodes count up from 0)
	}
	before := regret(t, env, tr.Policy, held)
	if err := tr.Train(context.Background(), env, 40, nil, nil); err != nil {
		t.Fatal(err)
	}
	after := regret(t, env, tr.Policy, held)
	t.Logf("regret vs SPT: before %.3f, after %.4f; rewards first %.3f last %.3f", before, after, tr.Curve[0].Reward, tr.Curve[len(tr.Curve)-1].Reward)
	if before < 0.05 {
		t.Fatalf("untrained policy already near-optimal (regret %.3f): the test would prove nothing", before)
	}
	if after > 0.01 {
		t.Fatalf("after training, mean completion time is %.1f %% above the optimum, want <= 1 %%", 100*after)
	}
}

// TestTrainingIsDeterministic: same seed, same parameters, whatever the number of workers.
func TestTrainingIsDeterministic(t *testing.T) {
	env := spptEnv{jobs: 8}
	run := func(workers int) []float64 {
		c := smallConfig()
		c.Workers = workers
		tr, err := NewTrainer(c, spptSchema)
		if err != nil {
			t.Fatal(err)
		}
		if err := tr.Train(context.Background(), env, 3, nil, nil); err != nil {
			t.Fatal(err)
		}
		return append(slices.Clone(tr.Policy.Actor.Params), tr.Policy.Critic.Params...)
	}
	a, b, c := run(1), run(2), run(2)
	if !slices.Equal(a, b) || !slices.Equal(b, c) {
		t.Fatal("training with the same seed gave different parameters")
	}
	other := smallConfig()
	other.Seed = 99
	tr, _ := NewTrainer(other, spptSchema)
	if err := tr.Train(context.Background(), env, 3, nil, nil); err != nil {
		t.Fatal(err)
	}
	if slices.Equal(a[:len(tr.Policy.Actor.Params)], tr.Policy.Actor.Params) {
		t.Fatal("a different seed gave identical parameters")
	}
}

// TestResumeContinuesExactly: training 2 epochs, saving, loading and training 2 more equals
// training 4 epochs straight.
func TestResumeContinuesExactly(t *testing.T) {
	env := spptEnv{jobs: 8}
	straight, err := NewTrainer(smallConfig(), spptSchema)
	if err != nil {
		t.Fatal(err)
	}
	if err := straight.Train(context.Background(), env, 4, nil, nil); err != nil {
		t.Fatal(err)
	}
	first, _ := NewTrainer(smallConfig(), spptSchema)
	if err := first.Train(context.Background(), env, 2, nil, nil); err != nil {
		t.Fatal(err)
	}
	resumed := resume(t, first)
	resumed.Config.Workers = 2
	if err := resumed.Train(context.Background(), env, 2, nil, nil); err != nil {
		t.Fatal(err)
	}
	if resumed.Epoch != 4 || len(resumed.Curve) != 4 {
		t.Fatalf("resumed run at epoch %d with %d curve points, want 4 and 4", resumed.Epoch, len(resumed.Curve))
	}
	if !slices.Equal(straight.Policy.Actor.Params, resumed.Policy.Actor.Params) ||
		!slices.Equal(straight.Policy.Critic.Params, resumed.Policy.Critic.Params) ||
		!slices.Equal(straight.Policy.Norm.Mean, resumed.Policy.Norm.Mean) {
		t.Fatal("resumed training diverged from uninterrupted training")
	}
}

// negEnv trains on the opposite of the real reward (a sabotaged fine-tuning source).
type negEnv struct{ spptEnv }

func (e negEnv) Play(ctx context.Context, ep int, a *Agent) (float64, error) {
	r, err := e.spptEnv.Play(ctx, ep, a)
	return -r, err
}

func TestFineTuneGuard(t *testing.T) {
	env := spptEnv{jobs: 8}
	held := []int{1 << 19, 1<<19 + 1, 1<<19 + 2, 1<<19 + 3, 1<<19 + 4, 1<<19 + 5, 1<<19 + 6, 1<<19 + 7}
	t.Run("improvement adopted", func(t *testing.T) {
		tr, _ := NewTrainer(smallConfig(), spptSchema)
		ft, err := NewFineTuner(tr.Checkpoint())
		if err != nil {
			t.Fatal(err)
		}
		ft.LR, ft.Epochs = 3e-3, 10
		var saved int
		ft.Save = func(*rank.Checkpoint) error { saved++; return nil }
		res, err := ft.Step(context.Background(), env, env, held)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("before %.3f after %.3f", res.Before, res.After)
		if !res.Accepted || res.After <= res.Before || saved != 1 {
			t.Fatalf("improving step not adopted: %+v (saved %d)", res, saved)
		}
		if ft.Good().Training.Epoch != 10 {
			t.Fatalf("adopted checkpoint at epoch %d, want 10", ft.Good().Training.Epoch)
		}
		if lr := ft.Good().Training.AdamPi.LR; lr != smallConfig().PolicyLR {
			t.Fatalf("adopted checkpoint keeps fine-tuning lr %g, want training lr %g", lr, smallConfig().PolicyLR)
		}
	})
	t.Run("regression rejected", func(t *testing.T) {
		tr, _ := NewTrainer(smallConfig(), spptSchema)
		if err := tr.Train(context.Background(), env, 15, nil, nil); err != nil {
			t.Fatal(err)
		}
		good := tr.Checkpoint()
		ft, _ := NewFineTuner(good)
		ft.LR, ft.Epochs = 1e-2, 10
		res, err := ft.Step(context.Background(), negEnv{env}, env, held)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("before %.3f after %.3f", res.Before, res.After)
		if res.Accepted || res.After >= res.Before {
			t.Fatalf("regressing step adopted or did not regress: %+v", res)
		}
		if ft.Good() != good {
			t.Fatal("last good checkpoint replaced after a regression")
		}
	})
}

// shiftEnv adds a constant to every reward: a baseline that much better (negative) or worse.
type shiftEnv struct {
	spptEnv
	shift float64
}

func (e shiftEnv) Play(ctx context.Context, ep int, a *Agent) (float64, error) {
	r, err := e.spptEnv.Play(ctx, ep, a)
	return r + e.shift, err
}

// With BeatBaseline, an improving step is adopted only when it also beats the evaluation
// environment's baseline (mean reward above 0), and the adopted checkpoint records the evidence
// and drops the held-out verdict of the weights it replaced.
func TestFineTuneBeatBaseline(t *testing.T) {
	env := spptEnv{jobs: 8}
	held := []int{1 << 19, 1<<19 + 1, 1<<19 + 2, 1<<19 + 3, 1<<19 + 4, 1<<19 + 5, 1<<19 + 6, 1<<19 + 7}
	for _, c := range []struct {
		name         string
		beatBaseline bool
		shift        float64
		adopted      bool
	}{
		{"improvement below a better baseline, no guard", false, -5, true},
		{"improvement below a better baseline, guard", true, -5, false},
		{"improvement above the baseline, guard", true, 0, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			tr, _ := NewTrainer(smallConfig(), spptSchema)
			good := tr.Checkpoint()
			v, err := rank.JudgeVerdict([]rank.VerdictRatio{{Cluster: "a", Metric: "jct", Ratio: 1.2}, {Cluster: "a", Trace: "w", Metric: "jct", Ratio: 1.2}},
				rank.VerdictPooledMax, rank.VerdictWindowMax)
			if err != nil {
				t.Fatal(err)
			}
			good.Meta = v.SetMeta(map[string]string{"cluster": "test"})
			ft, err := NewFineTuner(good)
			if err != nil {
				t.Fatal(err)
			}
			ft.LR, ft.Epochs, ft.BeatBaseline = 3e-3, 10, c.beatBaseline
			res, err := ft.Step(context.Background(), env, shiftEnv{env, c.shift}, held)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("before %.3f after %.3f", res.Before, res.After)
			if res.After <= res.Before || res.Accepted != c.adopted {
				t.Fatalf("step %+v; want an improvement, adopted %v", res, c.adopted)
			}
			if !c.adopted {
				if ft.Good() != good {
					t.Fatal("last good checkpoint replaced by a rejected step")
				}
				return
			}
			m := ft.Good().Meta
			if m["cluster"] != "test" || m[rank.MetaVerdict] != "" || m[rank.MetaTunedBeatsBaseline] != fmt.Sprint(c.beatBaseline) || m[rank.MetaTunedEpisodes] != "8" {
				t.Fatalf("adopted meta %v", m)
			}
			if good.Meta[rank.MetaVerdict] == "" {
				t.Fatal("adoption changed the last good checkpoint's meta")
			}
		})
	}
}

// TestImitationLearnsTeacher: imitation epochs alone make the policy reproduce the teacher
// (here Smith's rule), and no PPO step runs during them.
func TestImitationLearnsTeacher(t *testing.T) {
	env := spptEnv{jobs: 10}
	tr := imitationTrainer(t, 8)
	held := []int{1 << 19, 1<<19 + 1, 1<<19 + 2, 1<<19 + 3, 1<<19 + 4, 1<<19 + 5, 1<<19 + 6, 1<<19 + 7}
	if err := tr.Train(context.Background(), env, 8, nil, nil); err != nil {
		t.Fatal(err)
	}
	r := regret(t, env, tr.Policy, held)
	t.Logf("regret after imitation: %.4f; rollout rewards %.3f (the teacher's)", r, tr.Curve[7].Reward)
	if r > 0.01 {
		t.Fatalf("imitation left a regret of %.1f %%, want <= 1 %%", 100*r)
	}
	// The rollouts were the teacher's: every one scores the optimum's reward.
	for _, s := range tr.Curve {
		if s.Reward < 0.1 {
			t.Fatalf("epoch %d rollouts were not the teacher's (reward %.3f)", s.Epoch, s.Reward)
		}
	}
}

type countEnv struct{ n, id int }

func (c countEnv) Episodes() int { return c.n }
func (c countEnv) Play(_ context.Context, ep int, _ *Agent) (float64, error) {
	return float64(c.id*100 + ep), nil
}

func TestMultiEnv(t *testing.T) {
	m := MultiEnv{countEnv{2, 1}, countEnv{3, 2}}
	if m.Episodes() != 5 {
		t.Fatalf("%d episodes", m.Episodes())
	}
	for ep, want := range []float64{100, 101, 200, 201, 202} {
		if got, err := m.Play(context.Background(), ep, nil); err != nil || got != want {
			t.Fatalf("episode %d: %v, %v; want %v", ep, got, err, want)
		}
	}
	if _, err := m.Play(context.Background(), 5, nil); err == nil {
		t.Fatal("episode past the end accepted")
	}
}
