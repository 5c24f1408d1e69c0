// Package service is the sidecar's loop: watch the cluster, and on every change (debounced)
// or reconcile tick run one round through sched.Pipeline: maintain (faults, finished runs) ->
// snapshot -> rank -> predict -> place -> pin -> record and learn. It keeps the state the HTTP
// API serves (queue, decisions, explanations) and persists decisions and observations in the
// store. In shadow mode it decides and records without pinning and compares with where Nomad
// placed un-held jobs.
package service

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/hetgpu/hetgpu/internal/tick"
	"github.com/hetgpu/hetgpu/model/cluster"
	"github.com/hetgpu/hetgpu/model/estimates"
	"github.com/hetgpu/hetgpu/model/history"
	"github.com/hetgpu/hetgpu/sidecar/runtime/store"
	"github.com/hetgpu/hetgpu/sidecar/sched"
	"github.com/hetgpu/hetgpu/sidecar/stages/feasible"
	"github.com/hetgpu/hetgpu/sidecar/stages/queue"
	"github.com/hetgpu/hetgpu/sidecar/stages/rank"
)

// Config configures the service.
type Config struct {
	// Reconcile is the period of rounds without events (default 5 s).
	Reconcile time.Duration
	// Debounce batches bursts of events into one round (default 250 ms).
	Debounce time.Duration
	// Shadow decides and records without pinning.
	Shadow bool
	// BackendName is shown by the health API ("nomad", "simulated").
	BackendName string
	Logger      hclog.Logger
	// Now is the clock for records; default time.Now.
	Now func() time.Time
	// TuneEvery is how often the Tuner is asked to learn (default 1 min).
	TuneEvery time.Duration
	// GangReserveAfter is how long a gang waits before it reserves GPUs
	// (sched.Pipeline.ReserveAfter); 0 never reserves.
	GangReserveAfter time.Duration
	// Ranker, when set, says which ranking policy the rounds use and why (GET /v1/health).
	Ranker func() RankerStatus
	// Leadership, when set, makes this one of several replicas (see Leadership); nil: the
	// only one. Share, when set, copies the stored runs to where a new leader loads them
	// from; a request's runs are acknowledged only after it succeeded.
	Leadership Leadership
	Share      func(ctx context.Context) error
	// Estimates, when set, learns how far users' hetgpu.runtime is off from the runs that
	// finish, per namespace (ranker.calibrate_estimates); the backend reads estimates with its
	// models. Its window is kept in the store, so a restart starts where it stopped.
	Estimates *estimates.Set
	// History, when set, learns how long jobs run from the runs that finish (model/history):
	// the stages' estimates step reads jobs without hetgpu.runtime by it. Its window is kept
	// in the store (and shared with the runs), so a restart or a new leader starts where it
	// stopped.
	History *history.Model
	// OnCompile, when set, is told of every compilation of a job's constraints in a round
	// (sched.RoundState.OnCompile; tests check that each job is compiled once a round).
	OnCompile func(jobKey string)
}

// RankerStatus is the ranking policy in use and why.
type RankerStatus struct {
	// Policy is "heuristic" (the fallback order), "bundled:default", a checkpoint file, or
	// "tuned:PATH" (adopted by online tuning).
	Policy string `json:"policy"`
	// Reason says why: the configuration, the policy's held-out verdict, or online tuning.
	Reason string `json:"reason"`
	// Verdict is the held-out verdict of the learned policy the choice was made on, if any:
	// the live estimate regime's (Regime), with estimates before the first ranked queue.
	Verdict *rank.Verdict `json:"verdict,omitempty"`
	// Learned is the learned policy the verdicts judge ("bundled:default", a file), also while
	// the heuristic ranks; empty when there is none.
	Learned string `json:"learned_policy,omitempty"`
	// Regime is the live estimate regime (rank.RegimeOf: "estimates", "partial" or "none"),
	// read from the share of ranked jobs that carry a user estimate (UserEstimateShare, of
	// RegimeJobs pending jobs in the last round that ranked any); empty before one did.
	Regime            string   `json:"regime,omitempty"`
	UserEstimateShare *float64 `json:"user_estimate_share,omitempty"`
	RegimeJobs        int      `json:"regime_jobs,omitempty"`
	// Verdicts are the learned policy's held-out verdicts per regime: it ranks only in a regime
	// whose verdict beats the heuristic (unless configured).
	Verdicts rank.Verdicts `json:"verdicts,omitempty"`
	// Estimates is the model runtime estimates are read with, learned from finished runs
	// (ranker.calibrate_estimates).
	Estimates *estimates.Stats `json:"estimates,omitempty"`
	// History is the runtime history jobs without hetgpu.runtime are read by, learned from
	// finished runs (ranker.history).
	History *history.Stats `json:"history,omitempty"`
	// Checkpoint is the learned policy's checkpoint while it ranks (Policy names it), as the
	// sidecar loaded or adopted it; nil while the heuristic or a baseline ranks. Readers (the
	// dashboard) take its provenance from here instead of reading the file again.
	Checkpoint *rank.Checkpoint `json:"-"`
}

