package service

import (
	"context"
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/hetgpu/hetgpu/model/cluster"
	"github.com/hetgpu/hetgpu/model/gpuspec"
	"github.com/hetgpu/hetgpu/sidecar/sched"
	"github.com/hetgpu/hetgpu/sidecar/stages/feasible"
)

var waitKinds = []string{cluster.WaitInfeasible, cluster.WaitCapacity, cluster.WaitBehind, cluster.WaitInvalid, cluster.WaitQueue}

// minThroughputPlacer is a placer that says whether it drops placements below a job's T_min
// (*place.Placer does, by preset). Placers that do not say are taken to honour it.
type minThroughputPlacer interface{ HonorsMinThroughput() bool }

func feasibilityOptions(p sched.Placer) feasible.Options {
	o := feasible.Options{MinThroughput: true}
	if m, ok := p.(minThroughputPlacer); ok {
		o.MinThroughput = m.HonorsMinThroughput()
	}
	return o
}

// roundTriage is what a round set aside before ranking: the groups that can never run on the
// cluster and those whose request cannot be evaluated. Neither is ranked or placed, so they
// hold no rank, window slot or GPUs that a group behind them could use.
type roundTriage struct {
	held []heldGroup
}

type heldGroup struct {
	job     cluster.Job
	verdict feasible.Verdict
}

// triage checks every pending group against the cluster and returns the snapshot without the
// groups that can never run on it or cannot be evaluated, which it notes in tri (the
// pipeline's triage step).
func (s *Service) triage(st *sched.RoundState, snap *cluster.Snapshot, tri *roundTriage) *cluster.Snapshot {
	tri.held = nil
	if len(snap.Pending) == 0 {
		return snap
	}
	vs := gangVerdicts(snap.Pending, s.feas.Triage(st, snap, st.Predictor()))
	out := *snap
	out.Pending = make([]cluster.Job, 0, len(snap.Pending))
	for i, v := range vs {
		if v.Kind() != "" {
			tri.held = append(tri.held, heldGroup{job: snap.Pending[i], verdict: v})
			continue
		}
		out.Pending = append(out.Pending, snap.Pending[i])
	}
	if len(tri.held) == 0 {
		return snap
	}
	sort.Slice(tri.held, func(a, b int) bool { return tri.held[a].job.Key() < tri.held[b].job.Key() })
	return &out
}

// gangVerdicts sets a gang aside whole: a gang is placed all or nothing, so a member that can
// never run (or cannot be evaluated) keeps its mates waiting too, with its reason.
func gangVerdicts(jobs []cluster.Job, vs []feasible.Verdict) []feasible.Verdict {
	gangs := sched.GangsOf(jobs)
	if len(gangs) == 0 {
		return vs
	}
	blocker := map[string]int{}
	for i := range jobs {
		g := sched.GangKey(&jobs[i])
		if _, done := blocker[g]; gangs[g] != nil && !done && vs[i].Kind() != "" {
			blocker[g] = i
		}
	}
	if len(blocker) == 0 {
		return vs
	}
	out := append([]feasible.Verdict(nil), vs...)
	for i := range jobs {
		g := sched.GangKey(&jobs[i])
		b, ok := blocker[g]
		if !ok || out[i].Kind() != "" || !gangs[g][jobs[i].Key()] {
			continue
		}
		why := fmt.Sprintf("its gang's group %q cannot run on this cluster: %s", jobs[b].Group, vs[b].Reason)
		if vs[b].Invalid {
			why = fmt.Sprintf("its gang's group %q cannot be evaluated: %s", jobs[b].Group, vs[b].Reason)
		}
		out[i] = feasible.Verdict{Invalid: vs[b].Invalid, Reason: why}
	}
	return out
}

// setGangs names the gang of every queue entry that belongs to one (over the ranked groups and
// those set aside): the round's gangs, unless triage set groups aside.
func setGangs(queue []QueueEntry, r *sched.Round, tri *roundTriage) {
	gangs := r.State.Gangs()
	if len(tri.held) > 0 {
		snap := r.Snapshot
		jobs := append(make([]cluster.Job, 0, len(snap.Pending)+len(tri.held)), snap.Pending...)
		for _, h := range tri.held {
			jobs = append(jobs, h.job)
		}
		gangs = sched.GangsOf(jobs)
	}
	if len(gangs) == 0 {
		return
	}
	for i := range queue {
		queue[i].Gang = gangs.Of(queue[i].JobKey)
	}
}

