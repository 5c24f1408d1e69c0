package nomad

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/hetgpu/hetgpu/model/annot"
	"github.com/hetgpu/hetgpu/model/cluster"
	"github.com/hetgpu/hetgpu/model/gpuspec"
)

// faultRetry spaces re-hold attempts of one group, so a failing register cannot spin.
const faultRetry = 10 * time.Second

// Maintain does the housekeeping between rounds (see cluster.Backend).
func (b *Backend) Maintain(ctx context.Context) (*cluster.Maintenance, error) {
	m := &cluster.Maintenance{}
	b.checkOrphans(ctx)
	if b.cfg.SampleDeviceStats {
		b.sampleEnergy(ctx)
	}
	faults, invalid, placed := b.scan()
	if len(faults)+len(invalid) > 0 {
		if err := cluster.FenceHeld(ctx, b.cfg.Fence); err != nil {
			// Not the leader (any more): the leader re-holds; nothing is written here.
			faults, invalid = nil, nil
		}
	}
	for _, f := range faults {
		m.Reheld = append(m.Reheld, b.rehold(ctx, f))
	}
	for _, inv := range invalid {
		m.Invalid = append(m.Invalid, cluster.InvalidJob{JobKey: inv.key, Err: inv.err})
		b.showInvalid(ctx, inv)
	}
	b.refreshLinks(ctx)
	m.Placed = placed
	m.Finished = b.finishedRuns(ctx)
	b.mu.Lock()
	m.Gone, b.gone = b.gone, nil
	b.mu.Unlock()
	return m, ctx.Err()
}

type fault struct {
	ns, id, group string
	reason        string
}

type invalidJob struct {
	ns, id, group string
	key, err      string
	line          string
	have          string
}

// scan finds pinned groups whose node or GPUs failed, held groups that cannot be decided, and
// where Nomad placed un-held annotated groups.
// gangCompanion reports a group without GPUs that only the job-level hold keeps waiting, in a
// job with GPU groups: a launcher or parameter server that belongs with them. hetgpu does not
// place it; the pin of the job's GPU groups lifts the job-level hold, which releases it to
// Nomad in the same register, so it never starts before its workers are pinned.
func gangCompanion(job *api.Job, tg *api.TaskGroup) bool {
	if len(gpuDevices(tg)) > 0 || hasHold(tg.Constraints) || !hasHold(job.Constraints) {
		return false
	}
	for _, g := range job.TaskGroups {
		if g != nil && len(gpuDevices(g)) > 0 {
			return true
		}
	}
	return false
}

func (b *Backend) scan() ([]fault, []invalidJob, []cluster.Placement) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	var faults []fault
	var invalid []invalidJob
	var placed []cluster.Placement
	keys := slices.Sorted(maps.Keys(b.jobs))
	counts := b.groupCounts()
	for _, k := range keys {
		job := b.jobs[k].job
		if jobStopped(job) {
			continue
		}
		ns, id := deref(job.Namespace, "default"), deref(job.ID, "")
		lines := GroupLines(job)
		for _, tg := range job.TaskGroups {
			if tg.Name == nil {
				continue
			}
			gk := groupKey(ns, id, *tg.Name)
			if groupHeld(job, tg) {
				if gangCompanion(job, tg) {
					continue // released with the job's GPU groups, in the same register
				}
				if _, err := b.pendingJob(job, tg, time.Time{}); err != nil {
					msg := err.Error()
					line := GroupLine(*tg.Name, "**held: hetgpu cannot decide** — "+msg+". Fix the job and run it again, or `hetgpu release "+id+"`.")
					invalid = append(invalid, invalidJob{ns: ns, id: id, group: *tg.Name, key: gk, err: msg, line: line, have: lines[*tg.Name]})
				}
				continue
			}
			nodes, devs, pinned := PinOf(tg)
			if !pinned {
				if a, err := annot.Parse(job.Meta, tg.Meta, *tg.Name); err == nil && a.Enabled && !b.placed[gk] {
					if p, ok := b.nomadPlacement(ns, id, *tg.Name); ok {
						p.JobKey, p.Time = gk, now
						placed = append(placed, p)
						b.placed[gk] = true
					}
				}
				continue
			}
			if !groupActive(job, tg, counts) {
				continue
			}
			if t, ok := b.lastFault[gk]; ok && now.Sub(t) < faultRetry {
				continue
			}
			if reason := b.pinFault(job, tg, nodes, devs, counts[gk].live); reason != "" {
				faults = append(faults, fault{ns: ns, id: id, group: *tg.Name, reason: reason})
				b.lastFault[gk] = now
			}
		}
	}
	return faults, invalid, placed
}