// Stages are the pipeline's parts (one policy of sidecar/policies); Learner may be nil.
type Stages = sched.Stages

// Tuner learns from finished runs in the background (sched.Tuner).
type Tuner = sched.Tuner

// Service runs rounds and answers the API.
type Service struct {
	cfg     Config
	log     hclog.Logger
	backend cluster.Backend
	stages  Stages
	store   *store.Store
	metrics *Metrics
	// feas tells groups that can never run on the cluster from those that wait.
	feas *feasible.Checker

	roundMu sync.Mutex // one round at a time

	mu        sync.RWMutex
	round     uint64
	lastRound time.Time
	lastErr   string
	lastSnap  *cluster.Snapshot
	// lastPinned: the decisions of the last round that were pinned; their GPUs are taken
	// although lastSnap, made before the round, still shows them free.
	lastPinned []cluster.Decision
	queue      []QueueEntry
	invalid    map[string]string
	// shadowDone: job key -> JobModifyIndex already decided in shadow mode.
	shadowDone map[string]uint64
	// placed: Nomad's own placements of shadow jobs not yet compared.
	placed map[string]cluster.Placement
	// reheldReason: why a job was last re-held (shown in its explanation until pinned again).
	reheldReason map[string]string
	// pinning: decisions handed to the backend whose records are not written yet.
	pinning map[string]cluster.Decision
	// infeasible: job key -> why the group cannot run on the cluster, as of the last round.
	infeasible map[string]string
	started    time.Time

	// learner groups concurrent requests' runs into one learner call.
	learner *learnGroup
	// health tracks what cannot be written (store, catalog).
	health storageHealth
	// leadSince is when this replica last started leading (zero while it stands by).
	leadSince time.Time
}

