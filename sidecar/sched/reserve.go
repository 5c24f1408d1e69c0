package sched

import (
	"fmt"
	"sort"
	"time"

	"github.com/hetgpu/hetgpu/model/cluster"
	"github.com/hetgpu/hetgpu/model/gpuspec"
)

// Reservation for a big gang, so that a stream of small jobs cannot starve it (EASY
// backfilling, as in Slurm's backfill scheduler, applied to the gang at the head of the queue):
//
//  1. The best-ranked gang that has waited at least ReserveAfter goes to the head of the order.
//  2. If the round cannot place it whole, it holds a reservation: the time S at which enough
//     GPUs are expected free for it (the GPUs free now plus those of running allocations in the
//     order they are expected to end).
//  3. Other jobs start only when they are predicted to end by S, or when they fit in the GPUs
//     left over at S beyond what the gang needs; the others wait for the gang.
//
// Expected ends: a preemptible running job's remaining estimate, else (no estimate known to
// the snapshot) as long again as it has run, at least a minute (the Lindy rule the ranker's
// near-future availability uses too). Predicted runtimes of pending jobs: hetgpu.runtime
// scaled by the predicted throughput on the chosen GPU type against V100; a job without an
// estimate never counts as ending by S. GPUs are counted over all types, so S is a guess, not a
// promise; the reservation is made anew every round.

// Reservation is the gang a round holds GPUs for.
type Reservation struct {
	// Gang is "namespace/id"; GPUs is what its waiting members need together.
	Gang string
	GPUs int
	// Since is when its oldest member was submitted; Until is S, when enough GPUs are
	// expected free for it (zero when the cluster does not hold enough GPUs at all).
	Since, Until time.Time
	// Held are the job keys the reservation kept from starting this round.
	Held []string
}

// Reason is the wait reason of a job the reservation held back.
func (r *Reservation) Reason() string {
	until := "until enough GPUs free up"
	if !r.Until.IsZero() {
		until = "until about " + r.Until.UTC().Format(time.RFC3339)
	}
	return fmt.Sprintf("GPUs are reserved for gang %s (%d GPUs, waiting since %s) %s; this job is not predicted to end before then",
		r.Gang, r.GPUs, r.Since.UTC().Format(time.RFC3339), until)
}

// headGang returns the best-ranked gang that has waited at least after, or "".
func headGang(snap *cluster.Snapshot, ranked []Ranked, gs Gangs, after time.Duration) (string, time.Time) {
	for _, r := range ranked {
		g := gs.Of(r.Job.Key())
		if g == "" {
			continue
		}
		since := oldestSubmit(snap, gs, g)
		if snap.Now.Sub(since) >= after {
			return g, since
		}
	}
	return "", time.Time{}
}

func oldestSubmit(snap *cluster.Snapshot, gs Gangs, g string) time.Time {
	var t time.Time
	for i := range snap.Pending {
		if j := &snap.Pending[i]; gs[g][j.Key()] && (t.IsZero() || j.SubmitTime.Before(t)) {
			t = j.SubmitTime
		}
	}
	return t
}

// toFront moves gang g's members to the head of ranked, in their order.
func toFront(ranked []Ranked, gs Gangs, g string) []Ranked {
	out := make([]Ranked, 0, len(ranked))
	for _, r := range ranked {
		if gs.Of(r.Job.Key()) == g {
			out = append(out, r)
		}
	}
	for _, r := range ranked {
		if gs.Of(r.Job.Key()) != g {
			out = append(out, r)
		}
	}
	return out
}

// shadowTime is when need GPUs are expected free: the free healthy GPUs of ready nodes now,
// then running allocations' GPUs as they are expected to end. It also returns the GPUs
// expected free then beyond need. ok is false when the cluster never frees enough.
func shadowTime(snap *cluster.Snapshot, need int) (at time.Time, extra int, ok bool) {
	free := snap.Free().GPUs()
	if free >= need {
		return snap.Now, free - need, true
	}
	remaining := map[string]time.Duration{}
	for i := range snap.Preemptible {
		if j := &snap.Preemptible[i]; j.Hetgpu.EstRuntime > 0 {
			remaining[j.Key()] = j.Hetgpu.EstRuntime
		}
	}
	type end struct {
		at   time.Time
		gpus int
	}
	var ends []end
	for _, a := range snap.Running {
		left, ok := remaining[a.Key()]
		if !ok {
			left = cluster.Unestimated(snap.Now.Sub(a.StartTime))
		}
		ends = append(ends, end{snap.Now.Add(left), len(a.DeviceIDs)})
	}
	sort.SliceStable(ends, func(i, j int) bool { return ends[i].at.Before(ends[j].at) })
	for _, e := range ends {
		free += e.gpus
		if free >= need {
			return e.at, free - need, true
		}
	}
	return time.Time{}, 0, false
}

// predictedEnd is when a decided job is expected to end, or ok=false without an estimate.
func predictedEnd(now time.Time, job *cluster.Job, d *cluster.Decision, pred Predictor) (time.Time, bool) {
	rt := job.Hetgpu.EstRuntime
	if rt <= 0 {
		return time.Time{}, false
	}
	if pred != nil && d.PredThroughput > 0 {
		ref := pred.Predict(job, gpuspec.ReferenceGPU, d.GPUs()).Throughput
		rt = time.Duration(gpuspec.RuntimeOn(float64(rt), ref, d.PredThroughput))
	}
	return now.Add(rt), true
}

// backfill keeps the decisions that do not delay the reserved gang: jobs predicted to end by
// res.Until, and others while they fit in the extra GPUs. It returns the kept decisions and
// the job keys held back.
func backfill(snap *cluster.Snapshot, ds []cluster.Decision, jobs map[string]*cluster.Job, res *Reservation, extra int, pred Predictor) ([]cluster.Decision, []string) {
	var kept []cluster.Decision
	var held []string
	for i := range ds {
		d := &ds[i]
		job := jobs[d.JobKey()]
		if job == nil {
			kept = append(kept, *d)
			continue
		}
		if !res.Until.IsZero() {
			if end, ok := predictedEnd(snap.Now, job, d, pred); ok && !end.After(res.Until) {
				kept = append(kept, *d)
				continue
			}
		}
		if g := d.GPUs(); g <= extra {
			extra -= g
			kept = append(kept, *d)
			continue
		}
		held = append(held, d.JobKey())
	}
	return kept, held
}
