// Package sched is the scheduling framework: the narrow interfaces of each stage and the
// Pipeline that runs one round, snapshot -> rank -> predict -> place -> pin. Stages live in
// their own packages (sidecar/stages/rank, sidecar/stages/predict, sidecar/stages/place) and know nothing of each
// other beyond these interfaces; backends (Nomad, simulator) implement cluster.Cluster.
package sched

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/hetgpu/hetgpu/model/cluster"
	"github.com/hetgpu/hetgpu/model/history"
)

// Estimate is a predicted figure for one job on one GPU type and count.
type Estimate struct {
	// Throughput of the whole job in its own units (samples or steps per second).
	Throughput float64
	// PowerW is the average power of all GPUs the job uses, in watts.
	PowerW float64
	// Uncertainty is a relative standard deviation (0.1 = +-10 %).
	Uncertainty float64
	// Source says where the figure came from ("catalog", "p1", "p1p2", "datasheet-prior").
	Source string
}

// Predictor estimates how fast and at what power a job runs on a GPU type (GOGH's P1/P2).
type Predictor interface {
	Predict(job *cluster.Job, gpuType string, gpus int) Estimate
}

// Learner takes measured runs and updates what it knows (catalog, P2, policy).
type Learner interface {
	Observe(ctx context.Context, obs cluster.Observation) error
}

// BatchLearner is a Learner that takes several runs at once and updates once (a round that
// preempts many jobs ends many runs at the same instant).
type BatchLearner interface {
	Learner
	ObserveAll(ctx context.Context, obs []cluster.Observation) error
}