// New builds a service. The store must stay open while the service runs.
func New(cfg Config, backend cluster.Backend, stages Stages, st *store.Store) (*Service, error) {
	if backend == nil || st == nil || stages.Ranker == nil || stages.Predictor == nil || stages.Placer == nil {
		return nil, errors.New("service: backend, store, ranker, predictor and placer are required")
	}
	if qs, ok := stages.Queues.(*queue.Set); ok && qs == nil {
		stages.Queues = nil // a nil set is no queue stage
	}
	if cfg.Reconcile <= 0 {
		cfg.Reconcile = 5 * time.Second
	}
	if cfg.Debounce <= 0 {
		cfg.Debounce = 250 * time.Millisecond
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	s := &Service{cfg: cfg, log: cfg.Logger.Named("service"), backend: backend, stages: stages, store: st,
		metrics: newMetrics(), invalid: map[string]string{}, shadowDone: map[string]uint64{},
		placed: map[string]cluster.Placement{}, reheldReason: map[string]string{}, pinning: map[string]cluster.Decision{},
		infeasible: map[string]string{}, feas: feasible.NewChecker(feasibilityOptions(stages.Placer)), started: cfg.Now()}
	// Rebuild what survives a restart.
	err := st.EachLatest(func(r store.DecisionRecord) {
		switch r.Status {
		case store.StatusShadow:
			s.shadowDone[r.JobKey] = r.JobModifyIndex
		case store.StatusInvalid:
			s.invalid[r.JobKey] = r.Message
		case store.StatusReheld:
			s.reheldReason[r.JobKey] = r.Message
		}
	})
	if err != nil {
		return nil, fmt.Errorf("service: read state: %w", err)
	}
	if stages.Queues != nil {
		s.metrics.Registry.MustRegister(newQueueCollector(s))
	}
	s.learner = &learnGroup{s: s}
	s.RestoreEstimates()
	s.RestoreHistory()
	if err := s.catchUp(context.Background()); err != nil {
		// The runs stay stored and are replayed at the next start; health says so meanwhile.
		s.log.Error("learning stored runs failed", "error", err)
	}
	return s, nil
}

// Metrics returns the service's metrics.
func (s *Service) Metrics() *Metrics { return s.metrics }

// Store returns the state store.
func (s *Service) Store() *store.Store { return s.store }

// Run watches the backend and runs rounds until ctx ends.
func (s *Service) Run(ctx context.Context) error {
	changed := make(chan struct{}, 1)
	notify := func() {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	watchErr := make(chan error, 1)
	go func() { watchErr <- s.backend.Watch(ctx, notify) }()
	if s.stages.Tuner != nil {
		done := make(chan struct{})
		defer func() { <-done }()
		go func() {
			defer close(done)
			s.tuneLoop(ctx)
		}()
	}
	tick := time.NewTicker(s.cfg.Reconcile)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			<-watchErr
			return nil
		case err := <-watchErr:
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("watching the cluster stopped: %w", err)
		case <-changed:
			// Let a burst of events settle into one round.
			t := time.NewTimer(s.cfg.Debounce)
			select {
			case <-ctx.Done():
				t.Stop()
				continue
			case <-t.C:
			}
			select {
			case <-changed:
			default:
			}
		case <-tick.C:
		}
		if !s.noteLeading(s.leading(ctx)) {
			continue
		}
		if _, err := s.Round(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("round failed; retrying at the next change or tick", "error", err)
		}
	}
}

// Round runs one round now.
func (s *Service) Round(ctx context.Context) (*sched.Round, error) {
	s.roundMu.Lock()
	defer s.roundMu.Unlock()
	s.mu.Lock()
	s.round++
	round := s.round
	s.mu.Unlock()

	m, err := s.backend.Maintain(ctx)
	if err != nil && ctx.Err() != nil {
		return nil, err
	}
	if err != nil {
		s.log.Warn("maintenance failed", "error", err)
	}
	if m != nil {
		s.maintenance(ctx, round, m)
	}

	tri := &roundTriage{}
	pipe := sched.New(s.backend, s.stages, sched.Options{
		Triage: func(_ context.Context, st *sched.RoundState, snap *cluster.Snapshot) *cluster.Snapshot {
			if s.cfg.Shadow {
				snap = s.withoutShadowDone(snap)
			}
			return s.triage(st, snap, tri)
		},
		Memoize:      true,
		ReserveAfter: s.cfg.GangReserveAfter,
		Shadow:       s.cfg.Shadow,
		BeforePin:    s.notePinning,
		Record:       func(ctx context.Context, r *sched.Round) { s.record(ctx, round, r, tri) },
		OnCompile:    s.cfg.OnCompile,
	})
	r, err := pipe.RunRound(ctx)
	if r == nil {
		return nil, s.roundFailed(err)
	}
	if errors.Is(err, sched.ErrUnverified) {
		// A placement that breaks the rules is a bug: nothing was pinned; say so loudly.
		s.log.Error("placement rejected before pinning", "error", err)
	} else if err != nil {
		// Pinning failed as a whole (backend error): what was decided is recorded; retry next round.
		s.log.Warn("pinning failed", "error", err)
	}
	s.metrics.Rounds.WithLabelValues("ok").Inc()
	s.mu.Lock()
	s.lastRound, s.lastErr = s.cfg.Now(), ""
	s.mu.Unlock()
	return r, nil
}

