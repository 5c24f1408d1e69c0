package nomad

import (
	"context"
	"fmt"
	"strings"

	"github.com/hashicorp/nomad/api"

	"github.com/hetgpu/hetgpu/internal/parallel"
	"github.com/hetgpu/hetgpu/model/cluster"
)

// Pin re-registers each decided job with its pins, enforcing the JobModifyIndex of the
// snapshot the decision was made on: the round's view, which Snapshot recorded (roundView).
func (b *Backend) Pin(ctx context.Context, decisions []cluster.Decision) ([]cluster.PinResult, error) {
	if err := cluster.FenceHeld(ctx, b.cfg.Fence); err != nil {
		return nil, fmt.Errorf("pin: %w", err)
	}
	type jobPins struct {
		ns, id string
		ds     []cluster.Decision
	}
	var order []string
	byJob := map[string]*jobPins{}
	for _, d := range decisions {
		k := jobKey(d.Namespace, d.JobID)
		if byJob[k] == nil {
			byJob[k] = &jobPins{ns: d.Namespace, id: d.JobID}
			order = append(order, k)
		}
		byJob[k].ds = append(byJob[k].ds, d)
	}
	view := b.lastRound() // the snapshot these decisions were made on
	b.mu.Lock()
	holders := b.deviceHolders()
	b.mu.Unlock()
	// Each job's pin is three calls in sequence (read, register, tag); jobs are independent,
	// so they go out side by side, results kept in decision order.
	perJob := make([][]cluster.PinResult, len(order))
	parallel.For(len(order), b.cfg.Parallel, func(i int) {
		jp := byJob[order[i]]
		perJob[i] = b.pinJob(ctx, view, jp.ns, jp.id, jp.ds, holders)
	})
	results := make([]cluster.PinResult, 0, len(decisions))
	for _, r := range perJob {
		results = append(results, r...)
	}
	return results, ctx.Err()
}

// pinJob pins one job's decided groups: it re-registers the job with the pins, enforcing the
// JobModifyIndex the job had in view, and tags the new version.
func (b *Backend) pinJob(ctx context.Context, view *roundView, ns, id string, ds []cluster.Decision, holders map[string][]*allocRec) []cluster.PinResult {
	fail := func(conflict bool, err error) []cluster.PinResult {
		out := make([]cluster.PinResult, len(ds))
		for i, d := range ds {
			out[i] = cluster.PinResult{JobKey: d.JobKey(), Conflict: conflict, Err: err}
		}
		return out
	}
	want := uint64(0)
	for _, d := range ds {
		if mi := view.jobModifyIndex(d.JobKey()); mi != 0 {
			want = mi
		}
	}
	job, nodes, err := b.pinTarget(ctx, ns, id, ds, want)
	if err != nil {
		return fail(false, err)
	}
	cur := deref(job.JobModifyIndex, 0)
	if want != 0 && cur != want {
		return fail(true, fmt.Errorf("pin %s/%s: job changed since the decision (JobModifyIndex %d, decided on %d)", ns, id, cur, want))
	}
	// GPUs a stopping allocation still holds (a job preempted this round) would make Nomad
	// fail the placement: decide again once it ended.
	if err := stillHeld(ns, id, ds, holders); err != nil {
		return fail(true, err)
	}
	var pins []GroupPin
	var tagParts []string
	for _, d := range ds {
		p := GroupPin{Group: d.Group, Line: DecisionLine(&d, nodes, b.explainURL(ns, id))}
		for _, a := range d.Assign {
			p.NodeIDs = append(p.NodeIDs, a.NodeID)
			p.DeviceIDs = append(p.DeviceIDs, a.InstanceIDs...)
		}
		pins = append(pins, p)
		tagParts = append(tagParts, fmt.Sprintf("%s: %d×%s on %s", d.Group, d.GPUs(), strings.ToUpper(d.GPUType), nodeNames(d.Assign, nodes)))
	}
	newJob, err := copyJob(job)
	if err != nil {
		return fail(false, err)
	}
	if err := PinJob(newJob, pins, UI{ExplainURL: b.explainURL(ns, id)}); err != nil {
		// The job moved on (released, pinned elsewhere, group removed): decide again.
		return fail(true, err)
	}
	if conflict, err := b.registerPinned(ctx, ns, id, job, newJob, ds, tagParts); err != nil {
		return fail(conflict, err)
	}
	out := make([]cluster.PinResult, len(ds))
	for i, d := range ds {
		out[i] = cluster.PinResult{JobKey: d.JobKey(), Applied: true}
	}
	return out
}