// pinFault says why a pin can no longer be honoured, or "" (live: the group's live
// allocations). hetgpu decides again only for
// what Nomad has to place anew: while the group has as many live allocations as its count,
// a draining, down or disconnected node, an unhealthy GPU or an ineligible node is Nomad's to
// handle (a drain runs batch work to its deadline and migrates service work; a lost node's
// allocations are marked lost and replaced), and a re-hold then would itself stop the
// running work, since it rewrites the group's device request (a destructive update). Callers
// hold b.mu.
func (b *Backend) pinFault(job *api.Job, tg *api.TaskGroup, nodes, devs []string, live int) string {
	ns, id := deref(job.Namespace, "default"), deref(job.ID, "")
	if live >= deref(tg.Count, 1) {
		return ""
	}
	health := map[string]cluster.Instance{}
	for _, nid := range nodes {
		nr, ok := b.nodes[nid]
		if !ok {
			return fmt.Sprintf("pinned node %s is gone", shortID(nid))
		}
		n := nr.node
		switch {
		case n.Status == api.NodeStatusDown || n.Status == api.NodeStatusDisconnected:
			return fmt.Sprintf("pinned node %s is %s", n.Name, n.Status)
		case n.Draining:
			return fmt.Sprintf("pinned node %s is draining", n.Name)
		case !n.Eligible:
			return fmt.Sprintf("pinned node %s is ineligible for scheduling", n.Name)
		}
		for _, g := range n.Devices {
			for _, in := range g.Instances {
				health[in.ID] = in
			}
		}
	}
	for _, d := range devs {
		in, ok := health[d]
		if !ok {
			return fmt.Sprintf("pinned GPU %s is no longer on the pinned node(s)", d)
		}
		if !in.Healthy {
			why := in.HealthDescription
			if why == "" {
				why = "reported unhealthy by the device plugin"
			}
			return fmt.Sprintf("pinned GPU %s is unhealthy (%s)", d, why)
		}
	}
	// Nomad tried the pin and could not place it.
	if e, ok := b.blocked[jobKey(ns, id)]; ok && e.JobModifyIndex >= deref(job.JobModifyIndex, 0) {
		if m, ok := e.FailedTGAllocs[*tg.Name]; ok && m != nil {
			return "Nomad could not place the pin: " + metricSummary(m)
		}
	}
	return ""
}

func metricSummary(m *api.AllocationMetric) string {
	var parts []string
	for k, v := range m.ConstraintFiltered {
		parts = append(parts, fmt.Sprintf("constraint %s filtered %d node(s)", k, v))
	}
	for k, v := range m.DimensionExhausted {
		parts = append(parts, fmt.Sprintf("%s exhausted on %d node(s)", k, v))
	}
	sort.Strings(parts)
	if len(parts) == 0 {
		return fmt.Sprintf("%d of %d node(s) evaluated", m.NodesEvaluated, m.NodesInPool)
	}
	return strings.Join(parts, "; ")
}

// nomadPlacement is where Nomad put a group's live allocations. Callers hold b.mu.
func (b *Backend) nomadPlacement(ns, id, group string) (cluster.Placement, bool) {
	var p cluster.Placement
	nodes := map[string]bool{}
	for _, a := range b.allocs {
		if a.Namespace != ns || a.JobID != id || a.Group != group || terminal(a) || len(a.Devices) == 0 {
			continue
		}
		nodes[a.NodeID] = true
		p.DeviceIDs = append(p.DeviceIDs, a.deviceIDs()...)
		p.GPUType = gpuspec.TypeOf(a.Devices[0].Name)
	}
	if len(nodes) == 0 {
		return p, false
	}
	for n := range nodes {
		p.NodeIDs = append(p.NodeIDs, n)
	}
	sort.Strings(p.NodeIDs)
	sort.Strings(p.DeviceIDs)
	return p, true
}

func (b *Backend) rehold(ctx context.Context, f fault) cluster.Rehold {
	key := groupKey(f.ns, f.id, f.group)
	r := cluster.Rehold{JobKey: key, Reason: f.reason}
	q := (&api.QueryOptions{Namespace: f.ns}).WithContext(ctx)
	job, _, err := b.c.Jobs().Info(f.id, q)
	if err != nil {
		if statusCode(err) == 404 {
			b.dropJob(f.ns, f.id)
		}
		r.Err = fmt.Errorf("re-hold %s: read job: %w", key, err)
		return r
	}
	line := GroupLine(f.group, fmt.Sprintf("**re-held** at %s: %s; hetgpu decides again", b.now().UTC().Format(time.RFC3339), f.reason))
	if err := ReholdJob(job, f.group, line, UI{ExplainURL: b.explainURL(f.ns, f.id)}); err != nil {
		b.storeJob(job)
		r.Err = err
		return r
	}
	if err := b.registerHeld(ctx, job, "hetgpu re-held "+f.group+": "+truncate(f.reason, 150)); err != nil {
		r.Err = fmt.Errorf("re-hold %s: %w", key, err)
		return r
	}
	b.log.Warn("pinned job re-held", "job", key, "reason", f.reason)
	r.Applied = true
	return r
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

// showInvalid writes the error into the job's ui description once (the line is compared, so a
// restart does not write it again).
func (b *Backend) showInvalid(ctx context.Context, inv invalidJob) {
	if inv.have == inv.line {
		return
	}
	q := (&api.QueryOptions{Namespace: inv.ns}).WithContext(ctx)
	job, _, err := b.c.Jobs().Info(inv.id, q)
	if err != nil {
		return
	}
	if GroupLines(job)[inv.group] == inv.line || b.cutsLink(job) {
		return
	}
	SetGroupLine(job, inv.group, inv.line, UI{ExplainURL: b.explainURL(inv.ns, inv.id)})
	resp, err := reregister(ctx, b.c, b.rpc, inv.ns, job, deref(job.JobModifyIndex, 0), nil)
	if err != nil {
		b.log.Debug("showing the annotation error in the ui block failed", "job", inv.key, "error", err)
		return
	}
	job.JobModifyIndex = &resp.JobModifyIndex
	b.storeJob(job)
}

var _ cluster.AllocLifetimes = (*Backend)(nil)

// AllocLifetime is when an allocation's first task started and its last one finished (end
// zero while it runs), as the event stream reported them; ok is false for an allocation
// the backend does not track.
func (b *Backend) AllocLifetime(allocID string) (start, end time.Time, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	a, ok := b.allocs[allocID]
	if !ok {
		return time.Time{}, time.Time{}, false
	}
	if !terminal(a) {
		return a.Start, time.Time{}, true
	}
	return a.Start, a.End, true
}