// tuneLoop asks the Tuner to learn every TuneEvery until ctx ends.
func (s *Service) tuneLoop(ctx context.Context) {
	every := s.cfg.TuneEvery
	if every <= 0 {
		every = time.Minute
	}
	tick.Every(ctx, every, func() {
		s.mu.RLock()
		snap := s.lastSnap
		s.mu.RUnlock()
		if snap == nil || !s.leading(ctx) {
			return
		}
		ran, adopted, err := s.stages.Tuner.Tune(ctx, snap)
		switch {
		case err != nil && ctx.Err() == nil:
			s.metrics.Tuning.WithLabelValues("error").Inc()
			s.log.Warn("online policy tuning failed; the current policy stays", "error", err)
		case ran && adopted:
			s.metrics.Tuning.WithLabelValues("adopted").Inc()
		case ran:
			s.metrics.Tuning.WithLabelValues("kept").Inc()
		}
	})
}

// notePinning notes decisions as they go to the backend (the pipeline's pin hook), so the
// explain API can answer for a job Nomad already shows as pinned before the round's records
// are written.
func (s *Service) notePinning(ds []cluster.Decision) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, d := range ds {
		s.pinning[d.JobKey()] = d
	}
}

func (s *Service) roundFailed(err error) error {
	s.metrics.Rounds.WithLabelValues("error").Inc()
	s.mu.Lock()
	s.lastErr = err.Error()
	s.mu.Unlock()
	return err
}

func (s *Service) withoutShadowDone(snap *cluster.Snapshot) *cluster.Snapshot {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := *snap
	out.Pending = nil
	for _, j := range snap.Pending {
		if idx, ok := s.shadowDone[j.Key()]; ok && idx == j.JobModifyIndex {
			continue
		}
		out.Pending = append(out.Pending, j)
	}
	return &out
}

// maintenance applies what the backend found between rounds.
func (s *Service) maintenance(ctx context.Context, round uint64, m *cluster.Maintenance) {
	now := s.cfg.Now()
	var recs []*store.DecisionRecord
	for _, rh := range m.Reheld {
		if !rh.Applied {
			s.log.Warn("re-holding a pinned job failed; retrying", "job", rh.JobKey, "reason", rh.Reason, "error", rh.Err)
			continue
		}
		s.metrics.Reheld.Inc()
		s.log.Warn("pinned job re-held; deciding again", "job", rh.JobKey, "reason", rh.Reason)
		rec := newRecord(round, now, rh.JobKey, store.StatusReheld)
		rec.Message = rh.Reason
		if prev, ok := s.store.Latest(rh.JobKey); ok {
			rec.Decision = prev.Decision
		}
		recs = append(recs, rec)
		s.mu.Lock()
		s.reheldReason[rh.JobKey] = rh.Reason
		s.mu.Unlock()
	}
	current := map[string]bool{}
	for _, inv := range m.Invalid {
		current[inv.JobKey] = true
		s.mu.RLock()
		old, seen := s.invalid[inv.JobKey]
		s.mu.RUnlock()
		if seen && old == inv.Err {
			continue
		}
		s.log.Error("held job has malformed hetgpu annotations; it stays held", "job", inv.JobKey, "error", inv.Err)
		rec := newRecord(round, now, inv.JobKey, store.StatusInvalid)
		rec.Message = inv.Err
		recs = append(recs, rec)
		s.mu.Lock()
		s.invalid[inv.JobKey] = inv.Err
		s.mu.Unlock()
	}
	s.mu.Lock()
	for k := range s.invalid {
		if !current[k] {
			delete(s.invalid, k)
		}
	}
	s.metrics.InvalidJobs.Set(float64(len(s.invalid)))
	for _, k := range m.Gone {
		delete(s.shadowDone, k)
		delete(s.placed, k)
		delete(s.reheldReason, k)
	}
	s.mu.Unlock()
	for _, k := range m.Gone {
		if prev, ok := s.store.Latest(k); ok && prev.Status != store.StatusGone {
			rec := newRecord(round, now, k, store.StatusGone)
			rec.Message = "job deregistered; dropped"
			recs = append(recs, rec)
		}
	}
	err := s.store.PutDecisions(recs)
	s.health.set(healthStore, err)
	if err != nil {
		s.log.Error("recording maintenance events failed", "error", err)
	}
	for _, p := range m.Placed {
		s.comparePlacement(p)
	}
	for _, fr := range m.Finished {
		s.learnRun(ctx, fr)
	}
}

func newRecord(round uint64, now time.Time, key, status string) *store.DecisionRecord {
	ns, id, group, _ := cluster.SplitGroupKey(key)
	return &store.DecisionRecord{Round: round, Time: now, JobKey: key, Namespace: ns, JobID: id, Group: group, Status: status}
}