// classify fills Wait and Reason of the queue's undecided entries: a group that fits the GPUs
// free at the start of the round waits behind the jobs ranked ahead, one that does not waits
// for capacity. The queue is in r.Ranked's order.
func (s *Service) classify(queue []QueueEntry, r *sched.Round, decided map[string]bool, pred sched.Predictor) {
	st := r.State
	pos := make(map[string]int, len(queue))
	for i := range queue {
		pos[queue[i].JobKey] = i
	}
	var jobs []*cluster.Job
	for _, rk := range r.Ranked {
		if rk.Job != nil && !decided[rk.Job.Key()] {
			jobs = append(jobs, rk.Job)
		}
	}
	if len(jobs) == 0 {
		return
	}
	vs := s.feas.Now(st, r.Snapshot, jobs, pred)
	deferred := map[string]bool{}
	for _, g := range r.DeferredGangs {
		deferred[g] = true
	}
	gangs := st.Gangs()
	held := map[string]bool{}
	if r.Reservation != nil {
		for _, k := range r.Reservation.Held {
			held[k] = true
		}
	}
	placedAhead, next := 0, 0
	// The groups that wait for GPUs get a free estimate, from the GPU types they can use
	// (asked once, for them alone).
	var waiting []*QueueEntry
	var waitJobs []*cluster.Job
	for _, rk := range r.Ranked {
		if rk.Job == nil {
			continue
		}
		k := rk.Job.Key()
		if decided[k] {
			placedAhead++
			continue
		}
		v := vs[next]
		next++
		i, ok := pos[k]
		if !ok {
			continue
		}
		q := &queue[i]
		switch {
		case v.Invalid:
			q.Wait, q.Reason = cluster.WaitInvalid, v.Reason
		case r.Reservation != nil && sched.GangKey(rk.Job) == r.Reservation.Gang && gangs[r.Reservation.Gang][k]:
			q.Wait, q.Reason = cluster.WaitCapacity, v.Reason
			if v.Fits {
				q.Wait, q.Reason = cluster.WaitBehind, "it fits the GPUs free at the start of the round, but its gang could not be placed whole"
			}
			until := "when enough GPUs free up"
			if !r.Reservation.Until.IsZero() {
				until = "about " + r.Reservation.Until.UTC().Format(time.RFC3339)
			}
			q.Reason += fmt.Sprintf("; its gang holds a reservation for %d GPUs, expected free %s: jobs that would delay it wait",
				r.Reservation.GPUs, until)
		case held[k]:
			q.Wait, q.Reason = cluster.WaitBehind, r.Reservation.Reason()
		case cluster.CapWait(r.Snapshot, rk.Job, r.Decisions) != "":
			q.Wait, q.Reason = cluster.WaitQueue, cluster.CapWait(r.Snapshot, rk.Job, r.Decisions)
		case !v.Fits:
			q.Wait, q.Reason = cluster.WaitCapacity, v.Reason
		case deferred[sched.GangKey(rk.Job)] && gangs[sched.GangKey(rk.Job)][k]:
			n := len(gangs[sched.GangKey(rk.Job)])
			q.Wait = cluster.WaitBehind
			q.Reason = fmt.Sprintf("it fits the GPUs free at the start of the round, but its gang (the %d waiting groups of job %s) could not be placed whole; a gang is placed all or nothing",
				n, rk.Job.ID)
		case placedAhead > 0:
			q.Wait = cluster.WaitBehind
			q.Reason = fmt.Sprintf("it fits the GPUs free at the start of the round; the %d %s ranked ahead that were placed came first",
				placedAhead, plural(placedAhead, "job", "jobs"))
		default:
			q.Wait = cluster.WaitBehind
			q.Reason = "it fits the GPUs free at the start of the round, but the placement found no option it accepts or preferred the jobs ranked ahead"
		}
		if q.Wait == cluster.WaitCapacity || q.Wait == cluster.WaitBehind {
			waiting, waitJobs = append(waiting, q), append(waitJobs, rk.Job)
		}
	}
	if len(waiting) == 0 {
		return
	}
	types := s.feas.Types(st, r.Snapshot, waitJobs, pred)
	soon := cluster.NewFreeSoon(r.Snapshot, r.Decisions, speedup(pred))
	for i, q := range waiting {
		freeEstimate(q, r, waitJobs[i], types[i], gangs, soon, pred)
	}
}

