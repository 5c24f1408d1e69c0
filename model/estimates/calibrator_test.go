package estimates

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hetgpu/hetgpu/model/cluster"
)

func mustNew(t *testing.T, cfg Config) *Calibrator {
	t.Helper()
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// feed gives c n runs whose true runtime is the estimate times exp(bias + sigma z).
func feed(c *Calibrator, r *rand.Rand, n int, bias, sigma float64) {
	for range n {
		est := time.Duration((0.1 + r.Float64()*10) * float64(time.Hour))
		c.Observe(est, time.Duration(float64(est)*math.Exp(bias+sigma*r.NormFloat64())))
	}
}

// TestCalibratorLearns: from the prior, the model moves to the users' true bias and spread,
// and a window forgets the habits users had before.
func TestCalibratorLearns(t *testing.T) {
	for _, c := range []struct {
		name                string
		prior               cluster.EstimateModel
		bias, sigma         float64
		runs                int
		wantBias, wantSigma float64
		tol                 float64
	}{
		{"unbiased users, prior right", cluster.EstimateModel{Sigma: 0.5}, 0, 0.5, 2000, 0, 0.5, 0.06},
		{"overestimating users, prior too narrow", cluster.EstimateModel{Sigma: 0.25}, -0.7, 0.5, 2000, -0.7, 0.5, 0.06},
		// The prior keeps its 20 runs' weight against the window's 500: (20 x (1 + 0.1²) + 500 x 0.1²) / 520.
		{"accurate users, prior too wide", cluster.EstimateModel{Sigma: 1}, 0.1, 0.1, 2000, 0.1, math.Sqrt((20*1.01 + 500*0.01) / 520), 0.02},
		{"prior of exact estimates, noisy users", cluster.EstimateModel{}, 0.3, 1, 2000, 0.3, 1, 0.12},
		// 20 runs against a prior of 20: half way.
		{"few runs stay near the prior", cluster.EstimateModel{Sigma: 0.5}, -1, 0, 20, -0.5, math.Sqrt(0.125 + 0.25), 0.02},
	} {
		t.Run(c.name, func(t *testing.T) {
			cal := mustNew(t, Config{Prior: c.prior})
			if m := cal.Model(); m != c.prior {
				t.Fatalf("before any run: %+v, want the prior %+v", m, c.prior)
			}
			feed(cal, rand.New(rand.NewPCG(1, 2)), c.runs, c.bias, c.sigma)
			m := cal.Model()
			if math.Abs(m.Bias-c.wantBias) > c.tol || math.Abs(m.Sigma-c.wantSigma) > c.tol {
				t.Errorf("after %d runs: bias %.3f sigma %.3f, want %.3f and %.3f (+-%.2f)", c.runs, m.Bias, m.Sigma, c.wantBias, c.wantSigma, c.tol)
			}
			if s := cal.Stats(); s.Runs != min(c.runs, DefaultWindow) || s.Observed != c.runs || s.Bias != m.Bias || s.PriorSigma != c.prior.Sigma {
				t.Errorf("stats %+v after %d runs", s, c.runs)
			}
		})
	}
}

func TestCalibratorWindowForgets(t *testing.T) {
	cal := mustNew(t, Config{Prior: cluster.EstimateModel{Sigma: 0.5}, Window: 100})
	r := rand.New(rand.NewPCG(3, 4))
	feed(cal, r, 1000, 1, 0.2) // users who underestimate by e
	if m := cal.Model(); m.Bias < 0.7 {
		t.Fatalf("bias %.3f after 1000 runs at 1", m.Bias)
	}
	feed(cal, r, 100, 0, 0.2) // then estimate right
	m := cal.Model()
	if math.Abs(m.Bias) > 0.06 || math.Abs(m.Sigma-math.Sqrt((20*0.25+100*0.04)/120)) > 0.05 {
		t.Errorf("after a window of unbiased runs: bias %.3f sigma %.3f, want the old habit forgotten", m.Bias, m.Sigma)
	}
	if s := cal.Stats(); s.Runs != 100 || s.Observed != 1100 {
		t.Errorf("stats %+v, want 100 runs in the window of 1100 observed", s)
	}
}

// TestCalibratorOddRuns: runs without an estimate or runtime are skipped, and one run off by a
// factor of a million weighs as one off by e^3.
func TestCalibratorOddRuns(t *testing.T) {
	cal := mustNew(t, Config{Prior: cluster.EstimateModel{Sigma: 0.5}})
	for _, r := range [][2]time.Duration{{0, time.Hour}, {time.Hour, 0}, {-time.Hour, time.Hour}} {
		if cal.Observe(r[0], r[1]) {
			t.Errorf("Observe(%v, %v) used", r[0], r[1])
		}
	}
	if s := cal.Stats(); s.Runs != 0 || s.Skipped != 3 || cal.Model() != (cluster.EstimateModel{Sigma: 0.5}) {
		t.Fatalf("after skipped runs: %+v", s)
	}
	if !cal.Observe(time.Second, 1e6*time.Second) {
		t.Fatal("a long run not used")
	}
	if m, want := cal.Model().Bias, 3.0/21; math.Abs(m-want) > 1e-12 {
		t.Errorf("bias after one run a million times its estimate: %v, want %v (clamped to 3, prior of 20)", m, want)
	}
}

func TestCalibratorConfig(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{Prior: cluster.EstimateModel{Sigma: -1}}, "prior sigma = -1"},
		{Config{Prior: cluster.EstimateModel{Sigma: 4}}, "prior sigma = 4"},
		{Config{Prior: cluster.EstimateModel{Bias: math.NaN()}}, "prior bias = NaN"},
		{Config{PriorRuns: -1}, "prior runs = -1"},
		{Config{PriorRuns: math.Inf(1)}, "prior runs = +Inf"},
		{Config{Window: -5}, "window = -5"},
	} {
		_, err := New(c.cfg)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New(%+v) = %v, want an error naming %q", c.cfg, err, c.want)
		}
	}
}

