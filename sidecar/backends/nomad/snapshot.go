package nomad

import (
	"context"
	"maps"
	"slices"
	"sort"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/hetgpu/hetgpu/model/annot"
	"github.com/hetgpu/hetgpu/model/cluster"
	"github.com/hetgpu/hetgpu/model/gpuspec"
)

// roundView is what Pin needs of the snapshot a round decided on: the JobModifyIndex each
// pending group's job had in it, which the pin's register enforces (a job changed since is a
// conflict, decided again). Snapshot builds a new view per round and swaps it in whole; a
// view is never changed after, so Pin takes the latest once and reads it without b.mu. The
// service runs snapshot, decide and pin of one round in sequence, so the latest view is the
// one the decisions were made on; a group absent from it (or a nil view) is pinned against
// the job as Nomad has it now.
type roundView struct {
	// modifyIndex: group key ("ns/id/group") -> the job's JobModifyIndex in the snapshot.
	modifyIndex map[string]uint64
}

// jobModifyIndex is the JobModifyIndex group key had in the snapshot (0: not in it).
func (v *roundView) jobModifyIndex(key string) uint64 {
	if v == nil {
		return 0
	}
	return v.modifyIndex[key]
}

// lastRound is the view of the latest Snapshot (nil before the first).
func (b *Backend) lastRound() *roundView { return b.round.Load() }

// Snapshot builds the view every round works on, and records the round's view for Pin.
// Callers get nodes (by ID), pending groups (oldest submission first), running GPU
// allocations, preemptible groups and, as running, the GPUs of pins Nomad has not placed yet.
func (b *Backend) Snapshot(ctx context.Context) (*cluster.Snapshot, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	snap := &cluster.Snapshot{Now: b.now()}
	inst := b.snapshotNodes(snap)
	jobKeys := slices.Sorted(maps.Keys(b.jobs))
	shadowOnly := b.snapshotPending(snap, jobKeys)
	held := b.snapshotRunning(snap, shadowOnly)
	snap.Preemptible = b.preemptible(jobKeys, snap.Running, snap.Now)
	b.snapshotUnplacedPins(snap, jobKeys, inst, held)
	view := &roundView{modifyIndex: make(map[string]uint64, len(snap.Pending))}
	for _, pj := range snap.Pending {
		view.modifyIndex[pj.Key()] = pj.JobModifyIndex
	}
	b.round.Store(view)
	return snap, nil
}

// instanceIndex maps each GPU instance of the snapshot to its node and device name.
type instanceIndex struct {
	node, devName map[string]string
}

// snapshotNodes adds the ready nodes, by ID, and indexes their GPU instances. Callers hold b.mu.
func (b *Backend) snapshotNodes(snap *cluster.Snapshot) instanceIndex {
	nodeIDs := slices.Sorted(maps.Keys(b.nodes))
	idx := instanceIndex{node: map[string]string{}, devName: map[string]string{}}
	for _, id := range nodeIDs {
		n := b.nodes[id].node
		snap.Nodes = append(snap.Nodes, n)
		for _, g := range n.Devices {
			for _, in := range g.Instances {
				idx.node[in.ID] = n.ID
				idx.devName[in.ID] = g.Name
			}
		}
	}
	return idx
}

// snapshotPending adds the held groups (and in shadow mode the annotated un-held, unpinned
// ones), oldest submission first, and returns the keys of the shadow-only ones: their own
// allocations stay out of Running. Callers hold b.mu.
func (b *Backend) snapshotPending(snap *cluster.Snapshot, jobKeys []string) map[string]bool {
	shadowKeys := map[string]bool{}
	b.eachGroup(jobKeys, func(jr *jobRec, tg *api.TaskGroup) {
		job := jr.job
		shadowOnly := false
		if !groupHeld(job, tg) {
			if !b.cfg.Shadow {
				return
			}
			if _, _, pinned := PinOf(tg); pinned {
				return
			}
			if a, err := annot.Parse(job.Meta, tg.Meta, *tg.Name); err != nil || !a.Enabled {
				return
			}
			shadowOnly = true
		}
		pj, err := b.pendingJob(job, tg, jr.firstSubmit)
		if err != nil {
			return // reported by Maintain as invalid
		}
		pj.ParentID = jr.parent
		b.readRuntime(pj.Namespace, &pj.Hetgpu, 0)
		snap.Pending = append(snap.Pending, pj)
		if shadowOnly {
			shadowKeys[pj.Key()] = true
		}
	})
	sort.SliceStable(snap.Pending, func(i, j int) bool { return snap.Pending[i].SubmitTime.Before(snap.Pending[j].SubmitTime) })
	return shadowKeys
}