// pinTarget returns the job to pin and the decided nodes. The job as the events left it is
// the one decided on when its JobModifyIndex is the snapshot's (want): the register enforces
// that index, so reading the job again first would only cost a round trip per pin. Otherwise
// (or when unknown) it is read.
func (b *Backend) pinTarget(ctx context.Context, ns, id string, ds []cluster.Decision, want uint64) (*api.Job, map[string]cluster.Node, error) {
	b.mu.Lock()
	// Only the decided nodes: copying every node for each of a thousand pins would cost more
	// than the pins.
	nodes := map[string]cluster.Node{}
	for _, d := range ds {
		for _, a := range d.Assign {
			if n, ok := b.nodes[a.NodeID]; ok {
				nodes[a.NodeID] = n.node
			}
		}
	}
	var job *api.Job
	if jr, ok := b.jobs[jobKey(ns, id)]; ok && want != 0 && deref(jr.job.JobModifyIndex, 0) == want {
		job = jr.job
	}
	b.mu.Unlock()
	if job != nil {
		return job, nodes, nil
	}
	q := (&api.QueryOptions{Namespace: ns}).WithContext(ctx)
	job, _, err := b.c.Jobs().Info(id, q)
	if err != nil {
		if statusCode(err) == 404 {
			b.dropJob(ns, id)
			return nil, nil, fmt.Errorf("pin %s/%s: %w", ns, id, cluster.ErrJobGone)
		}
		return nil, nil, fmt.Errorf("pin %s/%s: read job: %w", ns, id, err)
	}
	b.storeJob(job)
	return job, nodes, nil
}

// registerPinned registers the pinned job (enforcing the JobModifyIndex of job, the version
// it was made from), records it at once and tags the new version; conflict says the job
// changed meanwhile (decide again).
func (b *Backend) registerPinned(ctx context.Context, ns, id string, job, newJob *api.Job, ds []cluster.Decision, tagParts []string) (conflict bool, err error) {
	cur, version := deref(job.JobModifyIndex, 0), deref(job.Version, 0)
	wq := (&api.WriteOptions{Namespace: ns}).WithContext(ctx)
	desc := "hetgpu pinned " + strings.Join(tagParts, "; ")
	if len(desc) > 200 {
		desc = desc[:200]
	}
	resp, err := reregister(ctx, b.c, b.rpc, ns, newJob, cur, registerTag(id, "hetgpu-pin", version+1, desc))
	if err != nil {
		if isConflict(err) {
			return true, fmt.Errorf("pin %s/%s: %w", ns, id, err)
		}
		if statusCode(err) == 404 || strings.Contains(err.Error(), "job does not exist") {
			// Purged since the snapshot: Nomad refuses the enforced register so.
			b.dropJob(ns, id)
			return false, fmt.Errorf("pin %s/%s: %w", ns, id, cluster.ErrJobGone)
		}
		return false, fmt.Errorf("pin %s/%s: register: %w", ns, id, err)
	}
	// Record the pinned job at once so the next snapshot counts its GPUs as taken even
	// before the Job event arrives.
	newJob.JobModifyIndex = &resp.JobModifyIndex
	// The register raised ModifyIndex too; a stale read in flight must not win over this.
	mi := resp.JobModifyIndex
	newJob.ModifyIndex = &mi
	nv := version + 1
	newJob.Version = &nv
	b.storeJob(newJob)
	// A new pin is a new start: its first fault is acted on at once, however recent the
	// last re-hold of the group was.
	b.mu.Lock()
	for _, d := range ds {
		delete(b.lastFault, d.JobKey())
	}
	b.mu.Unlock()
	if tagInRegister(id) {
		return false, nil // tagged by the register
	}
	tagName := fmt.Sprintf("hetgpu-pin-%d", resp.JobModifyIndex)
	if err := tagVersion(b.c, id, nv, tagName, desc, wq); err != nil {
		b.log.Warn("tagging the pinned job version failed; the pin stands", "job", jobKey(ns, id), "version", nv, "error", err)
	}
	return false, nil
}

// stillHeld names a decided GPU that another group's allocation still holds (holders is
// deviceHolders' answer).
func stillHeld(ns, id string, ds []cluster.Decision, holders map[string][]*allocRec) error {
	for _, d := range ds {
		for _, as := range d.Assign {
			for _, g := range as.InstanceIDs {
				for _, a := range holders[g] {
					if a.Namespace == ns && a.JobID == id {
						continue
					}
					return fmt.Errorf("pin %s/%s: GPU %s is still held by allocation %s of %s (%s); decided again when it ends",
						ns, id, g, a.ID, a.JobID, a.ClientStatus)
				}
			}
		}
	}
	return nil
}
