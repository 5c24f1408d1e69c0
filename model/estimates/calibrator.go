// Package estimates learns how far users' runtime estimates (hetgpu.runtime) are off from the
// runs that finish, so that the ranker reads a running job's estimate with the error its users
// really make (cluster.EstimateModel) instead of a configured guess.
//
// Each finished run gives one sample x = log(true runtime / estimate), both on the reference GPU
// type. The model's Bias is the samples' mean and its Sigma their spread, each shrunk towards
// the configured prior (bias 0, sigma ranker.estimate_error) as if the prior were PriorRuns
// runs: a new cluster starts at the prior and moves with evidence, and one odd run moves it
// little. Only the newest Window runs count, so the model follows users who change their habits.
package estimates

import (
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/hetgpu/hetgpu/model/cluster"
)

// Defaults of Config.
const (
	DefaultPriorRuns = 20
	DefaultWindow    = 500
)

// maxLogRatio bounds one sample: a run 20 times shorter or longer than its estimate says the
// estimate was worthless, not how worthless (a crash that exits 0 after a second, a forgotten
// unit) and must not swing the model alone.
const maxLogRatio = cluster.MaxEstimateSigma

// Config configures a Calibrator.
type Config struct {
	// Prior is the model before any run: its Sigma is ranker.estimate_error, its Bias usually 0.
	Prior cluster.EstimateModel
	// PriorRuns is how many runs the prior weighs (DefaultPriorRuns when zero).
	PriorRuns float64
	// Window is how many of the newest runs count (DefaultWindow when zero), in the cluster
	// and in each namespace (Set).
	Window int
	// NamespaceRuns is how many runs the cluster-wide model weighs in a namespace's (Set;
	// DefaultNamespaceRuns when zero).
	NamespaceRuns float64
}

// Validate names the first unusable field.
func (c Config) Validate() error {
	switch {
	case !(c.Prior.Sigma >= 0 && c.Prior.Sigma <= cluster.MaxEstimateSigma):
		return fmt.Errorf("estimate calibration: prior sigma = %v, expected 0 to %d", c.Prior.Sigma, cluster.MaxEstimateSigma)
	case !(math.Abs(c.Prior.Bias) <= maxLogRatio):
		return fmt.Errorf("estimate calibration: prior bias = %v, expected -%d to %d", c.Prior.Bias, maxLogRatio, maxLogRatio)
	case !(c.PriorRuns >= 0) || math.IsInf(c.PriorRuns, 0):
		return fmt.Errorf("estimate calibration: prior runs = %v, expected a finite number >= 0", c.PriorRuns)
	case c.Window < 0:
		return fmt.Errorf("estimate calibration: window = %d, expected >= 0", c.Window)
	}
	return nil
}

// Stats is what a Calibrator has learned, for /v1/health and metrics.
type Stats struct {
	// Runs is how many finished runs the model is learned from (at most Window).
	Runs int `json:"runs"`
	// Bias and Sigma are the model the ranker reads estimates with.
	Bias  float64 `json:"bias"`
	Sigma float64 `json:"sigma"`
	// PriorSigma is ranker.estimate_error, where the model starts.
	PriorSigma float64 `json:"prior_sigma"`
	// Observed counts every run given to Observe, Skipped those without a usable estimate or runtime.
	Observed int `json:"observed"`
	Skipped  int `json:"skipped"`
	// Namespaces are the per-namespace models (Set), by name.
	Namespaces []NamespaceStats `json:"namespaces,omitempty"`
}

// Calibrator is safe for concurrent use: the learn path writes, every snapshot reads.
type Calibrator struct {
	cfg Config

	mu      sync.Mutex
	ring    []Sample
	keys    map[string]bool // keys of the runs in ring
	next, n int
	sum, sq float64
	model   cluster.EstimateModel
	obs     int
	skipped int
}

// New validates cfg and returns a calibrator at its prior.
func New(cfg Config) (*Calibrator, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.PriorRuns == 0 {
		cfg.PriorRuns = DefaultPriorRuns
	}
	if cfg.Window == 0 {
		cfg.Window = DefaultWindow
	}
	return &Calibrator{cfg: cfg, ring: make([]Sample, cfg.Window), keys: map[string]bool{}, model: cfg.Prior}, nil
}

// Sample is one finished run's log(true runtime / estimate), with the run's key when it has one
// and its namespace (Set).
type Sample struct {
	Key string  `json:"key,omitempty"`
	NS  string  `json:"ns,omitempty"`
	X   float64 `json:"x"`
}

// Observe learns from one finished run: est is the user's estimate and actual the runtime it
// took, both on the reference GPU type. It reports whether the run was used (both positive).
func (c *Calibrator) Observe(est, actual time.Duration) bool { return c.ObserveRun("", est, actual) }

