package rank

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
func (l *LAS) Plan(_ context.Context, snap *cluster.Snapshot, ranked []sched.Ranked, _ sched.Predictor) (sched.Plan, error) {
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

// gpuCapacity is the GPUs the jobs (by key) may share among themselves: every healthy GPU of a
// ready node, less those running allocations of other jobs hold.
func gpuCapacity(snap *cluster.Snapshot, keys iter.Seq[string]) int {
	var mine map[string]bool
	if len(snap.Running) > 0 {
		mine = map[string]bool{}
		for k := range keys {
			mine[k] = true
		}
	}
	total := 0
	for i := range snap.Nodes {
		n := &snap.Nodes[i]
		if !n.Ready() {
			continue
		}
		for _, g := range n.Devices {
			for _, in := range g.Instances {
				if in.Healthy {
					total++
				}
			}
		}
	}
	for i := range snap.Running {
		if a := &snap.Running[i]; !mine[a.Key()] {
			total -= len(a.DeviceIDs)
		}
	}
	return total
}
