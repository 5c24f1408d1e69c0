package baselines

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/lanl/highs"

	"github.com/hetgpu/hetgpu/model/cluster"
	"github.com/hetgpu/hetgpu/sidecar/sched"
	"github.com/hetgpu/hetgpu/sidecar/stages/place"
)

// Gavel is Gavel's heterogeneity-aware least-attained-service policy (max-min fairness over
// normalised effective throughput) with its round-based mechanism (Narayanan et al.,
// "Heterogeneity-Aware Cluster Scheduling Policies for Deep Learning Workloads", OSDI 2020), as
// pipeline stages: it ranks (sched.Ranker), preempts at round boundaries (sched.Preemptor),
// places each job on the GPU type its grant names (sched.Placer) and asks for a round every
// Round (sched.Waker). One value holds the state of the three stages.
//
// Allocation: whenever the set of active jobs (waiting and preemptible running) changes, an LP
// (HiGHS) finds X[j][t], the fraction of time job j should spend on GPU type t, maximising
// min_j throughput_j(X) / equal_j where throughput_j(X) = sum_t thr[j][t] X[j][t], equal_j is
// the job's throughput when it gets an equal time share of every type (sum_t thr[j][t] cap_t /
// sum cap), subject to sum_t X[j][t] <= 1 and sum_j gpus_j X[j][t] <= cap_t. thr comes from the
// predictor (Gavel profiles every job type on every GPU type; the simulator gives the measured
// table).
//
// Mechanism: every Round, (job, type) pairs are ranked by priority X[j][t] / share[j][t]
// (share = fraction of the job's time in the system it has spent on t; unserved pairs first) and
// granted greedily while the type has GPUs; running jobs not granted their current type are
// preempted (progress kept) and granted jobs start on their type. Between rounds, and after the
// grants, waiting jobs take free GPUs in pair priority order (no preemption), so GPUs do not
// idle until the next round. Placement on a type is first-fit (place.Packer). The simulator runs a
// round at each boundary (NextRound); the live sidecar at its first reconcile after it. Only
// preemptible running jobs take part; the others just hold their GPUs.
type Gavel struct {
	// Round is the round length (Gavel: 6 minutes).
	Round time.Duration

	mu        sync.Mutex
	next      time.Time // the next full round
	roundAt   time.Time // the round the fields below are for
	full      bool
	alloc     map[string]map[string]float64 // job key -> GPU type -> X
	received  map[string]map[string]float64 // job key -> GPU type -> seconds run
	lastSeen  map[string]time.Time          // last accounting time of running jobs
	active    map[string]bool
	pairs     []*gavelPair // this round's (job, type) pairs, best first (into pairBuf)
	pairBuf   []gavelPair
	granted   map[string]string
	runningOn map[string]string // running job key -> its GPU type
	// seen, jobs, place, started and waiting are scratch, kept for the next round.
	seen    map[string]bool
	jobs    []activeJob
	place   map[string]int
	started map[string]time.Time
	waiting map[string]*cluster.Job
	// lpVars and lpNZ are the last LP's arrays, reused by the next (solve).
	lpVars []gavelVar
	lpNZ   []highs.Nonzero
	// spareRows are emptied alloc rows for the next solve to fill.
	spareRows []map[string]float64
}

type gavelPair struct {
	key  string
	typ  string
	prio float64
	x    float64
	ord  int // the job's place in submission order
}

// NewGavel is Gavel with its 6-minute rounds.
func NewGavel() *Gavel { return &Gavel{Round: 6 * time.Minute} }

var (
	_ sched.Ranker    = (*Gavel)(nil)
	_ sched.Preemptor = (*Gavel)(nil)
	_ sched.Placer    = (*Gavel)(nil)
	_ sched.Waker     = (*Gavel)(nil)
)

// activeJob is a job Gavel allocates, with its key.
type activeJob struct {
	*cluster.Job
	key string
}

// activeJobs are the jobs Gavel allocates: the waiting and the preemptible running ones (the
// pipeline ranks both together before preempting), once each, in submission order.
// seen and out are cleared and filled (the caller's arrays from the last round).
func activeJobs(snap *cluster.Snapshot, seen map[string]bool, out []activeJob) []activeJob {
	clear(seen)
	out = out[:0]
	for _, jobs := range [][]cluster.Job{snap.Pending, snap.Preemptible} {
		for i := range jobs {
			if k := jobs[i].Key(); !seen[k] {
				seen[k] = true
				out = append(out, activeJob{&jobs[i], k})
			}
		}
	}
	slices.SortStableFunc(out, func(a, b activeJob) int {
		if c := a.SubmitTime.Compare(b.SubmitTime); c != 0 {
			return c
		}
		return cmp.Compare(a.key, b.key)
	})
	return out
}

