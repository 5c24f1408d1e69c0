package baselines

import (
	"cmp"
	"context"
	"iter"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/hetgpu/hetgpu/model/cluster"
	"github.com/hetgpu/hetgpu/sidecar/sched"
)

// F1 is the learned priority function F1 of Carastan-Santos and de Camargo ("Obtaining Dynamic
// Scheduling Policies with Simulation and Machine Learning", SC 2017), obtained by non-linear
// regression over simulated scheduling permutations:
//
//	score(j) = log10(r_j) x n_j + 870 x log10(s_j)      (smaller first)
//
// r_j is the job's requested (estimated) runtime in seconds, n_j its number of processors (here
// GPUs) and s_j its submit time in seconds since the start of the workload. Here s_j is
// measured from the earliest submission the ranker has seen (the trace start in the simulator),
// floored at 1 s so log10 is defined, and r_j is the job's runtime estimate
// (Annotations.EstRuntime; DefaultRuntimeS when absent), floored at 1 s. Ranked.Score is the
// negated F1 value so that higher scores go first, as sched.Ranked requires.
type F1 struct {
	DefaultRuntimeS float64

	mu     sync.Mutex
	origin time.Time
}

// Rank implements sched.Ranker.
func (f *F1) Rank(ctx context.Context, snap *cluster.Snapshot, _ sched.Predictor) ([]sched.Ranked, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	f.mu.Lock()
	for i := range snap.Pending {
		if st := snap.Pending[i].SubmitTime; f.origin.IsZero() || st.Before(f.origin) {
			f.origin = st
		}
	}
	origin := f.origin
	f.mu.Unlock()
	def := f.DefaultRuntimeS
	if def <= 0 {
		def = 3600
	}
	out := make([]sched.Ranked, len(snap.Pending))
	for i := range snap.Pending {
		j := &snap.Pending[i]
		r := def
		if j.Hetgpu.EstRuntime > 0 {
			r = j.Hetgpu.EstRuntime.Seconds()
		}
		s := math.Max(1, j.SubmitTime.Sub(origin).Seconds())
		n := float64(max(1, j.GPUs))
		v := math.Log10(math.Max(1, r))*n + 870*math.Log10(s)
		out[i] = sched.Ranked{Job: j, Score: -v, Features: map[string]float64{"f1": v, "runtime_s": r, "gpus": n, "submit_s": s}}
	}
	sortRanked(out)
	return out, nil
}

// Slurm is Slurm's multifactor priority plugin (priority/multifactor) restricted to the factors
// a GPU queue has:
//
//	priority = WeightAge x age + WeightFairshare x fairshare + WeightJobSize x size
//
// with each factor in [0, 1] as Slurm defines it:
//   - age = min(wait / MaxAge, 1) (PriorityMaxAge, Slurm's default 7 days);
//   - fairshare = 2^(-U/S), Slurm's classic fair-share formula: U is the namespace's share of
//     the cluster's recent usage (GPU-seconds, decayed with PriorityDecayHalfLife, Slurm's default
//     7 days), S its share of the shares (equal shares among the namespaces seen);
//   - size = 1 - GPUs / cluster GPUs (PriorityFavorSmall=YES: smaller jobs rank higher).
//
// Defaults are the weights commonly published in site configurations: PriorityWeightAge=1000,
// PriorityWeightFairshare=10000, PriorityWeightJobSize=1000 (partition and QOS weights are 0:
// there is one partition and no QOS here). See Slurm's priority_multifactor documentation.
type Slurm struct {
	WeightAge, WeightFairshare, WeightJobSize float64
	MaxAge, HalfLife                          time.Duration

	mu    sync.Mutex
	usage map[string]float64
	last  time.Time
}

func (s *Slurm) defaults() (wa, wf, ws float64, maxAge, half time.Duration) {
	wa, wf, ws = s.WeightAge, s.WeightFairshare, s.WeightJobSize
	if wa == 0 && wf == 0 && ws == 0 {
		wa, wf, ws = 1000, 10000, 1000
	}
	maxAge, half = s.MaxAge, s.HalfLife
	if maxAge <= 0 {
		maxAge = 7 * 24 * time.Hour
	}
	if half <= 0 {
		half = 7 * 24 * time.Hour
	}
	return
}

