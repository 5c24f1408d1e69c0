// Package history learns how long jobs run from the runs that finish, for the jobs whose users
// say nothing about their runtime (no hetgpu.runtime). It is Helios's QSSF idea made online: a
// new job is expected to run about as long as the finished runs of similar jobs did, where
// "similar" is, most specific first, the same job (a dispatched or periodic child shares its
// parent's), the same model and batch size at the same GPU count in the namespace, the same GPU
// count in the namespace, the namespace, and the whole cluster.
//
// Runtimes are heavy-tailed, so each level is a log-normal: the mean and spread of log runtime
// over its runs, shrunk towards the level above as if that were LevelRuns runs (the cluster's
// towards the configured prior, PriorRuns runs). A level with few runs reads as its parent, one
// with many as itself. What a job has already run then matters: the expected time left is the
// log-normal's mean residual life, E[T - ran | T > ran], which grows with ran (a job that ran
// long will likely run long), so a job's estimate is never "nearly done" just because it has
// outrun its peers' median.
//
// Only the newest Window runs count, so the model follows a cluster whose work changes. A run
// counts once by its key, also when a backend reports it again after a restart. Runtimes are on
// the reference GPU type (gpuspec.ReferenceGPU), as hetgpu.runtime is.
package history

import (
	"cmp"
	"fmt"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/hetgpu/hetgpu/model/cluster"
)

// Defaults of Config.
const (
	DefaultWindow      = 2000
	DefaultPriorRuns   = 5
	DefaultLevelRuns   = 5
	DefaultPriorMedian = time.Hour
	DefaultPriorSigma  = 1.5
	DefaultMinSigma    = 0.5
	// DefaultExplore was measured on the held-out windows without estimates
	// (docs/results/estimate-free.md).
	DefaultExplore = 0.6
)

// Bounds of one runtime: shorter runs are crashes or tests, longer ones are a forgotten unit.
const (
	minRuntime = time.Second
	maxRuntime = 365 * 24 * time.Hour
)

// Config configures a Model.
type Config struct {
	// Window is how many of the newest runs count (DefaultWindow when zero).
	Window int
	// PriorMedian and PriorSigma are the runtime distribution before any run: its median on
	// the reference type and the spread of log runtime (defaults an hour and 1.5: half of the
	// jobs within a factor of 2.8 of the median, a few running for days).
	PriorMedian time.Duration
	PriorSigma  float64
	// PriorRuns is how many runs the prior weighs in the cluster's level, LevelRuns how many
	// runs a level above weighs in the one below it (defaults 5 each).
	PriorRuns, LevelRuns float64
	// MinSigma is the least spread of a level (DefaultMinSigma when zero): the runs of similar
	// jobs are never taken as more alike than within a factor of e^MinSigma, so that a job
	// that outruns all of its peers is not read as about to finish.
	MinSigma float64
	// Explore, below 1, is the most weight a job's rank gives the cluster-wide runtime
	// distribution beside its own level's (DefaultExplore when zero; negative: none). A group
	// whose few finished runs were long otherwise reads every new member as long, so none of
	// them starts while shorter-ranked work exists and the group never shows it also has short
	// members: exploration gives a fresh member a short first turn's worth of rank.
	Explore float64
}

// Validate names the first unusable field.
func (c Config) Validate() error {
	switch {
	case c.Window < 0:
		return fmt.Errorf("runtime history: window = %d, expected >= 0 runs", c.Window)
	case c.PriorMedian < 0 || c.PriorMedian > maxRuntime:
		return fmt.Errorf("runtime history: prior median = %v, expected 0 (an hour) to %v", c.PriorMedian, maxRuntime)
	case !(c.PriorSigma >= 0 && c.PriorSigma <= cluster.MaxEstimateSigma):
		return fmt.Errorf("runtime history: prior sigma = %v, expected 0 to %d", c.PriorSigma, cluster.MaxEstimateSigma)
	case !(c.PriorRuns >= 0) || math.IsInf(c.PriorRuns, 0):
		return fmt.Errorf("runtime history: prior runs = %v, expected a finite number >= 0", c.PriorRuns)
	case !(c.LevelRuns >= 0) || math.IsInf(c.LevelRuns, 0):
		return fmt.Errorf("runtime history: level runs = %v, expected a finite number >= 0", c.LevelRuns)
	case !(c.Explore < 1):
		return fmt.Errorf("runtime history: explore = %v, expected a weight below 1 (0: the default, negative: off)", c.Explore)
	case !(c.MinSigma >= 0 && c.MinSigma <= cluster.MaxEstimateSigma):
		return fmt.Errorf("runtime history: min sigma = %v, expected 0 to %d", c.MinSigma, cluster.MaxEstimateSigma)
	}
	return nil
}

