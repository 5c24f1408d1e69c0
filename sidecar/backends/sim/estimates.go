package sim

import (
	"context"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/hetgpu/hetgpu/model/cluster"
	"github.com/hetgpu/hetgpu/model/history"
	"github.com/hetgpu/hetgpu/sidecar/sched"
)

// DefaultEstimateSigma is the spread of simulated user runtime estimates: each job's estimate is
// its true runtime (on gpuspec.ReferenceGPU) times exp(Sigma x z), z ~ N(0, 1) fixed per job. With
// 0.5, half of the estimates are off by more than 40 %: what a user who declares a step count and
// reads a throughput off a dashboard, or who stops early, would give. Policies that use
// estimates (hetgpu, F1) all see the same noisy values; sjf alone sees exact ones.
const DefaultEstimateSigma = 0.5

// EstimateReplay says how a run replays the runtime estimates of the policies that see noisy
// ones (Estimates with a positive sigma): the same for every policy of a comparison.
type EstimateReplay struct {
	// LiveEstimates makes the estimates what the live sidecar computes from a user's
	// hetgpu.runtime: the job's whole runtime on the reference type times its error factor,
	// minus the time it has run (cluster.EstimateModel with EstimateError). Without it the
	// error factor scales what is left of the runtime, so an estimate never runs out and never
	// stays above zero at the end.
	LiveEstimates bool
	// EstimateError is the live estimates' EstimateModel sigma (the sidecar's
	// ranker.estimate_error); 0 takes the estimate minus the time run.
	EstimateError float64
	// CalibrateEstimates learns the live estimates' model from the jobs that finish, starting
	// at EstimateError (estimates.Calibrator, the sidecar's ranker.calibrate_estimates).
	CalibrateEstimates bool
	// EstimateSkew is the users' habit: the median of estimate / true runtime (1 when zero; 2
	// for users who ask for twice what their jobs take). Every noisy estimate is scaled by it.
	EstimateSkew float64
	// EstimateSkewSpread makes teams differ: each namespace's estimates are further scaled by
	// exp(EstimateSkewSpread x z), z ~ N(0, 1) fixed per namespace (0: every team alike).
	EstimateSkewSpread float64
	// NoEstimates replays users who write no hetgpu.runtime: no job carries an estimate (the
	// policies that would see noisy ones see none; oracles keep theirs).
	NoEstimates bool
	// PartialEstimates, in (0, 1), is the share of namespaces whose users write hetgpu.runtime
	// (of jobs, in a trace with one namespace), drawn with the run's seed; the rest write none.
	PartialEstimates float64
	// DeclareSteps makes every job declare hetgpu.steps, its total work, as a user who knows
	// epochs x steps would.
	DeclareSteps bool
}

// Regime names what users tell in this replay, as --estimates spells it: "scaled", "live",
// "live:SIGMA", "live:auto:SIGMA", "none" or "partial:F", with "+steps" when jobs declare
// hetgpu.steps.
func (r EstimateReplay) Regime() string {
	var s string
	switch {
	case r.NoEstimates:
		s = "none"
	case r.PartialEstimates > 0:
		s = "partial:" + strconv.FormatFloat(r.PartialEstimates, 'g', -1, 64)
	case r.CalibrateEstimates:
		s = "live:auto:" + strconv.FormatFloat(r.EstimateError, 'g', -1, 64)
	case r.LiveEstimates && r.EstimateError > 0:
		s = "live:" + strconv.FormatFloat(r.EstimateError, 'g', -1, 64)
	case r.LiveEstimates:
		s = "live"
	default:
		s = "scaled"
	}
	if r.DeclareSteps {
		s += "+steps"
	}
	return s
}

// Validate names the first unusable field.
func (r EstimateReplay) Validate() error {
	switch {
	case !(r.EstimateError >= 0 && r.EstimateError <= cluster.MaxEstimateSigma):
		return fmt.Errorf("sim: estimate error = %v, expected 0 to %d", r.EstimateError, cluster.MaxEstimateSigma)
	case !(r.EstimateSkew == 0 || r.EstimateSkew >= 0.05 && r.EstimateSkew <= 20):
		return fmt.Errorf("sim: estimate skew = %v, expected a factor from 0.05 to 20 (median estimate / true runtime)", r.EstimateSkew)
	case !(r.EstimateSkewSpread >= 0 && r.EstimateSkewSpread <= cluster.MaxEstimateSigma):
		return fmt.Errorf("sim: estimate skew spread = %v, expected 0 to %d (sigma of log skew between namespaces)", r.EstimateSkewSpread, cluster.MaxEstimateSigma)
	case r.CalibrateEstimates && !r.LiveEstimates:
		return fmt.Errorf("sim: calibrated estimates need live estimates")
	case !(r.PartialEstimates >= 0 && r.PartialEstimates < 1):
		return fmt.Errorf("sim: partial estimates = %v, expected a share of namespaces above 0 and below 1", r.PartialEstimates)
	case r.NoEstimates && r.PartialEstimates > 0:
		return fmt.Errorf("sim: no estimates and partial estimates (%v) together, expected one of them", r.PartialEstimates)
	}
	return nil
}