// Rank implements sched.Ranker.
func (s *Slurm) Rank(ctx context.Context, snap *cluster.Snapshot, _ sched.Predictor) ([]sched.Ranked, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	wa, wf, ws, maxAge, half := s.defaults()
	total := snap.Free().Healthy()
	s.mu.Lock()
	if s.usage == nil {
		s.usage = map[string]float64{}
	}
	// Decay past usage, then charge the running allocations for the time since the last round.
	if !s.last.IsZero() && snap.Now.After(s.last) {
		dt := snap.Now.Sub(s.last).Seconds()
		decay := math.Exp2(-dt / half.Seconds())
		for k := range s.usage {
			s.usage[k] *= decay
		}
		for i := range snap.Running {
			a := &snap.Running[i]
			s.usage[a.Namespace] += float64(len(a.DeviceIDs)) * dt
		}
	}
	s.last = snap.Now
	names := map[string]bool{}
	for k := range s.usage {
		names[k] = true
	}
	for i := range snap.Pending {
		names[snap.Pending[i].Namespace] = true
	}
	sum := 0.0
	for _, v := range s.usage {
		sum += v
	}
	fs := map[string]float64{}
	share := 1 / float64(max(1, len(names)))
	for k := range names {
		u := 0.0
		if sum > 0 {
			u = s.usage[k] / sum
		}
		fs[k] = math.Exp2(-u / share)
	}
	s.mu.Unlock()
	out := make([]sched.Ranked, len(snap.Pending))
	for i := range snap.Pending {
		j := &snap.Pending[i]
		age := math.Min(1, math.Max(0, snap.Now.Sub(j.SubmitTime).Seconds())/maxAge.Seconds())
		size := 0.0
		if total > 0 {
			size = math.Max(0, 1-float64(j.GPUs)/float64(total))
		}
		p := wa*age + wf*fs[j.Namespace] + ws*size
		out[i] = sched.Ranked{Job: j, Score: p, Features: map[string]float64{"age": age, "fairshare": fs[j.Namespace], "size": size}}
	}
	sortRanked(out)
	return out, nil
}

// sortRanked orders by descending score, keeping submission order among ties, and makes scores
// strictly decreasing.
func sortRanked(r []sched.Ranked) {
	slices.SortStableFunc(r, func(a, b sched.Ranked) int { return cmp.Compare(b.Score, a.Score) })
	for i := 1; i < len(r); i++ {
		if r[i].Score >= r[i-1].Score {
			r[i].Score = r[i-1].Score - 1e-9*math.Max(1, math.Abs(r[i-1].Score))
		}
	}
}

// SJF is shortest job first: the pending jobs by remaining runtime estimate
// (Annotations.EstRuntime), shortest first, in snapshot order among equals; jobs without an
// estimate go last. With exact estimates (the simulator's oracle) it is the classic SJF baseline
// (e.g. Tiresias, NSDI 2019).
type SJF struct{}

// Rank implements sched.Ranker.
func (SJF) Rank(ctx context.Context, snap *cluster.Snapshot, _ sched.Predictor) ([]sched.Ranked, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	left := func(j *cluster.Job) time.Duration {
		if j.Hetgpu.EstRuntime <= 0 {
			return math.MaxInt64
		}
		return j.Hetgpu.EstRuntime
	}
	out := make([]sched.Ranked, len(snap.Pending))
	for i := range snap.Pending {
		j := &snap.Pending[i]
		out[i] = sched.Ranked{Job: j, Score: -left(j).Seconds()}
	}
	slices.SortStableFunc(out, func(a, b sched.Ranked) int { return cmp.Compare(left(a.Job), left(b.Job)) })
	return out, nil
}

