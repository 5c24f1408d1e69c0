// The backend's mirror of the cluster: the nodes, jobs and allocations the watch keeps
// (events and resyncs, watch.go), and the questions every stage asks of them.

package nomad

import (
	"context"
	"sort"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/hetgpu/hetgpu/internal/parallel"
	"github.com/hetgpu/hetgpu/model/annot"
	"github.com/hetgpu/hetgpu/model/cluster"
)

type nodeRec struct {
	api  *api.Node
	node cluster.Node
}

type jobRec struct {
	job *api.Job
	// firstSubmit is the earliest submit time seen: re-registers (pins, re-holds) must not
	// reset a job's waiting time.
	firstSubmit time.Time
	// linkExp is when the job's signed explain link expires (zero: it has none), read once
	// per job version so that maintenance does not parse every live job's link each round.
	linkExp time.Time
	// parent is the periodic or parameterized job this one was launched from. Nomad drops
	// ParentID from any re-registration (its HTTP API ignores the field), so it is kept from
	// the first version seen: a child learns and is explained under its parent after a pin.
	parent string
	// heldNotes counts the ui writes that said why the job waits (ShowWaits), for the cap.
	heldNotes int
}

func newJobRec(job *api.Job, firstSubmit time.Time) *jobRec {
	jr := &jobRec{job: job, firstSubmit: firstSubmit, parent: deref(job.ParentID, "")}
	if exp, ok := linkExpiry(explainLink(job)); ok {
		jr.linkExp = exp
	}
	return jr
}

type allocRec struct {
	ID, Namespace, JobID, Group, NodeID string
	JobVersion                          uint64
	ClientStatus, DesiredStatus         string
	// GPU devices the allocation holds.
	Devices    []*api.AllocatedDeviceResource
	Start, End time.Time
	// Failed is set when a task of the allocation failed.
	Failed                   bool
	CreateIndex, ModifyIndex uint64
}

// energyAcc is what sampleEnergy measured of a running allocation's GPUs: the integral of
// their sampled power, its peak, and the first and last readings of their energy counters.
type energyAcc struct {
	joules, peak, lastW float64
	last                time.Time
	samples             int
	// firstJ and lastJ are the summed counters at firstJT and lastJT (the stats'
	// timestamps); counters counts the readings, counterBad is set when they cannot be
	// used (a GPU without a counter, a counter that went back).
	firstJ, lastJ   float64
	firstJT, lastJT time.Time
	counters        int
	counterBad      bool
}

func jobKey(ns, id string) string { return cluster.JobKey(ns, id) }

func groupKey(ns, id, group string) string { return cluster.GroupKey(ns, id, group) }

// holdsDevices reports whether an allocation still has its devices: until its client reports
// it ended, a stopping allocation (desired stop, e.g. a preempted one) still runs its task.
func holdsDevices(a *allocRec) bool {
	switch a.ClientStatus {
	case api.AllocClientStatusComplete, api.AllocClientStatusFailed, api.AllocClientStatusLost:
		return false
	}
	return true
}

// finishedOK reports an allocation that ran to its end: complete on the client, never told
// to stop (a re-hold, a preemption, a drain or a job stop also end as "complete"), no task
// failed. Only such allocations make a finished run.
func finishedOK(a *allocRec) bool {
	return a.ClientStatus == api.AllocClientStatusComplete && a.DesiredStatus == api.AllocDesiredStatusRun && !a.Failed
}

func terminal(a *allocRec) bool {
	switch a.DesiredStatus {
	case api.AllocDesiredStatusStop, api.AllocDesiredStatusEvict:
		return true
	}
	switch a.ClientStatus {
	case api.AllocClientStatusComplete, api.AllocClientStatusFailed, api.AllocClientStatusLost:
		return true
	}
	return false
}

func (a *allocRec) deviceIDs() []string {
	var ids []string
	for _, d := range a.Devices {
		ids = append(ids, d.DeviceIDs...)
	}
	return ids
}