// Estimates controls the runtime estimates (cluster.Annotations.EstRuntime) a policy sees.
type Estimates struct {
	// Off hides estimates altogether.
	Off bool
	// Sigma is the log-normal error (DefaultEstimateSigma when zero; negative = exact).
	Sigma float64
	// Seed makes the per-job errors reproducible.
	Seed uint64
	// Hindsight teaches the policy's estimates step, before the first round, the whole runtime
	// of every job of the run: the runtime distribution of each group of similar jobs known
	// in hindsight, not each job's own runtime (its run is left out of the job level; at the
	// coarser levels it is one of its group's runs). What any order that reads a job's
	// runtime from its peers could know at best: the ceiling of history-based ranking.
	Hindsight bool
}

func (e Estimates) sigma() float64 { return cluster.SigmaSetting(e.Sigma, DefaultEstimateSigma) }

// Factor is the job's fixed estimate error.
func (e Estimates) Factor(key string) float64 {
	s := e.sigma()
	if s == 0 {
		return 1
	}
	return math.Exp(s * e.z(key))
}

// z is a standard normal draw fixed by key and Seed.
func (e Estimates) z(key string) float64 { return e.rand(key).NormFloat64() }

// u is a uniform draw in [0, 1) fixed by key and Seed.
func (e Estimates) u(key string) float64 { return e.rand(key).Float64() }

func (e Estimates) rand(key string) *rand.Rand {
	h := fnv.New64a()
	h.Write([]byte(key))
	return rand.New(rand.NewPCG(e.Seed, h.Sum64()))
}

// estimating writes the configured estimates into a round's snapshot (the pipeline's
// UserEstimates step: the engine, asked for oracle information, fills exact remaining
// runtimes; replay perturbs or hides them as the users of the replay would write them).
type estimating struct {
	e   *Engine
	est Estimates
	// factors, when set, memoises Factor by job key across rounds.
	factors map[string]float64
	// learn, when set, is the policy's estimates step, taught the runtime of every job that
	// finishes, as the live sidecar teaches it from the runs it sees end.
	learn sched.Estimator
	// tells memoises, per namespace (or job), whether its users write hetgpu.runtime under
	// PartialEstimates.
	tells map[string]bool
}

// tellsRuntime reports whether the users of the job with key in namespace ns write
// hetgpu.runtime in this replay.
func (c *estimating) tellsRuntime(ns, jobKey string) bool {
	r := c.e.cfg.EstimateReplay
	switch {
	case r.NoEstimates:
		return false
	case r.PartialEstimates <= 0:
		return true
	}
	key := "namespace:" + ns
	if c.e.namespaces < 2 {
		key = "job:" + jobKey
	}
	t, ok := c.tells[key]
	if !ok {
		t = c.est.u("partial/"+key) < r.PartialEstimates
		if c.tells != nil {
			c.tells[key] = t
		}
	}
	return t
}

// primeHindsight teaches the estimates step every job's runtime on the reference type before
// the first round (Estimates.Hindsight). Each run is keyed as the job's own finished run will
// be, so that one is not counted twice, and has no family, so that no job is read by its own
// runtime at the job level.
func (c *estimating) primeHindsight() {
	if c.learn == nil {
		return
	}
	for _, js := range c.e.jobs {
		if js.RefS <= 0 {
			continue
		}
		cj := c.e.clusterJob(js)
		hj := history.JobOf(&cj)
		hj.Family = ""
		c.learn.ObserveRuntime(history.Run{Key: js.Key, Job: hj, RuntimeS: js.RefS})
	}
}

