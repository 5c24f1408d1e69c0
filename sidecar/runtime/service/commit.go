package service

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/hetgpu/hetgpu/model/cluster"
	"github.com/hetgpu/hetgpu/sidecar/runtime/store"
	"github.com/hetgpu/hetgpu/sidecar/sched"
)

// StoredLearner is a Learner that keeps, with what it learned, the store's sequence number of
// each run: at start the service gives it the stored runs it lacks (a crash between storing
// and learning, a deleted catalog), so nothing stored is silently left unlearned.
type StoredLearner interface {
	sched.Learner
	ObserveStored(ctx context.Context, seqs []uint64, obs []cluster.Observation) error
	// LearnedThrough is the highest sequence number learned; known is false when what it
	// holds carries no sequence numbers (a catalog from an older version): then nothing is
	// replayed, so nothing is learned twice.
	LearnedThrough() (seq uint64, known bool)
}

// learnGroup feeds the learner and the tuner. Concurrent requests are grouped: the first
// caller learns everything queued so far in one call (one catalog write and fsync), the
// others wait for their turn's result, so N clients cost far fewer than N fsyncs.
type learnGroup struct {
	s     *Service
	mu    sync.Mutex
	queue []*learnReq
	busy  bool
}

type learnReq struct {
	seqs []uint64
	obs  []cluster.Observation
	done chan error
}

func (g *learnGroup) learn(ctx context.Context, seqs []uint64, obs []cluster.Observation) error {
	r := &learnReq{seqs: seqs, obs: obs, done: make(chan error, 1)}
	g.mu.Lock()
	g.queue = append(g.queue, r)
	if g.busy {
		g.mu.Unlock()
		return <-r.done
	}
	g.busy = true
	g.mu.Unlock()
	g.lead(context.WithoutCancel(ctx)) // learning goes on when the leading client goes away
	return <-r.done
}

// lead flushes the queue until it is empty. A panic in the learner fails the waiting
// requests instead of leaving them, and every later one, blocked.
func (g *learnGroup) lead(ctx context.Context) {
	var q []*learnReq
	defer func() {
		if v := recover(); v != nil {
			err := fmt.Errorf("learner panicked: %v", v)
			g.mu.Lock()
			q = append(q, g.queue...)
			g.queue, g.busy = nil, false
			g.mu.Unlock()
			for _, x := range q {
				x.done <- err
			}
			panic(v)
		}
	}()
	for {
		g.mu.Lock()
		q = g.queue
		g.queue = nil
		if len(q) == 0 {
			g.busy = false
			g.mu.Unlock()
			return
		}
		g.mu.Unlock()
		err := g.flush(ctx, q)
		for _, x := range q {
			x.done <- err
		}
		q = nil
	}
}

func (g *learnGroup) flush(ctx context.Context, q []*learnReq) error {
	s := g.s
	var seqs []uint64
	var obs []cluster.Observation
	for _, r := range q {
		seqs = append(seqs, r.seqs...)
		obs = append(obs, r.obs...)
	}
	var err error
	if s.stages.Learner != nil {
		if sl, ok := s.stages.Learner.(StoredLearner); ok {
			err = sl.ObserveStored(ctx, seqs, obs)
		} else {
			err = sched.ObserveAll(ctx, s.stages.Learner, obs)
		}
		s.health.set(healthCatalog, err)
		if err != nil {
			err = fmt.Errorf("learner: %w", err)
		}
	}
	if s.stages.Tuner != nil {
		for _, o := range obs {
			if !o.Learnable() {
				continue // a partial run teaches a partial learner only
			}
			if terr := s.stages.Tuner.Observe(ctx, o); terr != nil {
				s.log.Warn("policy tuner rejected a run", "job", cluster.JobKey(o.Namespace, o.JobID), "error", terr)
			}
		}
	}
	return err
}