// LAS is Tiresias' discretised two-dimensional least-attained-service scheduling (Gu et al.,
// "Tiresias: A GPU Cluster Manager for Distributed Deep Learning", NSDI 2019) as pipeline
// stages: it ranks (sched.Ranker), preempts (sched.Preemptor) and asks for the rounds its
// queue changes need (sched.Waker).
//
// A job's attained service is GPUs x time run (cluster.Job.AttainedGPUSeconds); jobs sit in
// priority queues by attained service (Thresholds), FIFO by submission (then job key)
// within a queue. A
// waiting job that has waited longer than StarveKnob x its run time so far is promoted to the
// top queue. The highest-priority jobs that fit in the cluster's GPUs run and the preemptible
// rest are stopped; the ranked order puts the jobs chosen to run first, then the others in
// priority order, so a first-fit placer backfills what fragmentation leaves. It is
// heterogeneity-unaware, as Tiresias is.
type LAS struct {
	// Thresholds are the queue limits in GPU-seconds, ascending (Tiresias: 1 and 10 GPU-hours).
	Thresholds []float64
	// StarveKnob promotes a job that waited this many times its run time (Tiresias: 8).
	StarveKnob float64

	mu sync.Mutex
	// stopped: when each job LAS preempted stopped (its wait since then counts for promotion).
	stopped map[string]time.Time
}

// NewLAS is LAS with Tiresias' parameters as the simulator's baseline uses them: queue
// thresholds of 1 and 10 GPU-hours and a starvation knob of 8.
func NewLAS() *LAS { return &LAS{Thresholds: []float64{3600, 36000}, StarveKnob: 8} }

// runSeconds is how long a job has run so far (its attained service over its GPUs).
func runSeconds(j *cluster.Job) float64 {
	if j.GPUs <= 0 {
		return 0
	}
	return j.AttainedGPUSeconds / float64(j.GPUs)
}

// waitingSince is when a waiting job (key) last stopped (preempted by LAS) or was submitted.
func (l *LAS) waitingSince(j *cluster.Job, key string) time.Time {
	if t, ok := l.stopped[key]; ok {
		return t
	}
	return j.SubmitTime
}

// queue is a job's priority queue (0 is the highest); key is the job's, pending tells a
// waiting job.
func (l *LAS) queue(j *cluster.Job, key string, pending bool, now time.Time) int {
	q := 0
	for _, th := range l.Thresholds {
		if j.AttainedGPUSeconds >= th {
			q++
		}
	}
	if pending {
		if run := runSeconds(j); run > 0 && now.Sub(l.waitingSince(j, key)).Seconds() > l.StarveKnob*run {
			q = 0
		}
	}
	return q
}

// Rank implements sched.Ranker. The jobs it ranks may include running ones (the pipeline ranks
// pending and preemptible jobs together before preempting); a job is waiting when no running
// allocation is its.
func (l *LAS) Rank(ctx context.Context, snap *cluster.Snapshot, _ sched.Predictor) ([]sched.Ranked, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	running := runningKeys(snap)
	l.mu.Lock()
	defer l.mu.Unlock()
	// A job LAS stopped that runs again, or is gone, waits no longer.
	if len(l.stopped) > 0 {
		waiting := make(map[string]bool, len(snap.Pending))
		for i := range snap.Pending {
			if k := snap.Pending[i].Key(); !running[k] {
				waiting[k] = true
			}
		}
		for k := range l.stopped {
			if !waiting[k] {
				delete(l.stopped, k)
			}
		}
	}
	type cand struct {
		r   sched.Ranked
		q   int
		key string
	}
	cs := make([]cand, len(snap.Pending))
	for i := range snap.Pending {
		j := &snap.Pending[i]
		k := j.Key()
		q := l.queue(j, k, !running[k], snap.Now)
		cs[i] = cand{r: sched.Ranked{Job: j, Score: -float64(q)}, q: q, key: k}
	}
	slices.SortStableFunc(cs, func(a, b cand) int {
		if a.q != b.q {
			return cmp.Compare(a.q, b.q)
		}
		if c := a.r.Job.SubmitTime.Compare(b.r.Job.SubmitTime); c != 0 {
			return c
		}
		return cmp.Compare(a.key, b.key)
	})
	// The jobs that fit in the cluster's GPUs, in priority order, go first.
	capacity := gpuCapacity(snap, func(yield func(string) bool) {
		for _, c := range cs {
			if !yield(c.key) {
				return
			}
		}
	})
	first := make([]sched.Ranked, 0, len(cs))
	var rest []sched.Ranked
	used := 0
	for _, c := range cs {
		if used+c.r.Job.GPUs <= capacity {
			used += c.r.Job.GPUs
			first = append(first, c.r)
		} else {
			rest = append(rest, c.r)
		}
	}
	return append(first, rest...), nil
}