// ObserveAll gives l the runs in one call when it is a BatchLearner, else one by one.
func ObserveAll(ctx context.Context, l Learner, obs []cluster.Observation) error {
	if b, ok := l.(BatchLearner); ok {
		return b.ObserveAll(ctx, obs)
	}
	var errs []error
	for _, o := range obs {
		if err := l.Observe(ctx, o); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Ranked is a pending job with the prioritiser's score; higher scores go first.
type Ranked struct {
	Job   *cluster.Job
	Score float64
	// RankerPos, when > 0, is the 1-based position the ranker gave the job before the queue
	// stage moved it ahead into its queue's guarantee (sched.Queues): the placement's priority
	// (place.Config, P_j) is taken from it, not from the job's place in the order.
	RankerPos int
	// Features are the inputs the score came from, for the queue and explain APIs.
	Features map[string]float64
}

// Ranker orders the pending queue (RLTune's policy or a heuristic).
type Ranker interface {
	Rank(ctx context.Context, snap *cluster.Snapshot, pred Predictor) ([]Ranked, error)
}

// Estimator is the estimates step: before anything ranks, it fills the runtime estimates
// (Annotations.EstRuntime, what is left on the reference GPU type, and Annotations.Est) of the
// snapshot's pending and preemptible jobs that carry none from the user, from what the cluster
// sees. It learns from the whole runtimes of the jobs that finish, which both backends report.
type Estimator interface {
	Estimate(ctx context.Context, snap *cluster.Snapshot, pred Predictor) error
	ObserveRuntime(r history.Run)
}

// PlaceStats describes one placement solve.
type PlaceStats struct {
	Candidates int
	Variables  int
	// Solver is "milp", "greedy" or "decomposed".
	Solver    string
	Objective float64
	// Gap is the MIP gap HiGHS reported (0 when proven optimal or not a MIP).
	Gap      float64
	Fallback bool
	// FallbackReason says why the greedy answer was used (time limit, solver error).
	FallbackReason string
	SolveTime      time.Duration
}

// Placer maps ranked jobs to nodes and exact GPU instances, or leaves them waiting.
type Placer interface {
	Place(ctx context.Context, st *RoundState, snap *cluster.Snapshot, ranked []Ranked, pred Predictor) ([]cluster.Decision, PlaceStats, error)
}

// Preemptor is the optional preemption stage: given every active job ranked together (the
// pending ones and the running ones the snapshot lists as Preemptible, best first), it picks
// the running jobs to stop so that better-ranked jobs can start or running jobs can move to
// much faster GPUs, and the order in which the placer takes the queue afterwards.
type Preemptor interface {
	Plan(ctx context.Context, st *RoundState, snap *cluster.Snapshot, ranked []Ranked, pred Predictor) (Plan, error)
}

// Plan is a Preemptor's answer.
type Plan struct {
	Preempt []cluster.Preemption
	// Order ranks the jobs that wait once Preempt is applied (pending and preempted), best
	// first; the placer takes it instead of a second ranking.
	Order []Ranked
}

// Round is what one pipeline round did, for metrics, logs and the explain API.
type Round struct {
	Snapshot  *cluster.Snapshot
	Ranked    []Ranked
	Decisions []cluster.Decision
	Pins      []cluster.PinResult
	Place     PlaceStats
	// Preempted holds the backend's answers to the preemptions of this round.
	Preempted []cluster.PinResult
	// Latency is wall time from snapshot to pins issued.
	Latency time.Duration
	// DeferredGangs are the gangs ("namespace/id") a placement decided in part: they were
	// taken out and the round placed again without them, so none of their groups was decided.
	DeferredGangs []string
	// Reservation is the gang this round held GPUs for and the jobs it held back, or nil.
	Reservation *Reservation
	// PartialGangPins counts the gangs the backend pinned in part (see PartialGangPins); 0
	// unless a backend applies part of one job's decisions.
	PartialGangPins int

	// State is the round's state: what its steps computed once and read (compiled
	// constraints, gangs, predictions).
	State *RoundState
}

// Pipeline runs decision rounds against a cluster backend. Its steps run in this order:
// snapshot (Cluster), triage, estimates (UserEstimates, then Estimator), queues, rank, predict,
// preempt, place, verify, pin (BeforePin, then Cluster.Pin) and record; a step left empty is
// skipped. New builds one from a policy's stages and a backend's options; every backend and
// policy goes through it.
type Pipeline struct {
	Cluster cluster.Cluster
	// Triage, when set, runs on every snapshot before anything else: it returns the snapshot
	// without the pending jobs that must not be ranked (the live service sets aside the groups
	// that can never run on the cluster).
	Triage func(ctx context.Context, st *RoundState, snap *cluster.Snapshot) *cluster.Snapshot
	// UserEstimates, when set, opens the estimates step: it writes into the snapshot's jobs the
	// runtime estimates their users wrote (the simulator replays them; a live backend's
	// snapshot carries them already).
	UserEstimates func(snap *cluster.Snapshot)
	// Estimator, when set, fills the runtime estimates of jobs without one before ranking.
	Estimator Estimator
	// Queues, when set, is the queue stage: caps, reclaim and the fair-share order.
	Queues    Queues
	Ranker    Ranker
	Predictor Predictor
	// Memoize, when set, caches each round's predictions per (job, GPU type, count) in its
	// RoundState (the live service: ranker, placer and explanations ask the same questions).
	Memoize bool
	// Preemptor, when set and the backend is a cluster.Preempter, runs before placement.
	Preemptor Preemptor
	Placer    Placer
	// ReserveAfter, when > 0, lets the best-ranked gang that has waited this long go first
	// and, when it cannot be placed, reserve GPUs (see Reservation); 0 never reserves.
	ReserveAfter time.Duration
	// BeforePin, when set, sees the verified decisions just before they go to the backend.
	BeforePin func(ds []cluster.Decision)
	// Shadow, when set, decides without preempting, verifying or pinning (shadow mode).
	Shadow bool
	// Record, when set, sees every round that decided (also one whose verification or pins
	// failed), after its pins.
	Record func(ctx context.Context, r *Round)
	// Reuse, when set, lends the round the arrays of earlier rounds for the snapshot it
	// derives after preemptions. Set it only where nothing reads a round's snapshot after the
	// next round starts (the simulator without an OnRound hook).
	Reuse *Scratch
	// OnCompile, when set, is handed to every round's state (RoundState.OnCompile).
	OnCompile func(jobKey string)
}

// newState is a new round's state.
func (p *Pipeline) newState() *RoundState {
	pred := p.Predictor
	if p.Memoize && pred != nil {
		pred = NewMemo(pred)
	}
	st := NewRoundState(pred)
	st.onCompile = p.OnCompile
	return st
}

// Scratch holds arrays a Pipeline reuses from round to round (Pipeline.Reuse).
type Scratch struct {
	running              []cluster.Alloc
	pending, preemptible []cluster.Job
}

// RunRound takes one snapshot and carries it through every stage.
func (p *Pipeline) RunRound(ctx context.Context) (*Round, error) {
	start := time.Now()
	st := p.newState()
	snap, err := p.Cluster.Snapshot(ctx)
	if err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	snap, err = p.open(ctx, st, snap)
	if err != nil {
		return nil, err
	}
	var order []Ranked
	var preempted []cluster.PinResult
	// Plan even with nothing pending: a running job may move to GPUs that just freed up.
	if pre, ok := p.Cluster.(cluster.Preempter); ok && !p.Shadow && p.Preemptor != nil && len(snap.Preemptible) > 0 {
		plan, err := p.plan(ctx, st, snap)
		if err != nil {
			return nil, err
		}
		plan.Preempt = GangPreemptions(snap, plan.Preempt)
		if len(plan.Preempt) > 0 {
			preempted, err = pre.Preempt(ctx, plan.Preempt)
			if err != nil {
				return nil, fmt.Errorf("preempt %d jobs: %w", len(plan.Preempt), err)
			}
			snap = p.Reuse.afterPreemption(snap, preempted)
			if p.Queues != nil {
				// The freed GPUs are idle GPUs a reserve may hold; relocated jobs go first.
				snap = p.Queues.Prepare(withRelocated(snap, plan.Preempt, preempted))
			}
		}
		order = keepPending(plan.Order, snap)
		if p.Queues != nil && len(preempted) > 0 && order != nil {
			// The preemptions changed what each queue holds: its guarantee admits other jobs now.
			order = p.Queues.Order(st, snap, order)
		}
	}
	r, err := p.decide(ctx, st, snap, order)
	if err != nil {
		return nil, err
	}
	r.Preempted = preempted
	err = p.pin(ctx, st, r)
	r.Latency = time.Since(start)
	if p.Record != nil {
		p.Record(ctx, r)
	}
	return r, err
}

// pin verifies the round's decisions and pins them.
func (p *Pipeline) pin(ctx context.Context, st *RoundState, r *Round) error {
	if len(r.Decisions) == 0 || p.Shadow {
		return nil
	}
	if v, ok := p.Placer.(Verifier); ok {
		if err := v.Verify(st, r.Snapshot, r.Decisions); err != nil {
			return fmt.Errorf("%w: %w", ErrUnverified, err)
		}
	}
	if p.BeforePin != nil {
		p.BeforePin(r.Decisions)
	}
	var err error
	r.Pins, err = p.Cluster.Pin(ctx, r.Decisions)
	if err != nil {
		return fmt.Errorf("pin %d decisions: %w", len(r.Decisions), err)
	}
	r.PartialGangPins = PartialGangPins(st.Gangs(), r.Pins)
	return nil
}

// Decide ranks and places the pending jobs of a snapshot without pinning (shadow mode; it
// never preempts).
func (p *Pipeline) Decide(ctx context.Context, snap *cluster.Snapshot) (*Round, error) {
	start := time.Now()
	st := p.newState()
	snap, err := p.open(ctx, st, snap)
	if err != nil {
		return nil, err
	}
	r, err := p.decide(ctx, st, snap, nil)
	if err != nil {
		return nil, err
	}
	r.Latency = time.Since(start)
	if p.Record != nil {
		p.Record(ctx, r)
	}
	return r, nil
}

// open runs the steps before ranking: triage, estimates, the free-capacity index and the
// queue stage's Prepare.
func (p *Pipeline) open(ctx context.Context, st *RoundState, snap *cluster.Snapshot) (*cluster.Snapshot, error) {
	if p.Triage != nil {
		snap = p.Triage(ctx, st, snap)
	}
	if p.UserEstimates != nil {
		p.UserEstimates(snap)
	}
	if p.Estimator != nil {
		if err := p.Estimator.Estimate(ctx, snap, st.Predictor()); err != nil {
			return nil, fmt.Errorf("runtime estimates: %w", err)
		}
	}
	snap = snap.Indexed() // every stage reads this round's free capacity from one index
	if p.Queues != nil {
		snap = p.Queues.Prepare(snap)
	}
	return snap, nil
}

// plan ranks pending and preemptible running jobs together and asks the Preemptor.
func (p *Pipeline) plan(ctx context.Context, st *RoundState, snap *cluster.Snapshot) (Plan, error) {
	pred := st.Predictor()
	active := *snap
	active.Pending = snap.Active()
	ranked, err := p.Ranker.Rank(ctx, &active, pred)
	if err != nil {
		return Plan{}, fmt.Errorf("rank %d active jobs: %w", len(active.Pending), err)
	}
	if p.Queues != nil {
		ranked = p.Queues.Order(st, snap, ranked)
	}
	plan, err := p.Preemptor.Plan(ctx, st, snap, ranked, pred)
	if err != nil {
		return Plan{}, fmt.Errorf("preemption plan: %w", err)
	}
	return plan, nil
}

// AfterPreemption is the snapshot once the applied preemptions took effect: their jobs wait
// again (with their attained service) and their allocations are gone.
func AfterPreemption(snap *cluster.Snapshot, res []cluster.PinResult) *cluster.Snapshot {
	return (*Scratch)(nil).afterPreemption(snap, res)
}

// afterPreemption is AfterPreemption writing into s's arrays (nil s: new ones).
func (s *Scratch) afterPreemption(snap *cluster.Snapshot, res []cluster.PinResult) *cluster.Snapshot {
	gone := appliedKeys(res)
	if len(gone) == 0 {
		return snap
	}
	out := *snap
	var running []cluster.Alloc
	var pending, preemptible []cluster.Job
	if s != nil {
		running, pending, preemptible = s.running[:0], s.pending, s.preemptible
	}
	if cap(running) < len(snap.Running) {
		running = make([]cluster.Alloc, 0, len(snap.Running)+cap(running)/2)
	}
	for i := range snap.Running {
		if !gone[snap.Running[i].Key()] {
			running = append(running, snap.Running[i])
		}
	}
	out.Running = running
	out.Preemptible, out.Pending = moveJobs(snap.Preemptible, snap.Pending, gone, nil, preemptible, pending)
	if s != nil {
		s.running, s.pending, s.preemptible = out.Running, out.Pending, out.Preemptible
	}
	return out.Indexed() // the freed GPUs are free
}

// moveJobs returns from without the jobs keys names, and a copy of to with those of them
// appended that keep accepts (all when keep is nil). The results are written into the arrays
// of restBuf and movedBuf when they are large enough (nil: new arrays).
func moveJobs(from, to []cluster.Job, keys map[string]bool, keep func(*cluster.Job) bool, restBuf, movedBuf []cluster.Job) (rest, moved []cluster.Job) {
	// A buffer grown is grown with room to spare: queues grow a little most rounds.
	rest = restBuf[:0]
	if cap(rest) < len(from) {
		rest = make([]cluster.Job, 0, len(from)+cap(restBuf)/2)
	}
	moved = movedBuf[:0]
	if cap(moved) < len(to)+len(keys) {
		moved = make([]cluster.Job, 0, len(to)+len(keys)+cap(movedBuf)/2)
	}
	moved = append(moved, to...)
	for i := range from {
		// By index: &j of a range variable would put a copy of every job on the heap.
		j := &from[i]
		switch {
		case !keys[j.Key()]:
			rest = append(rest, *j)
		case keep == nil || keep(j):
			moved = append(moved, *j)
		}
	}
	return rest, moved
}

// appliedKeys are the jobs whose backend answer says applied.
func appliedKeys(res []cluster.PinResult) map[string]bool {
	out := map[string]bool{}
	for _, r := range res {
		if r.Applied {
			out[r.JobKey] = true
		}
	}
	return out
}

// keepPending keeps the ranked jobs that are waiting in snap, pointing at snap's copies.
func keepPending(order []Ranked, snap *cluster.Snapshot) []Ranked {
	idx := make(map[string]int, len(snap.Pending))
	for i := range snap.Pending {
		idx[snap.Pending[i].Key()] = i
	}
	out := make([]Ranked, 0, len(snap.Pending))
	for _, r := range order {
		if i, ok := idx[r.Job.Key()]; ok {
			r.Job = &snap.Pending[i]
			out = append(out, r)
			delete(idx, r.Job.Key())
		}
	}
	if len(idx) > 0 {
		return nil // the plan missed a waiting job: rank afresh
	}
	return out
}

func (p *Pipeline) decide(ctx context.Context, st *RoundState, snap *cluster.Snapshot, order []Ranked) (*Round, error) {
	r := &Round{Snapshot: snap, State: st}
	if len(snap.Pending) == 0 {
		st.decided(snap, nil)
		return r, nil
	}
	ranked := order
	if ranked == nil {
		var err error
		ranked, err = p.Ranker.Rank(ctx, snap, st.Predictor())
		if err != nil {
			return nil, fmt.Errorf("rank %d pending jobs: %w", len(snap.Pending), err)
		}
		if p.Queues != nil {
			ranked = p.Queues.Order(st, snap, ranked)
		}
	}
	gangs := GangsOf(snap.Pending)
	st.decided(snap, gangs)
	ranked = GroupGangs(ranked, gangs)
	var res *Reservation
	if p.ReserveAfter > 0 && len(gangs) > 0 {
		if g, since := headGang(snap, ranked, gangs, p.ReserveAfter); g != "" {
			ranked = toFront(ranked, gangs, g)
			res = &Reservation{Gang: g, Since: since}
			for i := range snap.Pending {
				if gangs[g][snap.Pending[i].Key()] {
					res.GPUs += snap.Pending[i].GPUs
				}
			}
		}
	}
	r.Ranked = ranked
	deferred := map[string]bool{}
	var err error
	r.Decisions, r.Place, err = p.placeWhole(ctx, st, snap, ranked, gangs, deferred)
	if err != nil {
		return nil, err
	}
	if res != nil && !decidesGang(r.Decisions, gangs, res.Gang) {
		if err := p.reserve(ctx, st, snap, r, ranked, gangs, deferred, res); err != nil {
			return nil, err
		}
	}
	for g := range deferred {
		r.DeferredGangs = append(r.DeferredGangs, g)
	}
	sort.Strings(r.DeferredGangs)
	return r, nil
}

// placeWhole places ranked and makes the answer take gangs whole. A gang decided in part is
// taken out and the rest placed again, so its GPUs go to the jobs behind it this round; after
// maxGangRetries solves what is still partial is dropped. Placers know nothing of gangs: this
// keeps every solver (MILP, decomposed, greedy) all-or-nothing. Gangs taken out are added to
// deferred.
func (p *Pipeline) placeWhole(ctx context.Context, rs *RoundState, snap *cluster.Snapshot, ranked []Ranked, gangs Gangs, deferred map[string]bool) ([]cluster.Decision, PlaceStats, error) {
	ds, st, err := p.Placer.Place(ctx, rs, snap, ranked, rs.Predictor())
	if err != nil {
		return nil, st, fmt.Errorf("place %d ranked jobs: %w", len(ranked), err)
	}
	out := map[string]bool{}
	for try := 0; ; try++ {
		partial := PartialGangs(gangs, ds)
		if len(partial) == 0 {
			break
		}
		for _, g := range partial {
			out[g], deferred[g] = true, true
		}
		if try == maxGangRetries {
			ds = dropGangDecisions(ds, gangs, out)
			break
		}
		ranked = withoutGangs(ranked, gangs, out)
		if len(ranked) == 0 {
			ds = nil
			break
		}
		ds, st, err = p.Placer.Place(ctx, rs, snap, ranked, rs.Predictor())
		if err != nil {
			return nil, st, fmt.Errorf("place %d ranked jobs without %d partly placed gangs: %w", len(ranked), len(out), err)
		}
	}
	return ds, st, nil
}

// reserve holds GPUs for the reserved gang that this round could not place: the decisions
// that would delay it are dropped (see Reservation), and the round is placed once more
// without those jobs, so that jobs that may backfill get the room they took.
func (p *Pipeline) reserve(ctx context.Context, rs *RoundState, snap *cluster.Snapshot, r *Round, ranked []Ranked, gangs Gangs, deferred map[string]bool, res *Reservation) error {
	at, extra, ok := shadowTime(snap, res.GPUs)
	if ok {
		res.Until = at
	}
	jobs := make(map[string]*cluster.Job, len(ranked))
	for _, rk := range ranked {
		jobs[rk.Job.Key()] = rk.Job
	}
	kept, held := p.backfillWhole(rs.Predictor(), snap, r.Decisions, jobs, gangs, res, extra)
	if len(held) > 0 {
		out := map[string]bool{}
		for _, k := range held {
			out[k] = true
		}
		rest := make([]Ranked, 0, len(ranked))
		for _, rk := range ranked {
			if !out[rk.Job.Key()] {
				rest = append(rest, rk)
			}
		}
		ds, st, err := p.placeWhole(ctx, rs, snap, rest, gangs, deferred)
		if err != nil {
			return err
		}
		var more []string
		kept, more = p.backfillWhole(rs.Predictor(), snap, ds, jobs, gangs, res, extra)
		held = append(held, more...)
		r.Place = st
	}
	r.Decisions = kept
	sort.Strings(held)
	res.Held = held
	r.Reservation = res
	return nil
}

// backfillWhole is backfill that holds a gang back whole when it holds back any member.
func (p *Pipeline) backfillWhole(pred Predictor, snap *cluster.Snapshot, ds []cluster.Decision, jobs map[string]*cluster.Job, gangs Gangs, res *Reservation, extra int) ([]cluster.Decision, []string) {
	// The reserved gang itself is never held back (it may fit once others were held).
	var own, others []cluster.Decision
	for _, d := range ds {
		if gangs.Of(d.JobKey()) == res.Gang {
			own = append(own, d)
		} else {
			others = append(others, d)
		}
	}
	kept, held := backfill(snap, others, jobs, res, extra, pred)
	kept = append(own, kept...)
	if part := PartialGangs(gangs, kept); len(part) > 0 {
		drop := map[string]bool{}
		for _, g := range part {
			drop[g] = true
		}
		for _, d := range kept {
			if drop[gangs.Of(d.JobKey())] {
				held = append(held, d.JobKey())
			}
		}
		kept = dropGangDecisions(kept, gangs, drop)
	}
	return kept, held
}

// decidesGang reports whether ds decides gang g (whole, as placeWhole leaves it).
func decidesGang(ds []cluster.Decision, gangs Gangs, g string) bool {
	for i := range ds {
		if gangs.Of(ds[i].JobKey()) == g {
			return true
		}
	}
	return false
}