// freeEstimate fills the entry's FreeInS and PreferredTypes from the types the group can use.
// A member of the gang the round reserves GPUs for is free when the reservation expects its
// whole gang's GPUs; a member of another gang gets no estimate (a gang starts whole, and the
// count is per group).
func freeEstimate(q *QueueEntry, r *sched.Round, job *cluster.Job, types []string, gangs sched.Gangs, soon *cluster.FreeSoon, pred sched.Predictor) {
	if len(types) > 1 && pred != nil {
		thr := make(map[string]float64, len(types))
		for _, t := range types {
			thr[t] = pred.Predict(job, t, max(1, job.GPUs)).Throughput
		}
		q.PreferredTypes = cluster.PreferredTypes(thr)
	}
	var in time.Duration
	g := sched.GangKey(job)
	switch {
	case r.Reservation != nil && g == r.Reservation.Gang && gangs[g][job.Key()]:
		if !r.Reservation.Until.IsZero() {
			in = r.Reservation.Until.Sub(r.Snapshot.Now)
		}
	case gangs[g][job.Key()]:
		// No estimate: the count is per group, and a gang starts whole.
	default:
		in = soon.NextFree(types, job.GPUs)
	}
	if in > 0 {
		q.FreeInS = math.Round(in.Seconds())
	}
}

// speedup is how many times faster than on the reference GPU type (what runtime estimates
// are on) pred says a running job is on a type; 0 unknown.
func speedup(pred sched.Predictor) func(j *cluster.Job, gpuType string) float64 {
	if pred == nil {
		return nil
	}
	return func(j *cluster.Job, gpuType string) float64 {
		ref := pred.Predict(j, gpuspec.ReferenceGPU, max(1, j.GPUs)).Throughput
		on := pred.Predict(j, gpuType, max(1, j.GPUs)).Throughput
		if !(ref > 0) || !(on > 0) {
			return 0
		}
		return on / ref
	}
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// heldEntries are the queue entries of the groups triage set aside (rank 0: not ranked).
func heldEntries(tri *roundTriage, snap *cluster.Snapshot) []QueueEntry {
	out := make([]QueueEntry, 0, len(tri.held))
	for i := range tri.held {
		h := &tri.held[i]
		e := queueEntry(0, sched.Ranked{Job: &h.job}, snap.Now)
		e.Wait, e.Reason = string(h.verdict.Kind()), h.verdict.Reason
		e.Status = e.Wait
		e.Infeasible = e.Wait == cluster.WaitInfeasible
		out = append(out, e)
	}
	return out
}

// noteWaits logs groups that became infeasible or fit again, sets the wait metrics, and hands
// the undecided groups to a backend that shows them in the job.
func (s *Service) noteWaits(ctx context.Context, queue []QueueEntry) {
	now := map[string]string{}
	counts := map[string]int{}
	var ws []cluster.Wait
	ranked := 0
	for _, q := range queue {
		if q.Rank > 0 {
			ranked++
		}
	}
	for _, q := range queue {
		if q.Status == "decided" {
			continue
		}
		counts[q.Wait]++
		ws = append(ws, cluster.Wait{Namespace: q.Namespace, JobID: q.JobID, Group: q.Group, Kind: q.Wait, Reason: q.Reason,
			Rank: q.Rank, Of: ranked, GPUs: q.GPUs, Device: q.Device, FreeIn: time.Duration(q.FreeInS * float64(time.Second)),
			Preferred: q.PreferredTypes})
		if q.Infeasible {
			now[q.JobKey] = q.Reason
		}
	}
	s.mu.Lock()
	before := s.infeasible
	s.infeasible = now
	// Held groups with malformed annotations never reach the queue (the backend reports them).
	counts[cluster.WaitInvalid] += len(s.invalid)
	s.mu.Unlock()
	for k, why := range now {
		if before[k] != why {
			s.log.Warn("task group cannot run on this cluster; it stays held and is checked again when nodes change", "job", k, "reason", why)
		}
	}
	for _, q := range queue {
		if _, was := before[q.JobKey]; was && !q.Infeasible {
			s.log.Info("task group fits the cluster again", "job", q.JobKey, "status", q.Status)
		}
	}
	s.metrics.InfeasibleGroups.Set(float64(len(now)))
	for _, k := range waitKinds {
		s.metrics.WaitingGroups.WithLabelValues(k).Set(float64(counts[k]))
	}
	if wr, ok := s.backend.(cluster.WaitReporter); ok && !s.cfg.Shadow {
		wr.ShowWaits(ctx, ws)
	}
}