// record stores a round's decisions and pin results and refreshes the queue view (the
// pipeline's record step). Explanations read the round's own state: its predictions, gangs
// and the snapshot it decided on.
func (s *Service) record(ctx context.Context, round uint64, r *sched.Round, tri *roundTriage) {
	now := s.cfg.Now()
	pred := r.State.Predictor()
	snap := r.Snapshot
	queue := make([]QueueEntry, 0, len(r.Ranked))
	rankOf := map[string]int{}
	for i, rk := range r.Ranked {
		if rk.Job == nil {
			continue
		}
		rankOf[rk.Job.Key()] = i
		queue = append(queue, queueEntry(i+1, rk, snap.Now))
	}
	s.metrics.QueueLength.Set(float64(len(snap.Pending) + len(tri.held)))
	if len(snap.Pending) > 0 {
		s.metrics.DecisionLatency.Observe(r.Latency.Seconds())
		if r.Place.Solver != "" {
			s.metrics.SolverOutcomes.WithLabelValues(r.Place.Solver, fmt.Sprint(r.Place.Fallback)).Inc()
		}
	}
	s.metrics.GangsDeferred.Add(float64(len(r.DeferredGangs)))
	if res := r.Reservation; res != nil {
		s.metrics.GangReservedGPUs.Set(float64(res.GPUs))
		if len(res.Held) > 0 {
			s.log.Info("GPUs reserved for a gang; jobs that would delay it wait", "gang", res.Gang, "gpus", res.GPUs,
				"until", res.Until, "held", len(res.Held))
		}
	} else {
		s.metrics.GangReservedGPUs.Set(0)
	}
	if r.PartialGangPins > 0 {
		s.metrics.GangPartialPins.Add(float64(r.PartialGangPins))
		s.log.Error("gangs pinned in part: the backend applied some but not all of a job's decisions", "gangs", r.PartialGangPins)
	}
	for _, p := range r.Preempted {
		switch {
		case p.Applied:
			s.metrics.Preemptions.WithLabelValues("applied").Inc()
			s.log.Info("preempted", "job", p.JobKey)
		case p.Conflict:
			s.metrics.Preemptions.WithLabelValues("conflict").Inc()
			s.log.Warn("preemption not applied", "job", p.JobKey, "error", p.Err)
		default:
			s.metrics.Preemptions.WithLabelValues("error").Inc()
			s.log.Warn("preemption failed", "job", p.JobKey, "error", p.Err)
		}
	}
	pinRes := map[string]cluster.PinResult{}
	for _, p := range r.Pins {
		pinRes[p.JobKey] = p
	}
	var pinned []cluster.Decision
	var recs []*store.DecisionRecord
	decided := map[string]bool{}
	var capOnce *capacity
	for i := range r.Decisions {
		d := r.Decisions[i]
		key := d.JobKey()
		decided[key] = true
		rec := newRecord(round, now, key, store.StatusShadow)
		d.PredThroughput, d.PredPowerW, d.Score = finite(d.PredThroughput), finite(d.PredPowerW), finite(d.Score)
		rec.Decision = &d
		rec.Solver = r.Place.Solver
		var job *cluster.Job
		if ri, ok := rankOf[key]; ok {
			rk := r.Ranked[ri]
			job = rk.Job
			rec.Rank, rec.Score, rec.Features, rec.QueueLen = ri+1, finite(rk.Score), finiteMap(rk.Features), len(r.Ranked)
			rec.JobModifyIndex = rk.Job.JobModifyIndex
		}
		if job != nil {
			if capOnce == nil {
				c := freeCapacity(snap)
				capOnce = &c
			}
			rec.Estimates = typeEstimates(*capOnce, job, pred, &d)
			rec.Alternatives = alternatives(*capOnce, job, &d, rec.Estimates)
		}
		switch {
		case s.cfg.Shadow:
			s.metrics.Pins.WithLabelValues("shadow").Inc()
			s.mu.Lock()
			s.shadowDone[key] = rec.JobModifyIndex
			s.mu.Unlock()
		default:
			p, ok := pinRes[key]
			switch {
			case !ok:
				rec.Status, rec.Message = store.StatusPinFailed, "not pinned: the backend failed this round"
				s.metrics.Pins.WithLabelValues("error").Inc()
			case p.Applied:
				rec.Status = store.StatusPinned
				s.metrics.Pins.WithLabelValues("applied").Inc()
				s.mu.Lock()
				delete(s.reheldReason, key)
				s.mu.Unlock()
			case p.Conflict:
				rec.Status = store.StatusConflict
				rec.Message = errString(p.Err, "the job changed underneath; decided again next round")
				s.metrics.Pins.WithLabelValues("conflict").Inc()
				s.metrics.Conflicts.Inc()
			case errors.Is(p.Err, cluster.ErrJobGone):
				rec.Status, rec.Message = store.StatusGone, p.Err.Error()
				s.metrics.Pins.WithLabelValues("error").Inc()
			default:
				rec.Status = store.StatusPinFailed
				rec.Message = errString(p.Err, "pin failed")
				s.metrics.Pins.WithLabelValues("error").Inc()
			}
		}
		recs = append(recs, rec)
		if rec.Status == store.StatusPinned {
			pinned = append(pinned, d)
		}
		if rec.Status == store.StatusPinned || rec.Status == store.StatusShadow {
			s.log.Info("decision", "job", key, "status", rec.Status, "gpu_type", d.GPUType, "gpus", d.GPUs(),
				"nodes", len(d.Assign), "rank", rec.Rank, "score", rec.Score)
		} else {
			s.log.Warn("decision not applied", "job", key, "status", rec.Status, "message", rec.Message)
		}
	}
	err := s.store.PutDecisions(recs)
	s.health.set(healthStore, err)
	if err != nil {
		s.log.Error("recording decisions failed", "error", err)
	}
	for i := range queue {
		if decided[queue[i].JobKey] {
			queue[i].Status = "decided"
		}
	}
	s.classify(queue, r, decided, pred)
	queue = append(queue, heldEntries(tri, snap)...)
	setGangs(queue, r, tri)
	full := snap
	if len(tri.held) > 0 {
		// Explanations of the groups set aside read their estimates from the snapshot.
		cp := *snap
		cp.Pending = append([]cluster.Job(nil), snap.Pending...)
		for _, h := range tri.held {
			cp.Pending = append(cp.Pending, h.job)
		}
		full = &cp
	}
	s.mu.Lock()
	s.lastSnap = full
	s.lastPinned = pinned
	s.queue = queue
	for k := range decided {
		delete(s.pinning, k)
	}
	s.mu.Unlock()
	s.noteWaits(ctx, queue)
	if s.cfg.Shadow {
		s.mu.RLock()
		var ps []cluster.Placement
		for _, p := range s.placed {
			ps = append(ps, p)
		}
		s.mu.RUnlock()
		for _, p := range ps {
			s.comparePlacement(p)
		}
	}
}