func (c Config) withDefaults() Config {
	c.Window = cmp.Or(c.Window, DefaultWindow)
	c.PriorMedian = cmp.Or(c.PriorMedian, DefaultPriorMedian)
	c.PriorSigma = cmp.Or(c.PriorSigma, DefaultPriorSigma)
	c.PriorRuns = cmp.Or(c.PriorRuns, DefaultPriorRuns)
	c.LevelRuns = cmp.Or(c.LevelRuns, DefaultLevelRuns)
	c.MinSigma = cmp.Or(c.MinSigma, DefaultMinSigma)
	c.Explore = cmp.Or(c.Explore, DefaultExplore)
	return c
}

// Job is what the cluster sees of a job whose runtime is asked for or learned.
type Job struct {
	Namespace string `json:"ns,omitempty"`
	// Family is the job, or the parent of a dispatched or periodic child: every child of one
	// parent shares its history.
	Family string `json:"job,omitempty"`
	// Model is the model ("family/name" or a name; "" unknown) and Batch its per-GPU batch size.
	Model string `json:"model,omitempty"`
	Batch int    `json:"batch,omitempty"`
	GPUs  int    `json:"gpus,omitempty"`
}

// JobOf is what the history knows of a cluster job.
func JobOf(j *cluster.Job) Job {
	fam := j.ParentID
	if fam == "" {
		fam = j.ID
	}
	return Job{Namespace: j.Namespace, Family: fam, Model: modelName(j.Hetgpu.ModelFamily, j.Hetgpu.ModelName),
		Batch: j.Hetgpu.BatchSize, GPUs: max(1, j.GPUs)}
}

func modelName(family, name string) string {
	switch {
	case name == "":
		return family
	case family == "":
		return name
	}
	return family + "/" + name
}

// Run is one finished run: its job and its whole runtime on the reference type (with the time
// it ran before a preemption).
type Run struct {
	// Key identifies the run: one already in the window is not counted again.
	Key string `json:"key,omitempty"`
	Job
	RuntimeS float64 `json:"runtime_s"`
}

// Level names how specific the history behind an estimate is.
type Level uint8

// Levels, from the least specific.
const (
	LevelPrior Level = iota
	LevelCluster
	LevelNamespace
	LevelGPUs
	LevelModel
	LevelJob
	numLevels
)

var levelNames = [numLevels]string{"prior", "cluster", "namespace", "gpus", "model", "job"}

func (l Level) String() string {
	if l < numLevels {
		return levelNames[l]
	}
	return "level(" + strconv.Itoa(int(l)) + ")"
}

// MarshalText writes the level's name (JSON keys of explanations and health).
func (l Level) MarshalText() ([]byte, error) { return []byte(l.String()), nil }

// levelKey identifies one level's group of runs without building a string.
type levelKey struct {
	level       Level
	ns, s       string
	batch, gpus int
}

func keysOf(j Job) [numLevels]levelKey {
	var k [numLevels]levelKey
	k[LevelCluster] = levelKey{level: LevelCluster}
	k[LevelNamespace] = levelKey{level: LevelNamespace, ns: j.Namespace}
	k[LevelGPUs] = levelKey{level: LevelGPUs, ns: j.Namespace, gpus: j.GPUs}
	k[LevelModel] = levelKey{level: LevelModel, ns: j.Namespace, s: j.Model, batch: j.Batch, gpus: j.GPUs}
	k[LevelJob] = levelKey{level: LevelJob, ns: j.Namespace, s: j.Family}
	return k
}

// agg is a level's sums of log runtime.
type agg struct {
	n       int
	sum, sq float64
}

// Model is the runtime history. Safe for concurrent use: the learn path writes, every round
// reads.
type Model struct {
	cfg Config

	mu    sync.Mutex
	ring  []Run
	next  int
	n     int
	keys  map[string]bool
	aggs  map[levelKey]*agg
	obs   int
	skips int
}