// managed reports whether hetgpu looks after a job: it carries the hold somewhere, a pin, or
// hetgpu annotations.
func managed(job *api.Job) bool {
	if hasHold(job.Constraints) || annot.Has(job.Meta, nil) {
		return true
	}
	for _, tg := range job.TaskGroups {
		if hasHold(tg.Constraints) || annot.Has(nil, tg.Meta) {
			return true
		}
		for _, t := range tg.Tasks {
			if t != nil && hasHold(t.Constraints) {
				return true
			}
		}
	}
	return false
}

// eachGroup calls f for every named task group of every job that is not stopped, jobs in
// the order of jobKeys. Callers hold b.mu.
func (b *Backend) eachGroup(jobKeys []string, f func(*jobRec, *api.TaskGroup)) {
	for _, k := range jobKeys {
		jr := b.jobs[k]
		if jobStopped(jr.job) {
			continue
		}
		for _, tg := range jr.job.TaskGroups {
			if tg.Name != nil {
				f(jr, tg)
			}
		}
	}
}

// deviceHolders maps every GPU instance to the allocations that still hold it, once per Pin
// call (each pin checks its GPUs against it instead of walking every allocation). Callers
// hold b.mu.
func (b *Backend) deviceHolders() map[string][]*allocRec {
	out := map[string][]*allocRec{}
	for _, a := range b.allocs {
		if !holdsDevices(a) {
			continue
		}
		for _, d := range a.Devices {
			for _, g := range d.DeviceIDs {
				out[g] = append(out[g], a)
			}
		}
	}
	return out
}

// jobStopped reports jobs that place nothing: stopped, finished, or templates (periodic and
// parameterized parents; their children are jobs of their own). A dispatched child keeps
// its parent's parameterized block (with Dispatched set): it is a job, not a template.
func jobStopped(job *api.Job) bool {
	return (job.Stop != nil && *job.Stop) || deref(job.Status, "") == "dead" || isTemplate(job)
}

// isTemplate reports a periodic or parameterized parent: Nomad launches its children (jobs
// of their own) and never places the template itself.
func isTemplate(job *api.Job) bool {
	return (job.ParameterizedJob != nil && !job.Dispatched) || (job.Periodic != nil && deref(job.Periodic.Enabled, true))
}

// linkedChild reports a job whose version still carries Nomad's link to its parent
// (ParentID): a re-registration through the HTTP API would cut it (a dispatched child's is
// refused outright), so such writes go through the servers' RPC (rpc.go).
func linkedChild(job *api.Job) bool { return deref(job.ParentID, "") != "" }

// cutsLink reports a write to job that would cut its link to its parent: a linked child and
// no RPC to write it through (rpc.go). Writes only a pin needs go ahead anyway (a periodic
// child runs, unlinked; a dispatched child is undecidable, errDispatched).
func (b *Backend) cutsLink(job *api.Job) bool { return linkedChild(job) && b.rpc == nil }

// copyJob deep-copies a job so rewrites never touch the tracked state (deepCopy: what a JSON
// round trip gave, without encoding and decoding every pin's job). The error is kept for
// callers written for the round trip; it is always nil.
func copyJob(job *api.Job) (*api.Job, error) {
	return deepCopy(job), nil
}

// groupCount is a group's live allocations and those that finished their work.
type groupCount struct{ live, done int }

// groupCounts counts every group's allocations in one pass, so a snapshot or scan over
// thousands of groups does not walk every allocation once per group. Callers hold b.mu.
func (b *Backend) groupCounts() map[string]groupCount {
	out := make(map[string]groupCount, len(b.allocs))
	for _, a := range b.allocs {
		gk := groupKey(a.Namespace, a.JobID, a.Group)
		c := out[gk]
		switch {
		case !terminal(a):
			c.live++
		case finishedOK(a):
			c.done++
		}
		out[gk] = c
	}
	return out
}

// groupActive reports whether a pinned group still has work to place or run: live
// allocations, or fewer allocations that finished their work than its count. Allocations a
// re-hold, preemption or drain stopped end "complete" too; they do not count as done, so a
// group can be moved any number of times. counts is groupCounts' answer.
func groupActive(job *api.Job, tg *api.TaskGroup, counts map[string]groupCount) bool {
	c := counts[groupKey(deref(job.Namespace, "default"), deref(job.ID, ""), *tg.Name)]
	return c.live > 0 || c.done < deref(tg.Count, 1)
}

