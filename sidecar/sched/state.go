package sched

import (
	"sync"

	"github.com/hetgpu/hetgpu/model/cluster"
	"github.com/hetgpu/hetgpu/model/constraint"
)

// RoundState is what one round works out once and every step of it reads (kube-scheduler's
// CycleState): each job's compiled constraints, the gangs of the jobs it decides, its
// predictions and the snapshot the decisions were made on (whose free-capacity index,
// Snapshot.Free, is built once). The pipeline creates one per round and hands it to the steps
// that read it (triage, queues, place, verify, record), so that an explanation reads what the
// decision used. Safe for concurrent use. A nil *RoundState is valid: it computes everything
// afresh and keeps nothing (tests, benchmarks and one-off callers of a stage).
type RoundState struct {
	pred Predictor
	// onCompile, when set, is told of every constraint.CompileJob call (tests count them).
	onCompile func(jobKey string)

	mu       sync.Mutex
	compiled map[string]*compiledJob
	snap     *cluster.Snapshot
	gangs    Gangs
}

// compiledJob is one job's compilation, done once (concurrent askers wait for it).
type compiledJob struct {
	once sync.Once
	cj   *constraint.Job
	err  error
}

// NewRoundState is the state of a new round whose steps predict with pred.
func NewRoundState(pred Predictor) *RoundState {
	return &RoundState{pred: pred, compiled: map[string]*compiledJob{}}
}

// Predictor is the predictor the round's steps ask (nil for a nil state).
func (s *RoundState) Predictor() Predictor {
	if s == nil {
		return nil
	}
	return s.pred
}

// OnCompile sets a hook told of every constraint.CompileJob call the state makes (tests count
// them: a job is compiled at most once a round).
func (s *RoundState) OnCompile(f func(jobKey string)) { s.onCompile = f }

// Compiled is the job's compiled constraints (constraint.CompileJob), compiled at the first
// ask of the round and shared afterwards. A job's constraints do not change within a round,
// so it is keyed by job key.
func (s *RoundState) Compiled(j *cluster.Job) (*constraint.Job, error) {
	if s == nil {
		return constraint.CompileJob(j)
	}
	key := j.Key()
	s.mu.Lock()
	c := s.compiled[key]
	if c == nil {
		c = &compiledJob{}
		s.compiled[key] = c
	}
	s.mu.Unlock()
	c.once.Do(func() {
		if s.onCompile != nil {
			s.onCompile(key)
		}
		c.cj, c.err = constraint.CompileJob(j)
	})
	return c.cj, c.err
}

// decided records the snapshot the round decides on and its gangs.
func (s *RoundState) decided(snap *cluster.Snapshot, gangs Gangs) {
	if s == nil {
		return
	}
	s.mu.Lock()
	s.snap, s.gangs = snap, gangs
	s.mu.Unlock()
}

// Gangs are the gangs of the pending jobs the round decided (GangsOf its snapshot's Pending),
// computed once; nil before the round decided (or when nothing was pending).
func (s *RoundState) Gangs() Gangs {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gangs
}

// Snapshot is the snapshot the round decided on (its Free index is the round's free
// capacity); nil before the round decided.
func (s *RoundState) Snapshot() *cluster.Snapshot {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.snap
}

// Free is the free-capacity index of the snapshot the round decided on (built once a round,
// see cluster.Snapshot.Indexed); nil before the round decided.
func (s *RoundState) Free() *cluster.FreeIndex {
	if snap := s.Snapshot(); snap != nil {
		return snap.Free()
	}
	return nil
}

// Memo caches a predictor's answers for one round, per (job, GPU type, count): ranker, placer
// and explanations ask the same questions. Pair predictions are passed through uncached (only
// co-location options ask, a few per round).
type Memo struct {
	p  Predictor
	mu sync.Mutex
	m  map[memoKey]Estimate
}

type memoKey struct {
	job  *cluster.Job
	typ  string
	gpus int
}

// NewMemo caches p's predictions.
func NewMemo(p Predictor) *Memo { return &Memo{p: p, m: map[memoKey]Estimate{}} }

// Predict implements Predictor.
func (m *Memo) Predict(job *cluster.Job, gpuType string, gpus int) Estimate {
	k := memoKey{job, gpuType, gpus}
	m.mu.Lock()
	e, ok := m.m[k]
	m.mu.Unlock()
	if ok {
		return e
	}
	e = m.p.Predict(job, gpuType, gpus)
	m.mu.Lock()
	m.m[k] = e
	m.mu.Unlock()
	return e
}

// PredictPair implements PairPredictor when the wrapped predictor does (else it predicts no
// pair).
func (m *Memo) PredictPair(a, b *cluster.Job, gpuType string) (float64, float64, bool) {
	if pp, ok := m.p.(PairPredictor); ok {
		return pp.PredictPair(a, b, gpuType)
	}
	return 0, 0, false
}
