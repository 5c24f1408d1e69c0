package sim

import (
	"context"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"time"

	"github.com/hetgpu/hetgpu/model/cluster"
)

// DefaultEstimateSigma is the spread of simulated user runtime estimates: each job's estimate is
// its true runtime (on gpuspec.ReferenceGPU) times exp(Sigma x z), z ~ N(0, 1) fixed per job. With
// 0.5, half of the estimates are off by more than 40 %: what a user who declares a step count and
// reads a throughput off a dashboard, or who stops early, would give. Policies that use
// estimates (hetgpu, F1) all see the same noisy values; sjf alone sees exact ones.
const DefaultEstimateSigma = 0.5

// Estimates controls the runtime estimates (cluster.Annotations.EstRuntime) a policy sees.
type Estimates struct {
	// Off hides estimates altogether.
	Off bool
	// Sigma is the log-normal error (DefaultEstimateSigma when zero; negative = exact).
	Sigma float64
	// Seed makes the per-job errors reproducible.
	Seed uint64
}

func (e Estimates) sigma() float64 {
	switch {
	case e.Sigma < 0:
		return 0
	case e.Sigma == 0:
		return DefaultEstimateSigma
	}
	return e.Sigma
}

// Factor is the job's fixed estimate error.
func (e Estimates) Factor(key string) float64 {
	s := e.sigma()
	if s == 0 {
		return 1
	}
	h := fnv.New64a()
	h.Write([]byte(key))
	z := rand.New(rand.NewPCG(e.Seed, h.Sum64())).NormFloat64()
	return math.Exp(s * z)
}

// estimating is the engine inside a round, whose snapshots carry the configured estimates (the
// engine, asked for oracle information, fills exact remaining runtimes; the wrapper perturbs or
// hides them).
type estimating struct {
	e   *Engine
	est Estimates
	// factors, when set, memoises Factor by job key across rounds.
	factors map[string]float64
	// snap is the last snapshot taken (the round hands its arrays back, see Engine.recycle).
	snap *cluster.Snapshot
}

// factor is the job's Factor, memoised when the round has a memo.
func (c *estimating) factor(key string) float64 {
	if c.factors == nil {
		return c.est.Factor(key)
	}
	f, ok := c.factors[key]
	if !ok {
		f = c.est.Factor(key)
		c.factors[key] = f
	}
	return f
}

func (c *estimating) Snapshot(ctx context.Context) (*cluster.Snapshot, error) {
	snap := c.e.snapshot()
	c.snap = snap
	for _, jobs := range [][]cluster.Job{snap.Pending, snap.Preemptible} {
		for i := range jobs {
			j := &jobs[i]
			if c.est.Off {
				j.Hetgpu.EstRuntime = 0
				continue
			}
			if j.Hetgpu.EstRuntime <= 0 {
				continue
			}
			if js := c.e.byKey[j.Key()]; c.e.cfg.LiveEstimates && c.est.sigma() > 0 && js != nil && js.RefS > 0 {
				est := time.Duration(js.RefS * c.factor(j.Key()) * float64(time.Second))
				ran := time.Duration(js.RunTime(c.e.now) * float64(time.Second))
				j.Hetgpu.EstRuntime = cluster.EstimateModel{Sigma: c.e.cfg.EstimateError}.Remaining(est, ran)
				continue
			}
			j.Hetgpu.EstRuntime = time.Duration(float64(j.Hetgpu.EstRuntime) * c.factor(j.Key()))
		}
	}
	return snap, nil
}

// Preempt implements cluster.Preempter.
func (c *estimating) Preempt(ctx context.Context, ps []cluster.Preemption) ([]cluster.PinResult, error) {
	return c.e.preemptAll(ps), nil
}

func (c *estimating) Pin(ctx context.Context, ds []cluster.Decision) ([]cluster.PinResult, error) {
	return c.e.pin(ds), nil
}