func (b *Backend) storeJob(job *api.Job) {
	if job == nil || job.ID == nil {
		return
	}
	ns := deref(job.Namespace, "default")
	k := jobKey(ns, *job.ID)
	submit := time.Unix(0, deref(job.SubmitTime, 0))
	b.mu.Lock()
	defer b.mu.Unlock()
	if !managed(job) {
		// A job can lose its annotations (re-run without them): forget it, and remember its
		// version so its allocations do not make us read it again.
		delete(b.jobs, k)
		b.unmanaged[k] = deref(job.Version, 0)
		return
	}
	delete(b.unmanaged, k)
	if old, ok := b.jobs[k]; ok {
		if deref(old.job.ModifyIndex, 0) > deref(job.ModifyIndex, 0) && deref(job.ModifyIndex, 0) != 0 {
			return // stale
		}
		if !old.firstSubmit.IsZero() && old.firstSubmit.Before(submit) {
			submit = old.firstSubmit
		}
		jr := newJobRec(job, submit)
		if jr.parent == "" {
			jr.parent = old.parent
		}
		jr.heldNotes = old.heldNotes
		b.jobs[k] = jr
		return
	}
	b.jobs[k] = newJobRec(job, submit)
}

func (b *Backend) dropJob(ns, id string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	k := jobKey(ns, id)
	jr, ok := b.jobs[k]
	if !ok {
		return
	}
	for _, tg := range jr.job.TaskGroups {
		if tg.Name != nil {
			b.gone = append(b.gone, groupKey(ns, id, *tg.Name))
		}
	}
	delete(b.jobs, k)
	delete(b.blocked, k)
	for aid, a := range b.allocs {
		if a.Namespace != ns || a.JobID != id {
			continue
		}
		if terminal(a) {
			delete(b.allocs, aid)
			delete(b.energy, aid)
		} else {
			// A purged job's allocations may vanish without an event (a real agent deletes
			// them with the job): Maintain asks after them.
			b.orphans[aid] = true
		}
	}
}

// checkOrphans reads the live allocations of jobs that are gone (dropJob) and forgets those
// Nomad no longer has or that ended, so their GPUs do not look busy until the next full
// resync. One read per such allocation, once it is known, StatsParallel at a time.
func (b *Backend) checkOrphans(ctx context.Context) {
	b.mu.Lock()
	// Also any live GPU allocation whose job is stopped, or neither tracked nor known to be a
	// plain Nomad job: whatever the order its events came in (a purge read just before the
	// job was deleted leaves it tracked as stopped), its job is gone or going.
	for id, a := range b.allocs {
		// A stopping allocation (desired stop, client still running) holds its GPUs too, and
		// a purge deletes it before its client reports the end.
		if len(a.Devices) == 0 || !holdsDevices(a) {
			continue
		}
		k := jobKey(a.Namespace, a.JobID)
		if jr, ok := b.jobs[k]; ok {
			if jobStopped(jr.job) {
				b.orphans[id] = true
			}
			continue
		}
		if _, ok := b.unmanaged[k]; !ok {
			b.orphans[id] = true
		}
	}
	ids := make([]string, 0, len(b.orphans))
	for id := range b.orphans {
		if a, ok := b.allocs[id]; !ok || !holdsDevices(a) {
			delete(b.orphans, id)
			continue
		}
		ids = append(ids, id)
	}
	b.mu.Unlock()
	sort.Strings(ids)
	parallel.For(len(ids), b.cfg.StatsParallel, func(i int) {
		b.mu.Lock()
		a, ok := b.allocs[ids[i]]
		b.mu.Unlock()
		if !ok {
			return
		}
		full, _, err := b.c.Allocations().Info(ids[i], (&api.QueryOptions{Namespace: a.Namespace}).WithContext(ctx))
		switch {
		case err != nil && statusCode(err) == 404:
			b.mu.Lock()
			if cur, ok := b.allocs[ids[i]]; ok && cur == a {
				delete(b.allocs, ids[i])
				delete(b.energy, ids[i])
			}
			delete(b.orphans, ids[i])
			b.mu.Unlock()
		case err == nil:
			b.putAlloc(allocFromFull(full)) // forgotten once terminal (its job is gone)
		}
	})
}