// New validates cfg and returns an empty history.
func New(cfg Config) (*Model, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	return &Model{cfg: cfg, ring: make([]Run, cfg.Window), keys: map[string]bool{}, aggs: map[levelKey]*agg{}}, nil
}

// Observe learns from one finished run. It reports whether the run was counted: not when its
// runtime is out of bounds or its key is already in the window.
func (m *Model) Observe(r Run) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.obs++
	if !validRuntime(r.RuntimeS) || r.Key != "" && m.keys[r.Key] {
		m.skips++
		return false
	}
	m.add(r)
	return true
}

func validRuntime(s float64) bool {
	return s >= minRuntime.Seconds() && s <= maxRuntime.Seconds()
}

// add puts r into the window, evicting the oldest run when full (callers hold m.mu).
func (m *Model) add(r Run) {
	r.GPUs = max(1, r.GPUs)
	if m.n == len(m.ring) {
		m.apply(m.ring[m.next], -1)
		if k := m.ring[m.next].Key; k != "" {
			delete(m.keys, k)
		}
	} else {
		m.n++
	}
	m.ring[m.next] = r
	m.next = (m.next + 1) % len(m.ring)
	if r.Key != "" {
		m.keys[r.Key] = true
	}
	m.apply(r, +1)
}

// apply adds (sign +1) or removes (-1) a run's log runtime at each of its levels.
func (m *Model) apply(r Run, sign int) {
	x := math.Log(r.RuntimeS)
	keys := keysOf(r.Job)
	for _, k := range keys[LevelCluster:] {
		a := m.aggs[k]
		if a == nil {
			if sign < 0 {
				continue
			}
			a = &agg{}
			m.aggs[k] = a
		}
		a.n += sign
		a.sum += float64(sign) * x
		a.sq += float64(sign) * x * x
		if a.n <= 0 {
			delete(m.aggs, k)
		}
	}
}

// Estimate is what the history expects of a job.
type Estimate struct {
	// Left is the expected time left on the reference type, given the job ran Ran already.
	Left time.Duration
	// Rank is what a shortest-first ranker should compare: the reciprocal of the job's Gittins
	// index, the least expected service per completion over the quanta it could run next
	// (Gittins; Aalto, Ayesta and Righter for M/G/1). A fresh job whose peers mostly finish
	// within minutes ranks as minutes, even when a few of them run for days and make Left
	// long; a job that has outrun most of its peers ranks as long. For a runtime known exactly
	// it is what is left.
	Rank time.Duration
	// Median and Sigma are the job's runtime distribution (log-normal) on the reference type.
	Median time.Duration
	Sigma  float64
	// Level is the most specific level with runs of its own, and Runs how many.
	Level Level
	Runs  int
	// Confidence is the share of the estimate that rests on the job's own level's runs rather
	// than on the levels above: Runs / (Runs + LevelRuns), 0 at the prior.
	Confidence float64
}

// Estimate is the expected time left of job j, which has run for ran so far.
func (m *Model) Estimate(j Job, ran time.Duration) Estimate {
	mu, sigma, lvl, runs := m.fit(j)
	e := Estimate{Median: time.Duration(math.Round(math.Exp(mu)*1e3)) * time.Millisecond, Sigma: sigma, Level: lvl, Runs: runs}
	if runs > 0 {
		k := m.cfg.LevelRuns
		if lvl == LevelCluster {
			k = m.cfg.PriorRuns
		}
		e.Confidence = float64(runs) / (float64(runs) + k)
	}
	e.Left = cluster.EstimateModel{Sigma: sigma}.Remaining(e.Median, ran)
	g := Gittins(mu, sigma, ran.Seconds())
	if w := m.explore(j, lvl, e.Confidence); w > 0 {
		cmu, csig := m.clusterFit()
		g = GittinsMix(Component{1 - w, mu, sigma}, Component{w, cmu, csig}, ran.Seconds())
	}
	e.Rank = max(time.Duration(g*float64(time.Second)), cluster.MinRemainingEstimate)
	return e
}