// observeFinished teaches the estimates step the whole runtime, on the reference type, of each
// job finished since the last round.
func (c *estimating) observeFinished() {
	if c.learn == nil {
		c.e.historied = len(c.e.finished)
		return
	}
	for ; c.e.historied < len(c.e.finished); c.e.historied++ {
		js := c.e.finished[c.e.historied]
		if js.RefS <= 0 {
			continue
		}
		cj := c.e.clusterJob(js)
		c.learn.ObserveRuntime(history.Run{Key: js.Key, Job: history.JobOf(&cj), RuntimeS: js.RefS})
	}
}

// factor is the job's Factor times the users' skew, memoised when the round has a memo.
func (c *estimating) factor(key string) float64 {
	if c.factors == nil {
		return c.skewed(key)
	}
	f, ok := c.factors[key]
	if !ok {
		f = c.skewed(key)
		c.factors[key] = f
	}
	return f
}

// skewed is the job's Factor times the users' habits (EstimateSkew, EstimateSkewSpread).
func (c *estimating) skewed(key string) float64 {
	f := c.est.Factor(key)
	if c.est.sigma() == 0 {
		return f
	}
	if k := c.e.cfg.EstimateSkew; k > 0 {
		f *= k
	}
	if sp := c.e.cfg.EstimateSkewSpread; sp > 0 {
		ns, _, _, _ := cluster.SplitGroupKey(key)
		f *= math.Exp(sp * c.est.z("namespace:"+ns))
	}
	return f
}

// replay writes the estimates into snap's pending and preemptible jobs.
func (c *estimating) replay(snap *cluster.Snapshot) {
	fixed := cluster.EstimateModel{Sigma: c.e.cfg.EstimateError}
	model := func(string) cluster.EstimateModel { return fixed }
	if cal := c.e.calib; cal != nil && c.e.cfg.LiveEstimates && !c.est.Off && c.est.sigma() > 0 {
		// The jobs finished since the last round teach the models, as finished runs teach the
		// live sidecar's: each one's estimate against its true runtime on the reference type.
		for ; c.e.calibrated < len(c.e.finished); c.e.calibrated++ {
			js := c.e.finished[c.e.calibrated]
			if js.RefS > 0 && c.tellsRuntime(js.Namespace, js.Key) {
				cal.ObserveRun(js.Namespace, "", seconds(js.RefS*c.factor(js.Key)), seconds(js.RefS))
			}
		}
		model = cal.Model
	}
	c.observeFinished()
	replay := c.e.cfg.EstimateReplay
	for _, jobs := range [][]cluster.Job{snap.Pending, snap.Preemptible} {
		for i := range jobs {
			j := &jobs[i]
			if replay.DeclareSteps {
				if js := c.e.byKey[j.Key()]; js != nil {
					j.Hetgpu.Steps = js.TotalSteps
				}
			}
			if c.est.Off || c.est.sigma() > 0 && !c.tellsRuntime(j.Namespace, j.Key()) {
				j.Hetgpu.EstRuntime = 0
				continue
			}
			if j.Hetgpu.EstRuntime <= 0 {
				continue
			}
			if js := c.e.byKey[j.Key()]; c.e.cfg.LiveEstimates && c.est.sigma() > 0 && js != nil && js.RefS > 0 {
				est := time.Duration(js.RefS * c.factor(j.Key()) * float64(time.Second))
				ran := time.Duration(js.RunTime(c.e.now) * float64(time.Second))
				j.Hetgpu.EstRuntime = model(j.Namespace).Remaining(est, ran)
				continue
			}
			j.Hetgpu.EstRuntime = time.Duration(float64(j.Hetgpu.EstRuntime) * c.factor(j.Key()))
		}
	}
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// inRound is the engine as a round's pipeline sees it: the round runs with the engine's lock
// held, so these are the engine's methods without taking it.
type inRound struct {
	e *Engine
	// snap is the last snapshot taken (the round hands its arrays back, see Engine.recycle).
	snap *cluster.Snapshot
}

func (c *inRound) Snapshot(ctx context.Context) (*cluster.Snapshot, error) {
	c.snap = c.e.snapshot()
	return c.snap, nil
}

// Preempt implements cluster.Preempter.
func (c *inRound) Preempt(ctx context.Context, ps []cluster.Preemption) ([]cluster.PinResult, error) {
	return c.e.preemptAll(ps), nil
}

func (c *inRound) Pin(ctx context.Context, ds []cluster.Decision) ([]cluster.PinResult, error) {
	return c.e.pin(ds), nil
}