// TestCalibratorConcurrent: the learn path and snapshots may meet (run with -race).
func TestCalibratorConcurrent(t *testing.T) {
	cal := mustNew(t, Config{Prior: cluster.EstimateModel{Sigma: 0.5}, Window: 64})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 9))
			for range 500 {
				feed(cal, r, 1, 0, 0.5)
				if m := cal.Model(); !(m.Sigma >= 0) {
					t.Errorf("sigma %v", m.Sigma)
					return
				}
			}
		}()
	}
	wg.Wait()
	if s := cal.Stats(); s.Observed != 2000 || s.Runs != 64 {
		t.Errorf("stats %+v, want 2000 observed, 64 in the window", s)
	}
}

// TestCalibratorRestore: the samples a calibrator saves give a new one the same model, and a
// run seen again after a restart (same key) is not counted twice.
func TestCalibratorRestore(t *testing.T) {
	cfg := Config{Prior: cluster.EstimateModel{Sigma: 0.5}, Window: 50}
	a := mustNew(t, cfg)
	r := rand.New(rand.NewPCG(5, 6))
	for i := range 80 {
		est := time.Duration((1 + r.Float64()) * float64(time.Hour))
		a.ObserveRun(fmt.Sprintf("run-%d", i), est, time.Duration(float64(est)*math.Exp(-0.3+0.4*r.NormFloat64())))
	}
	saved := a.Samples()
	if len(saved) != 50 || saved[0].Key != "run-30" || saved[49].Key != "run-79" {
		t.Fatalf("saved %d samples from %q to %q, want the newest 50, oldest first", len(saved), saved[0].Key, saved[len(saved)-1].Key)
	}
	b := mustNew(t, cfg)
	if err := b.Restore(saved); err != nil {
		t.Fatal(err)
	}
	if ma, mb := a.Model(), b.Model(); math.Abs(ma.Bias-mb.Bias) > 1e-12 || math.Abs(ma.Sigma-mb.Sigma) > 1e-12 {
		t.Errorf("restored model %+v, want %+v", mb, ma)
	}
	if b.ObserveRun("run-79", time.Hour, 10*time.Hour) {
		t.Error("a run already in the window counted again")
	}
	if !b.ObserveRun("run-80", time.Hour, time.Hour) || b.Stats().Runs != 50 {
		t.Errorf("a new run: stats %+v", b.Stats())
	}
	if err := b.Restore([]Sample{{Key: "bad", X: math.NaN()}}); err == nil || !strings.Contains(err.Error(), `(run "bad"): x = NaN`) {
		t.Errorf("restoring a NaN sample: %v", err)
	}
}