func errString(err error, def string) string {
	if err == nil {
		return def
	}
	return err.Error()
}

// comparePlacement compares a shadow decision with Nomad's placement, once both exist.
func (s *Service) comparePlacement(p cluster.Placement) {
	rec, ok := s.store.Latest(p.JobKey)
	if !ok || rec.Status != store.StatusShadow || rec.Decision == nil {
		s.mu.Lock()
		s.placed[p.JobKey] = p
		s.mu.Unlock()
		return
	}
	s.mu.Lock()
	delete(s.placed, p.JobKey)
	s.mu.Unlock()
	if rec.Shadow != nil {
		return
	}
	var ours []string
	for _, a := range rec.Decision.Assign {
		ours = append(ours, a.NodeID)
	}
	sort.Strings(ours)
	sh := &store.Shadow{NomadNodeIDs: p.NodeIDs, NomadDeviceIDs: p.DeviceIDs, NomadGPUType: p.GPUType,
		SameNodes: strings.Join(ours, ",") == strings.Join(p.NodeIDs, ","), SameGPUType: p.GPUType == rec.Decision.GPUType, PlacedAt: p.Time}
	for _, e := range rec.Estimates {
		if e.GPUType == p.GPUType {
			sh.NomadPredThr = e.Throughput
		}
	}
	if err := s.store.UpdateLatest(p.JobKey, func(r *store.DecisionRecord) { r.Shadow = sh }); err != nil {
		s.log.Warn("recording the shadow comparison failed", "job", p.JobKey, "error", err)
		return
	}
	s.metrics.Shadow.WithLabelValues(fmt.Sprint(sh.SameGPUType)).Inc()
	s.log.Info("shadow comparison", "job", p.JobKey, "hetgpu_gpu_type", rec.Decision.GPUType, "nomad_gpu_type", p.GPUType, "same_nodes", sh.SameNodes)
}

