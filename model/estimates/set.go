package estimates

import (
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/hetgpu/hetgpu/model/cluster"
)

// DefaultNamespaceRuns is Config.NamespaceRuns's default.
const DefaultNamespaceRuns = 20

// Set calibrates estimates per namespace. Teams estimate differently: one pads its estimates,
// another trims them to be served sooner, and a single model would read every team's estimates
// with the cluster's average habit, so the padding team's jobs would wait behind the trimming
// team's. A namespace's model is its own runs shrunk towards the cluster-wide model (learned
// from all runs, itself shrunk towards the configured prior) as if that were NamespaceRuns
// runs: a namespace with few runs is read as the cluster's habit, one with many as its own.
// Safe for concurrent use.
type Set struct {
	cfg Config
	all *Calibrator

	mu sync.Mutex
	ns map[string]*Calibrator
}

// NewSet validates cfg and returns a set at its prior.
func NewSet(cfg Config) (*Set, error) {
	if !(cfg.NamespaceRuns >= 0) || math.IsInf(cfg.NamespaceRuns, 0) {
		return nil, fmt.Errorf("estimate calibration: namespace runs = %v, expected a finite number >= 0", cfg.NamespaceRuns)
	}
	all, err := New(cfg)
	if err != nil {
		return nil, err
	}
	if cfg.NamespaceRuns == 0 {
		cfg.NamespaceRuns = DefaultNamespaceRuns
	}
	return &Set{cfg: cfg, all: all, ns: map[string]*Calibrator{}}, nil
}

// namespace is ns's window, created on first use.
func (s *Set) namespace(ns string) *Calibrator {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.ns[ns]
	if c == nil {
		// Only its window is used (its sums); the prior it would fit with is the cluster's.
		c = &Calibrator{cfg: s.all.cfg, ring: make([]Sample, len(s.all.ring)), keys: map[string]bool{}}
		s.ns[ns] = c
	}
	return c
}

// ObserveRun learns from one finished run of namespace ns (see Calibrator.ObserveRun).
func (s *Set) ObserveRun(ns, key string, est, actual time.Duration) bool {
	smp, ok := s.all.observe(Sample{Key: key, NS: ns}, est, actual)
	if ok {
		s.namespace(ns).addSample(smp)
	}
	return ok
}

// Model is the model namespace ns's estimates are read with.
func (s *Set) Model(ns string) cluster.EstimateModel {
	m, _ := s.Namespace(ns)
	return m
}

// Namespace is Model with how many of the namespace's own runs it is learned from.
func (s *Set) Namespace(ns string) (cluster.EstimateModel, int) {
	all := s.all.Model()
	s.mu.Lock()
	c := s.ns[ns]
	s.mu.Unlock()
	if c == nil {
		return all, 0
	}
	sum, sq, n := c.sums()
	return shrink(sum, sq, n, all, s.cfg.NamespaceRuns), n
}

// NamespaceStats is one namespace's model.
type NamespaceStats struct {
	Namespace string  `json:"namespace"`
	Runs      int     `json:"runs"`
	Bias      float64 `json:"bias"`
	Sigma     float64 `json:"sigma"`
}

// Stats is the cluster-wide model with every namespace's, by name.
func (s *Set) Stats() Stats {
	st := s.all.Stats()
	s.mu.Lock()
	names := make([]string, 0, len(s.ns))
	for n := range s.ns {
		names = append(names, n)
	}
	s.mu.Unlock()
	slices.Sort(names)
	for _, n := range names {
		m, runs := s.Namespace(n)
		st.Namespaces = append(st.Namespaces, NamespaceStats{Namespace: n, Runs: runs, Bias: m.Bias, Sigma: m.Sigma})
	}
	return st
}

// Samples are the cluster-wide window's runs, oldest first, each with its namespace.
func (s *Set) Samples() []Sample { return s.all.Samples() }

// Restore adds saved samples (see Calibrator.Restore) to the cluster's window and their
// namespaces'.
func (s *Set) Restore(ss []Sample) error {
	if err := checkSamples(ss); err != nil {
		return err
	}
	for _, smp := range ss {
		if s.all.addSample(smp) {
			s.namespace(smp.NS).addSample(smp)
		}
	}
	return nil
}