// ObserveRun is Observe for a run with a key: a run whose key is already in the window (seen
// again after a restart) is not counted twice.
func (c *Calibrator) ObserveRun(key string, est, actual time.Duration) bool {
	_, ok := c.observe(Sample{Key: key}, est, actual)
	return ok
}

// observe adds s with x computed from est and actual; it returns the sample as added.
func (c *Calibrator) observe(s Sample, est, actual time.Duration) (Sample, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s.Key != "" && c.keys[s.Key] {
		return s, false
	}
	c.obs++
	if est <= 0 || actual <= 0 {
		c.skipped++
		return s, false
	}
	s.X = math.Max(-maxLogRatio, math.Min(maxLogRatio, math.Log(actual.Seconds()/est.Seconds())))
	c.add(s)
	c.fit()
	return s, true
}

// addSample adds a sample already computed, unless its run is in the window.
func (c *Calibrator) addSample(s Sample) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s.Key != "" && c.keys[s.Key] {
		return false
	}
	c.obs++
	c.add(s)
	c.fit()
	return true
}

// sums are the window's sum, sum of squares and size.
func (c *Calibrator) sums() (sum, sq float64, n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sum, c.sq, c.n
}

// add puts s in the window, dropping the oldest run when it is full (callers hold c.mu).
func (c *Calibrator) add(s Sample) {
	if c.n == len(c.ring) {
		old := c.ring[c.next]
		c.sum -= old.X
		c.sq -= old.X * old.X
		delete(c.keys, old.Key)
	} else {
		c.n++
	}
	c.ring[c.next] = s
	if s.Key != "" {
		c.keys[s.Key] = true
	}
	c.next = (c.next + 1) % len(c.ring)
	c.sum += s.X
	c.sq += s.X * s.X
	if c.next == 0 {
		// Running sums drift by rounding; a full turn of the ring recomputes them.
		c.sum, c.sq = 0, 0
		for _, v := range c.ring[:c.n] {
			c.sum += v.X
			c.sq += v.X * v.X
		}
	}
}

// Samples are the window's runs, oldest first: what Restore takes back after a restart.
func (c *Calibrator) Samples() []Sample {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]Sample, 0, c.n)
	start := 0
	if c.n == len(c.ring) {
		start = c.next
	}
	for i := range c.n {
		out = append(out, c.ring[(start+i)%len(c.ring)])
	}
	return out
}

// Restore adds saved samples (oldest first) as if their runs had just finished; a sample out
// of range is an error naming it, and none is added then.
func (c *Calibrator) Restore(ss []Sample) error {
	if err := checkSamples(ss); err != nil {
		return err
	}
	for _, s := range ss {
		c.addSample(s)
	}
	return nil
}

func checkSamples(ss []Sample) error {
	for i, s := range ss {
		if !(math.Abs(s.X) <= maxLogRatio) {
			return fmt.Errorf("estimate calibration: sample %d (run %q): x = %v, expected a log ratio from -%d to %d", i, s.Key, s.X, maxLogRatio, maxLogRatio)
		}
	}
	return nil
}

// fit shrinks the window's mean and spread towards the prior (callers hold c.mu).
func (c *Calibrator) fit() { c.model = shrink(c.sum, c.sq, c.n, c.cfg.Prior, c.cfg.PriorRuns) }

// shrink is the model of n samples with sum and sum of squares sq, with the prior counted as k
// runs around p.Bias with spread p.Sigma.
func shrink(sum, sq float64, n int, p cluster.EstimateModel, k float64) cluster.EstimateModel {
	fn := float64(n)
	if k+fn == 0 {
		return p
	}
	bias := (k*p.Bias + sum) / (k + fn)
	// Squared deviations from the shrunk mean: the window's, and the prior's own (its spread
	// plus the distance of its centre).
	dev := sq - 2*bias*sum + fn*bias*bias
	pdev := k * (p.Sigma*p.Sigma + (p.Bias-bias)*(p.Bias-bias))
	sigma := math.Sqrt(math.Max(0, (pdev+dev)/(k+fn)))
	return cluster.EstimateModel{Sigma: math.Min(sigma, cluster.MaxEstimateSigma), Bias: bias}
}

// Model is the estimate model learned so far (the prior before any run).
func (c *Calibrator) Model() cluster.EstimateModel {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.model
}

// Stats reports the model and how much it has seen.
func (c *Calibrator) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return Stats{Runs: c.n, Bias: c.model.Bias, Sigma: c.model.Sigma, PriorSigma: c.cfg.Prior.Sigma,
		Observed: c.obs, Skipped: c.skipped}
}