// Rank implements sched.Ranker: it accounts the time running jobs received, solves the
// allocation when the active jobs changed, orders the (job, type) pairs and, at a round
// boundary, grants types. The waiting jobs come back in the order of their best pair.
func (g *Gavel) Rank(ctx context.Context, snap *cluster.Snapshot, pred sched.Predictor) ([]sched.Ranked, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.alloc == nil {
		g.alloc, g.received, g.lastSeen = map[string]map[string]float64{}, map[string]map[string]float64{}, map[string]time.Time{}
	}
	now := snap.Now
	g.account(snap)
	if g.seen == nil {
		g.seen = map[string]bool{}
	}
	jobs := activeJobs(snap, g.seen, g.jobs)
	g.jobs = jobs
	if !sameJobs(jobs, g.active) {
		active := make(map[string]bool, len(jobs))
		for _, j := range jobs {
			active[j.key] = true
		}
		if err := g.solve(snap, jobs, pred); err != nil {
			return nil, err
		}
		g.active = active
		for k := range g.received {
			if !active[k] {
				delete(g.received, k)
				delete(g.lastSeen, k)
			}
		}
	}
	if !now.Equal(g.roundAt) {
		// One decision per round: the pipeline may rank twice (before and after preempting).
		g.roundAt = now
		g.full = !now.Before(g.next)
		if g.full {
			g.next = now.Add(g.Round)
		}
	}
	g.pairBuf = g.pairBuf[:0]
	for ord, j := range jobs {
		k := j.key
		age := math.Max(now.Sub(j.SubmitTime).Seconds(), 1)
		start := len(g.pairBuf)
		for t, x := range g.alloc[k] {
			if x <= 1e-6 {
				continue
			}
			prio := math.Inf(1)
			if share := g.received[k][t] / age; share > 0 {
				prio = x / share
			}
			g.pairBuf = append(g.pairBuf, gavelPair{key: k, typ: t, prio: prio, x: x, ord: ord})
		}
		// Map order is random and samePrio is not transitive, so the stable sort below must
		// see the same input order every run.
		slices.SortFunc(g.pairBuf[start:], func(a, b gavelPair) int { return cmp.Compare(a.typ, b.typ) })
	}
	// The stable sort moves pointers, not the pairs (its merges move each element many times).
	g.pairs = g.pairs[:0]
	for i := range g.pairBuf {
		g.pairs = append(g.pairs, &g.pairBuf[i])
	}
	slices.SortStableFunc(g.pairs, func(a, b *gavelPair) int {
		if !samePrio(a.prio, b.prio) {
			return -cmp.Compare(a.prio, b.prio)
		}
		if a.x != b.x {
			return -cmp.Compare(a.x, b.x)
		}
		if a.ord != b.ord {
			return cmp.Compare(a.ord, b.ord)
		}
		return cmp.Compare(a.typ, b.typ)
	})
	if g.full {
		capLeft := typeCapacity(snap)
		g.granted = reset(g.granted)
		for _, p := range g.pairs {
			gpus := jobs[p.ord].GPUs // ord is the job's index in jobs
			if _, done := g.granted[p.key]; done || capLeft[p.typ] < gpus {
				continue
			}
			g.granted[p.key] = p.typ
			capLeft[p.typ] -= gpus
		}
	}
	// The waiting jobs in the order of their best pair; those without one last.
	g.place = reset(g.place)
	place := g.place
	for i, p := range g.pairs {
		if _, ok := place[p.key]; !ok {
			place[p.key] = i
		}
	}
	out := make([]sched.Ranked, len(snap.Pending))
	for i := range snap.Pending {
		j := &snap.Pending[i]
		pos, ok := place[j.Key()]
		if !ok {
			pos = len(g.pairs)
		}
		out[i] = sched.Ranked{Job: j, Score: -float64(pos)}
	}
	slices.SortStableFunc(out, func(a, b sched.Ranked) int { return -cmp.Compare(a.Score, b.Score) })
	return out, nil
}

// account adds the time each running job ran on its type since the last round.
func (g *Gavel) account(snap *cluster.Snapshot) {
	g.runningOn = reset(g.runningOn)
	g.started = reset(g.started)
	started := g.started
	for i := range snap.Running {
		a := &snap.Running[i]
		k := a.Key()
		g.runningOn[k] = a.GPUType
		if t, ok := started[k]; !ok || a.StartTime.Before(t) {
			started[k] = a.StartTime
		}
	}
	for k, typ := range g.runningOn {
		t, ok := g.lastSeen[k]
		if !ok {
			t = started[k] // started in a round after the last one Gavel saw it waiting
		}
		if d := snap.Now.Sub(t).Seconds(); d > 0 {
			if g.received[k] == nil {
				g.received[k] = map[string]float64{}
			}
			g.received[k][typ] += d
		}
		g.lastSeen[k] = snap.Now
	}
	for i := range snap.Pending {
		if k := snap.Pending[i].Key(); g.runningOn[k] == "" {
			delete(g.lastSeen, k)
		}
	}
}