// explore is the weight a job's rank gives the cluster-wide distribution: the chance that the
// job is not like the peers its level holds, as large as the level's runs leave it unsure
// (1 - Confidence), at most Explore. A job of a known model whose own kind (model, batch, GPU
// count) has no finished run yet is a stranger to the peers it is read by, however many of
// them there are: it gets the whole Explore. On a burst of 2-GPU jobs of 26 kinds (modern-mix
// heldout-2) the short kinds otherwise read as the burst's long 2-GPU runs and waited 38 h
// behind them (docs/results/estimate-free.md).
func (m *Model) explore(j Job, lvl Level, conf float64) float64 {
	if m.cfg.Explore <= 0 || lvl <= LevelCluster {
		return 0
	}
	if j.Model != "" && lvl < LevelModel {
		conf = 0
	}
	return m.cfg.Explore * (1 - conf)
}

// clusterFit is the cluster level's log-normal (the prior shrunk by every run).
func (m *Model) clusterFit() (float64, float64) {
	mu, sigma, _, _ := m.fit(Job{})
	return mu, sigma
}

// Component is one log-normal of a mixture: weight W, mean Mu and spread Sigma of log seconds.
type Component struct{ W, Mu, Sigma float64 }

// GittinsMix is Gittins for a runtime drawn from a mixture of two log-normals, on the union of
// both components' quanta. It does not allocate.
func GittinsMix(a, b Component, ran float64) float64 {
	ran = math.Max(ran, 0)
	a.Sigma, b.Sigma = math.Max(a.Sigma, 1e-3), math.Max(b.Sigma, 1e-3)
	surv := func(t float64) float64 {
		if t <= 0 {
			return 1
		}
		lt := math.Log(t)
		return 0.5 * (a.W*math.Erfc((lt-a.Mu)/(a.Sigma*math.Sqrt2)) + b.W*math.Erfc((lt-b.Mu)/(b.Sigma*math.Sqrt2)))
	}
	s0 := surv(ran)
	if s0 < 1e-12 {
		return ran * math.Expm1(math.Max(a.Sigma, b.Sigma))
	}
	lo := math.Min(a.Mu-4*a.Sigma, b.Mu-4*b.Sigma)
	hi := math.Max(a.Mu+10*a.Sigma, b.Mu+10*b.Sigma)
	if ran > 0 {
		lo = math.Max(lo, math.Log(ran))
	}
	// Quanta evenly apart in log runtime over both components' range.
	const steps = 2 * gittinsSteps
	dz := (hi - lo) / steps
	best := gittinsScan(surv, ran, s0, func(k int) float64 { return math.Exp(lo + dz*float64(k)) }, steps)
	if math.IsInf(best, 1) {
		return ran * math.Expm1(math.Max(a.Sigma, b.Sigma))
	}
	return best
}

// gittinsSteps is the quanta Gittins tries, gittinsDZ apart in log runtime (sigmas).
const (
	gittinsSteps = 40
	gittinsDZ    = 0.25
)

// Gittins is the reciprocal of the Gittins index, in seconds, of a job whose runtime is
// log-normal (mu, sigma: of log seconds) and which has run ran seconds: min over quanta q of
// E[min(T - ran, q) | T > ran] / P(T <= ran + q | T > ran). The quanta end at runtimes a
// quarter sigma apart, from the later of ran and the median less four sigmas to ten sigmas
// on; the expected service is integrated by the trapezoid rule over the same points. It does
// not allocate.
func Gittins(mu, sigma, ran float64) float64 {
	ran = math.Max(ran, 0)
	if !(sigma > 0) {
		return math.Max(math.Exp(mu)-ran, 1)
	}
	surv := func(t float64) float64 { // P(T > t)
		if t <= 0 {
			return 1
		}
		return 0.5 * math.Erfc((math.Log(t)-mu)/(sigma*math.Sqrt2))
	}
	s0 := surv(ran)
	if s0 < 1e-12 {
		// Far beyond every peer: read the tail as one sigma of log runtime to go.
		return ran * math.Expm1(sigma)
	}
	z := -4.0
	if ran > 0 {
		z = math.Max(z, (math.Log(ran)-mu)/sigma)
	}
	best := gittinsScan(surv, ran, s0, func(k int) float64 { return math.Exp(mu + sigma*(z+gittinsDZ*float64(k))) }, gittinsSteps)
	if math.IsInf(best, 1) {
		return ran * math.Expm1(sigma)
	}
	return best
}