// snapshotRunning adds every live allocation holding GPUs, whoever owns it, and returns the
// GPU instances they hold. Callers hold b.mu.
func (b *Backend) snapshotRunning(snap *cluster.Snapshot, shadowOnly map[string]bool) map[string]bool {
	held := map[string]bool{}
	allocIDs := slices.Sorted(maps.Keys(b.allocs))
	for _, id := range allocIDs {
		a := b.allocs[id]
		if !holdsDevices(a) {
			continue
		}
		gk := groupKey(a.Namespace, a.JobID, a.Group)
		if shadowOnly[gk] || len(a.Devices) == 0 {
			continue
		}
		ca := cluster.Alloc{ID: a.ID, Namespace: a.Namespace, JobID: a.JobID, Group: a.Group, NodeID: a.NodeID,
			DeviceIDs: a.deviceIDs(), GPUType: gpuspec.TypeOf(a.Devices[0].Name), StartTime: a.Start}
		if jr, ok := b.jobs[jobKey(a.Namespace, a.JobID)]; ok {
			if tg := findGroup(jr.job, a.Group); tg != nil {
				if an, err := annot.Parse(jr.job.Meta, tg.Meta, a.Group); err == nil {
					// As for a preemptible group: EstRuntime is what is left of hetgpu.runtime,
					// read the same way, so a waiting job can say when these GPUs free up; an
					// allocation placed but not started yet has all of it left (under load a
					// task starts seconds after its placement, and the first waiting note
					// would say no time at all, e2e TestWaitingJobSaysWhenGPUsFree).
					var ran time.Duration
					if !a.Start.IsZero() {
						ran = max(0, snap.Now.Sub(a.Start))
					}
					b.readRuntime(a.Namespace, &an, ran)
					ca.Shared, ca.Hetgpu = an.AllowSharing, an
				}
			}
		}
		for _, d := range ca.DeviceIDs {
			held[d] = true
		}
		snap.Running = append(snap.Running, ca)
	}
	return held
}

// snapshotUnplacedPins adds, as running, the GPUs of pins issued but not placed yet: they
// hold their GPUs, or the next round would hand them out twice. Callers hold b.mu.
func (b *Backend) snapshotUnplacedPins(snap *cluster.Snapshot, jobKeys []string, inst instanceIndex, held map[string]bool) {
	counts := b.groupCounts()
	b.eachGroup(jobKeys, func(jr *jobRec, tg *api.TaskGroup) {
		job := jr.job
		if groupHeld(job, tg) {
			return
		}
		_, devs, ok := PinOf(tg)
		if !ok || !groupActive(job, tg, counts) {
			return
		}
		byNode := map[string][]string{}
		for _, d := range devs {
			if n, ok := inst.node[d]; ok && !held[d] {
				byNode[n] = append(byNode[n], d)
			}
		}
		for _, n := range slices.Sorted(maps.Keys(byNode)) {
			ids := byNode[n]
			snap.Running = append(snap.Running, cluster.Alloc{
				ID:        "pin:" + groupKey(deref(job.Namespace, "default"), deref(job.ID, ""), *tg.Name) + "@" + n,
				Namespace: deref(job.Namespace, "default"), JobID: deref(job.ID, ""), Group: *tg.Name, NodeID: n,
				DeviceIDs: ids, GPUType: gpuspec.Canonical(inst.devName[ids[0]]), StartTime: snap.Now,
			})
		}
	})
}

// readRuntime replaces a group's hetgpu.runtime (a.EstRuntime) by what is left of it once it
// has run for its hetgpu.ran and then for ran more (Config.EstimateModel, else EstimateError's
// model), and keeps the runtime as written in a.DeclaredRuntime. A group without an estimate
// keeps none.
func (b *Backend) readRuntime(ns string, a *cluster.Annotations, ran time.Duration) {
	a.DeclaredRuntime = a.EstRuntime
	if a.EstRuntime <= 0 {
		return
	}
	m := cluster.EstimateModel{Sigma: b.cfg.EstimateError}
	if b.cfg.EstimateModel != nil {
		m = b.cfg.EstimateModel(ns)
	}
	a.EstRuntime = m.Remaining(a.EstRuntime, a.Ran+ran)
}

// preemptible lists the running pinned groups annotated hetgpu.preemptible, as the jobs they
// would be once re-held (hetgpu's pin constraints gone). EstRuntime is what is left of the
// annotated runtime after the time the group ran before (hetgpu.ran, see pendingJob) and the
// time its current allocations have run; those times its GPUs are its attained service.
// Callers hold b.mu.
func (b *Backend) preemptible(jobKeys []string, running []cluster.Alloc, now time.Time) []cluster.Job {
	// since is when each group's earliest started allocation started; zero while none has
	// (placed, its task not started yet): such a group has run for no time, not since year 1.
	since := map[string]time.Time{}
	for _, a := range running {
		k := groupKey(a.Namespace, a.JobID, a.Group)
		t, ok := since[k]
		if !ok || !a.StartTime.IsZero() && (t.IsZero() || a.StartTime.Before(t)) {
			since[k] = a.StartTime
		}
	}
	var out []cluster.Job
	b.eachGroup(jobKeys, func(jr *jobRec, tg *api.TaskGroup) {
		job := jr.job
		if groupHeld(job, tg) {
			return
		}
		start, live := since[groupKey(deref(job.Namespace, "default"), deref(job.ID, ""), *tg.Name)]
		if !live {
			return
		}
		if a, err := annot.Parse(job.Meta, tg.Meta, *tg.Name); err != nil || !a.Preemptible {
			return
		}
		cp, err := copyJob(job)
		if err != nil {
			return
		}
		if err := ReholdJob(cp, *tg.Name, "", UI{}); err != nil {
			return
		}
		pj, err := b.pendingJob(cp, findGroup(cp, *tg.Name), jr.firstSubmit)
		if err != nil {
			return
		}
		pj.ParentID = jr.parent
		var ran time.Duration
		if !start.IsZero() {
			ran = max(now.Sub(start), 0)
		}
		b.readRuntime(pj.Namespace, &pj.Hetgpu, ran)
		pj.AttainedGPUSeconds += ran.Seconds() * float64(pj.GPUs)
		out = append(out, pj)
	})
	return out
}