// Plan implements sched.Preemptor: at a round boundary, the running jobs not granted the GPU
// type they run on stop.
func (g *Gavel) Plan(_ context.Context, _ *sched.RoundState, snap *cluster.Snapshot, ranked []sched.Ranked, _ sched.Predictor) (sched.Plan, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	plan := sched.Plan{Order: ranked}
	if !g.full || !snap.Now.Equal(g.roundAt) {
		return plan, nil
	}
	for i := range snap.Preemptible {
		j := &snap.Preemptible[i]
		k := j.Key()
		if typ, running := g.runningOn[k]; running && g.granted[k] != typ {
			plan.Preempt = append(plan.Preempt, cluster.Preemption{Namespace: j.Namespace, JobID: j.ID, Group: j.Group,
				Reason: fmt.Sprintf("gavel round: not granted %s this round", typ)})
			delete(g.lastSeen, k)
		}
	}
	slices.SortFunc(plan.Preempt, func(a, b cluster.Preemption) int { return cmp.Compare(a.JobKey(), b.JobKey()) })
	return plan, nil
}

// Place implements sched.Placer: at a round boundary the granted jobs start on their granted
// type; then every waiting job takes free GPUs of its pairs' types, in pair priority order.
func (g *Gavel) Place(_ context.Context, st *sched.RoundState, snap *cluster.Snapshot, ranked []sched.Ranked, pred sched.Predictor) ([]cluster.Decision, sched.PlaceStats, error) {
	t0 := time.Now()
	g.mu.Lock()
	defer g.mu.Unlock()
	g.waiting = reset(g.waiting)
	waiting := g.waiting
	for _, r := range ranked {
		waiting[r.Job.Key()] = r.Job
	}
	pk := place.NewPacker(snap).In(st)
	var out []cluster.Decision
	fit := func(p *gavelPair) {
		j := waiting[p.key]
		if j == nil || pk.FreeOf(p.typ) < j.GPUs {
			return
		}
		d, ok, err := pk.Fit(j, func(t string) bool { return t == p.typ })
		if err != nil || !ok {
			return
		}
		out = append(out, d)
		delete(waiting, p.key)
	}
	if g.full && snap.Now.Equal(g.roundAt) {
		for _, p := range g.pairs {
			if g.granted[p.key] == p.typ {
				fit(p)
			}
		}
	}
	for _, p := range g.pairs {
		fit(p)
	}
	return out, sched.PlaceStats{Candidates: len(ranked), Solver: "gavel-greedy", SolveTime: time.Since(t0)}, nil
}

// NextRound implements sched.Waker: the next round boundary while any job is active.
func (g *Gavel) NextRound(snap *cluster.Snapshot) time.Time {
	if len(snap.Pending) == 0 && len(snap.Preemptible) == 0 {
		return time.Time{}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.next
}

// typeCapacity counts the healthy GPUs of ready nodes per GPU type.
func typeCapacity(snap *cluster.Snapshot) map[string]int {
	out := map[string]int{}
	for i := range snap.Nodes {
		n := &snap.Nodes[i]
		if !n.Ready() {
			continue
		}
		for _, d := range n.Devices {
			for _, in := range d.Instances {
				if in.Healthy {
					out[d.GPUType]++
				}
			}
		}
	}
	return out
}

// samePrio tells priorities apart only beyond rounding: identical jobs that ran the same time
// tie exactly in theory, but a share computed from different time stamps can differ in its last
// bit, and a tie must fall to the allocation and then to submission order, not to that bit.
func samePrio(a, b float64) bool {
	if a == b {
		return true
	}
	if math.IsInf(a, 0) || math.IsInf(b, 0) {
		return false
	}
	return math.Abs(a-b) <= 1e-9*math.Max(math.Abs(a), math.Abs(b))
}

// reset returns m emptied, keeping its room (a new map when nil).
func reset[K comparable, V any](m map[K]V) map[K]V {
	if m == nil {
		return map[K]V{}
	}
	clear(m)
	return m
}

// sameJobs reports whether jobs (each key once) are the keys of set.
func sameJobs(jobs []activeJob, set map[string]bool) bool {
	if len(jobs) != len(set) {
		return false
	}
	for _, j := range jobs {
		if !set[j.key] {
			return false
		}
	}
	return true
}