// catchUp gives a StoredLearner the learnable stored runs it lacks.
func (s *Service) catchUp(ctx context.Context) error {
	sl, ok := s.stages.Learner.(StoredLearner)
	if !ok {
		return nil
	}
	last, known := sl.LearnedThrough()
	if !known {
		s.log.Info("catalog records carry no store sequence numbers (older version); stored runs are not replayed into it")
		return nil
	}
	// Concurrent requests may reach the learner in another order than the store numbered
	// them, so a crash can leave a gap below the highest number learned: look back over
	// the numbers still in the learner's window and replay only the missing ones.
	from, have := last, map[uint64]bool(nil)
	if ls, ok := sl.(learnedSeqs); ok {
		var low uint64
		if have, low = ls.LearnedSeqs(); low > 0 {
			from = max(low-1, last-min(last, replayLookBack))
		}
	}
	total, err := Replay(ctx, s.store, sl, from, have)
	s.health.set(healthCatalog, err)
	if err != nil {
		return fmt.Errorf("replay stored runs after sequence %d into the learner: %w", last, err)
	}
	if total > 0 {
		s.log.Warn("the catalog lacked stored runs (a crash before learning, or a deleted or emptied catalog); learned them again from the store",
			"runs", total, "after_seq", last)
	}
	return nil
}

// replayLookBack is how far below the highest learned sequence number a restart looks for
// runs learned out of order: more than two requests of service.MaxBatch records.
const replayLookBack = 2 * MaxBatch

// learnedSeqs is a learner that tells which stored runs its window holds.
type learnedSeqs interface {
	LearnedSeqs() (set map[uint64]bool, low uint64)
}

// Replay gives a StoredLearner the learnable stored runs after sequence number after (less
// those in have), with the partial and failed runs that measured a throughput when it is a
// PartialLearner (marked partial), in
// chunks of 1000 (one catalog write each; its state is rebuilt between chunks so each is
// bounded against what the previous ones taught). It returns how many it gave.
func Replay(ctx context.Context, st *store.Store, sl StoredLearner, after uint64, have map[uint64]bool) (int, error) {
	partialOK := learnsPartial(sl)
	learnable := func(r *store.ObservationRecord) bool {
		return (r.Obs.Learnable() || partialOK) && r.Obs.Throughput > 0 && !have[r.Seq]
	}
	// A learner that keeps only a window of runs (the catalog) gets only the runs that fit:
	// the older ones would be dropped again at once.
	skip := 0
	if w, ok := sl.(interface{ Window() int }); ok && w.Window() > 0 {
		n := 0
		err := st.ObservationsAfter(after, func(r store.ObservationRecord) error {
			if learnable(&r) {
				n++
			}
			return nil
		})
		if err != nil {
			return 0, err
		}
		skip = max(0, n-w.Window())
	}
	var seqs []uint64
	var obs []cluster.Observation
	total := 0
	flush := func() error {
		if len(obs) == 0 {
			return nil
		}
		if err := sl.ObserveStored(ctx, seqs, obs); err != nil {
			return err
		}
		if r, ok := sl.(rebuilder); ok {
			r.Rebuild()
		}
		total += len(obs)
		seqs, obs = seqs[:0], obs[:0]
		return nil
	}
	err := st.ObservationsAfter(after, func(r store.ObservationRecord) error {
		if !learnable(&r) {
			return nil
		}
		if skip > 0 {
			skip--
			return nil
		}
		seqs = append(seqs, r.Seq)
		if r.Obs.Learnable() {
			obs = append(obs, r.Obs)
		} else {
			obs = append(obs, asPartial(r.Obs))
		}
		if len(obs) >= 1000 {
			return flush()
		}
		return nil
	})
	if err == nil {
		err = flush()
	}
	return total, err
}

// rebuilder is a learner that can prepare its state now rather than at the next use.
type rebuilder interface{ Rebuild() }

// Storage health: what cannot be written right now.
const (
	healthStore   = "store"
	healthCatalog = "catalog"
)

type storageHealth struct {
	mu   sync.Mutex
	errs map[string]string
	// probed is when the store was last probed with a write while degraded.
	probed time.Time
}

// set records the outcome of a write: an error degrades health until a write succeeds.
func (h *storageHealth) set(what string, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err == nil {
		delete(h.errs, what)
		return
	}
	if h.errs == nil {
		h.errs = map[string]string{}
	}
	h.errs[what] = err.Error()
}

// reasons lists what cannot be written, sorted.
func (h *storageHealth) reasons() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for k, v := range h.errs {
		out = append(out, k+": "+v)
	}
	sort.Strings(out)
	return out
}

func (h *storageHealth) has(what string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, ok := h.errs[what]
	return ok
}