// Health is the service's state for GET /v1/health.
type Health struct {
	Status       string    `json:"status"`
	Backend      string    `json:"backend"`
	Shadow       bool      `json:"shadow"`
	Rounds       uint64    `json:"rounds"`
	LastRound    time.Time `json:"last_round,omitempty"`
	LastError    string    `json:"last_error,omitempty"`
	Queue        int       `json:"queue"`
	Invalid      int       `json:"invalid"`
	Decisions    int       `json:"decisions"`
	Observations int       `json:"observations"`
	StateFile    string    `json:"state_file"`
	Uptime       float64   `json:"uptime_s"`
	// StorageErrors say what cannot be written now (store, catalog): health is degraded
	// until a write succeeds again.
	StorageErrors []string `json:"storage_errors,omitempty"`
	// Ranker is the ranking policy in use and why.
	Ranker *RankerStatus `json:"ranker,omitempty"`
	// Role is "single" (one replica), "leader" or "standby"; Leader is the leading
	// replica's address (else id), ReplicaID this replica's id.
	Role      string `json:"role"`
	Leader    string `json:"leader,omitempty"`
	ReplicaID string `json:"replica_id,omitempty"`
}

// Health reports whether rounds are running. "degraded" when the last round failed or none
// ran for three reconcile periods.
func (s *Service) Health() Health {
	s.mu.RLock()
	h := Health{Status: "ok", Backend: s.cfg.BackendName, Shadow: s.cfg.Shadow, Rounds: s.round, LastRound: s.lastRound,
		LastError: s.lastErr, Queue: len(s.queue), Invalid: len(s.invalid)}
	s.mu.RUnlock()
	now := s.cfg.Now()
	h.Uptime = now.Sub(s.started).Seconds()
	h.Decisions = s.store.DecisionCount()
	h.Observations = s.store.ObservationCount()
	h.StateFile = s.store.Path()
	if s.health.has(healthStore) {
		s.probeStore(now)
	}
	h.StorageErrors = s.health.reasons()
	if s.cfg.Ranker != nil {
		rs := s.cfg.Ranker()
		h.Ranker = &rs
	}
	if s.cfg.Estimates != nil {
		if h.Ranker == nil {
			h.Ranker = &RankerStatus{}
		}
		st := s.cfg.Estimates.Stats()
		h.Ranker.Estimates = &st
	}
	if s.cfg.History != nil {
		if h.Ranker == nil {
			h.Ranker = &RankerStatus{}
		}
		st := s.cfg.History.Stats()
		h.Ranker.History = &st
	}
	stale := h.LastRound.IsZero() && now.Sub(s.started) > 3*s.cfg.Reconcile || !h.LastRound.IsZero() && now.Sub(h.LastRound) > 3*s.cfg.Reconcile
	if standby, since := s.role(&h); standby {
		stale = false
	} else if h.LastRound.Before(since) {
		// A replica that just took over is stale only once it led three periods without a round.
		stale = now.Sub(since) > 3*s.cfg.Reconcile
	}
	if h.LastError != "" || stale || len(h.StorageErrors) > 0 {
		h.Status = "degraded"
	}
	return h
}

// probeStore tries a small write while the store is failing (at most every 5 s), so health
// recovers when the disk does even if nothing else is written.
func (s *Service) probeStore(now time.Time) {
	s.health.mu.Lock()
	due := now.Sub(s.health.probed) >= 5*time.Second
	if due {
		s.health.probed = now
	}
	s.health.mu.Unlock()
	if due {
		s.health.set(healthStore, s.store.PutMeta("health_probe", now.UTC().Format(time.RFC3339Nano)))
	}
}