// gittinsScan is the least expected service per completion over the quanta ending at end(k),
// k = 1..steps (increasing), for a job that has run ran (surv(ran) = s0): the service
// integrated by the trapezoid rule over the same points. +Inf when no quantum completes any.
func gittinsScan(surv func(float64) float64, ran, s0 float64, end func(int) float64, steps int) float64 {
	best := math.Inf(1)
	x0, sPrev, service := ran, s0, 0.0
	for k := 1; k <= steps; k++ {
		x := end(k)
		if x <= x0 {
			continue
		}
		s := surv(x)
		service += (x - x0) * (sPrev + s) / 2
		x0, sPrev = x, s
		if done := s0 - s; done > 0 {
			best = math.Min(best, service/done)
		}
	}
	return best
}

// fit is the job's log-normal: each level's runs shrunk towards the level above, from the
// prior down to the job's own.
func (m *Model) fit(j Job) (mu, sigma float64, lvl Level, runs int) {
	j.GPUs = max(1, j.GPUs)
	mu, sigma = math.Log(m.cfg.PriorMedian.Seconds()), m.cfg.PriorSigma
	keys := keysOf(j)
	m.mu.Lock()
	defer m.mu.Unlock()
	for l := LevelCluster; l < numLevels; l++ {
		if l == LevelModel && j.Model == "" || l == LevelJob && j.Family == "" {
			continue
		}
		a := m.aggs[keys[l]]
		if a == nil || a.n == 0 {
			continue
		}
		k := m.cfg.LevelRuns
		if l == LevelCluster {
			k = m.cfg.PriorRuns
		}
		mu, sigma = shrink(a, mu, sigma, k)
		lvl, runs = l, a.n
	}
	return mu, math.Max(sigma, m.cfg.MinSigma), lvl, runs
}

// shrink is the log-normal of a level's runs with the parent (mu, sigma) counted as k runs.
func shrink(a *agg, mu, sigma, k float64) (float64, float64) {
	n := float64(a.n)
	m := (k*mu + a.sum) / (k + n)
	dev := a.sq - 2*m*a.sum + n*m*m
	pdev := k * (sigma*sigma + (mu-m)*(mu-m))
	s := math.Sqrt(math.Max(0, (pdev+dev)/(k+n)))
	return m, math.Min(s, cluster.MaxEstimateSigma)
}

// Stats is what the history holds, for /v1/health and metrics.
type Stats struct {
	// Runs is how many finished runs the window holds (at most Window).
	Runs int `json:"runs"`
	// Median and Sigma are the cluster-wide runtime distribution on the reference type.
	MedianS float64 `json:"median_s"`
	Sigma   float64 `json:"sigma"`
	// Observed counts every run given to Observe, Skipped those not counted.
	Observed int `json:"observed"`
	Skipped  int `json:"skipped"`
	// Namespaces is how many namespaces have runs of their own.
	Namespaces int `json:"namespaces"`
}

// Stats reports the cluster-wide level and how much the history has seen.
func (m *Model) Stats() Stats {
	e := m.Estimate(Job{}, 0)
	m.mu.Lock()
	defer m.mu.Unlock()
	ns := 0
	for k := range m.aggs {
		if k.level == LevelNamespace {
			ns++
		}
	}
	return Stats{Runs: m.n, MedianS: e.Median.Seconds(), Sigma: e.Sigma, Observed: m.obs, Skipped: m.skips, Namespaces: ns}
}

// Runs are the window's runs, oldest first: what a state file or a new leader restores.
func (m *Model) Runs() []Run {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Run, 0, m.n)
	start := (m.next - m.n + len(m.ring)) % len(m.ring)
	for i := range m.n {
		out = append(out, m.ring[(start+i)%len(m.ring)])
	}
	return out
}

// Restore adds saved runs, oldest first; runs already in the window (by key) count once. A run
// out of bounds fails the whole restore, naming it, and adds nothing.
func (m *Model) Restore(rs []Run) error {
	for i, r := range rs {
		if !validRuntime(r.RuntimeS) {
			return fmt.Errorf("runtime history: run %d (%q): runtime_s = %v, expected %v to %v in seconds",
				i, r.Key, r.RuntimeS, minRuntime.Seconds(), maxRuntime.Seconds())
		}
		if r.GPUs < 0 || r.Batch < 0 {
			return fmt.Errorf("runtime history: run %d (%q): gpus = %d, batch = %d, expected >= 0", i, r.Key, r.GPUs, r.Batch)
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range rs {
		if r.Key != "" && m.keys[r.Key] {
			continue
		}
		m.add(r)
	}
	return nil
}