// Plan implements sched.Preemptor: the running jobs outside the prefix of ranked that fits in
// the cluster's GPUs are stopped; the waiting jobs keep ranked's order.
func (l *LAS) Plan(_ context.Context, _ *sched.RoundState, snap *cluster.Snapshot, ranked []sched.Ranked, _ sched.Predictor) (sched.Plan, error) {
	running := runningKeys(snap)
	capacity := gpuCapacity(snap, func(yield func(string) bool) {
		for _, r := range ranked {
			if !yield(r.Job.Key()) {
				return
			}
		}
	})
	var plan sched.Plan
	used := 0
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopped == nil {
		l.stopped = map[string]time.Time{}
	}
	for _, r := range ranked {
		j := r.Job
		if used+j.GPUs <= capacity {
			used += j.GPUs
		} else if running[j.Key()] {
			plan.Preempt = append(plan.Preempt, cluster.Preemption{Namespace: j.Namespace, JobID: j.ID, Group: j.Group,
				Reason: "least attained service: higher-priority jobs take its GPUs"})
			l.stopped[j.Key()] = snap.Now
		}
		plan.Order = append(plan.Order, r)
	}
	return plan, nil
}

// NextRound implements sched.Waker: when a running job crosses its next queue threshold (it
// may be demoted) or a waiting job would be promoted; nothing while nobody waits.
func (l *LAS) NextRound(snap *cluster.Snapshot) time.Time {
	if len(snap.Pending) == 0 {
		return time.Time{}
	}
	next := math.Inf(1)
	for i := range snap.Preemptible {
		j := &snap.Preemptible[i]
		for _, th := range l.Thresholds {
			if a := j.AttainedGPUSeconds; a < th && j.GPUs > 0 {
				next = math.Min(next, (th-a)/float64(j.GPUs))
				break
			}
		}
	}
	l.mu.Lock()
	for i := range snap.Pending {
		j := &snap.Pending[i]
		if run := runSeconds(j); run > 0 {
			if d := l.waitingSince(j, j.Key()).Add(seconds(l.StarveKnob * run)).Sub(snap.Now).Seconds(); d > 0 {
				next = math.Min(next, d)
			}
		}
	}
	l.mu.Unlock()
	if math.IsInf(next, 1) {
		return time.Time{}
	}
	// One nanosecond late rather than early: at the round the crossing has happened.
	return snap.Now.Add(seconds(next) + time.Nanosecond)
}

// seconds converts float seconds to a Duration, rounding up.
func seconds(s float64) time.Duration { return time.Duration(math.Ceil(s * float64(time.Second))) }

// runningKeys are the jobs with a running allocation.
func runningKeys(snap *cluster.Snapshot) map[string]bool {
	out := make(map[string]bool, len(snap.Running))
	for i := range snap.Running {
		out[snap.Running[i].Key()] = true
	}
	return out
}

// gpuCapacity is the GPUs the jobs (by key) may share among themselves: the free healthy GPUs
// of ready nodes and those the jobs' own running allocations hold.
func gpuCapacity(snap *cluster.Snapshot, keys iter.Seq[string]) int {
	total := snap.Free().GPUs()
	if len(snap.Running) == 0 {
		return total
	}
	mine := map[string]bool{}
	for k := range keys {
		mine[k] = true
	}
	for i := range snap.Running {
		if a := &snap.Running[i]; mine[a.Key()] {
			total += len(a.DeviceIDs)
		}
	}
	return total
}
