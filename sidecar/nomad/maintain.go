package nomad

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/hetgpu/hetgpu/internal/parallel"
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
	m.Finished = b.finishedRuns()
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
	keys := make([]string, 0, len(b.jobs))
	for k := range b.jobs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
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
				if _, err := pendingJob(job, tg, time.Time{}); err != nil {
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
	if GroupLines(job)[inv.group] == inv.line {
		return
	}
	SetGroupLine(job, inv.group, inv.line, UI{ExplainURL: b.explainURL(inv.ns, inv.id)})
	wq := (&api.WriteOptions{Namespace: inv.ns}).WithContext(ctx)
	resp, _, err := b.c.Jobs().RegisterOpts(job, &api.RegisterOptions{EnforceIndex: true, ModifyIndex: deref(job.JobModifyIndex, 0), PreserveCounts: true}, wq)
	if err != nil {
		b.log.Debug("showing the annotation error in the ui block failed", "job", inv.key, "error", err)
		return
	}
	job.JobModifyIndex = &resp.JobModifyIndex
	b.storeJob(job)
}

// sampleEnergy integrates the power of running hetgpu allocations' GPUs. It reads each
// node's device stats once (one call per node holding such allocations, side by side,
// StatsParallel at a time) and sums each allocation's own instances, rather than asking for
// every allocation's stats: the calls per cycle are bounded by the nodes, not the
// allocations (1,280 nodes x 8 GPUs can run thousands of allocations).
func (b *Backend) sampleEnergy(ctx context.Context) {
	b.mu.Lock()
	now := b.now()
	if now.Sub(b.lastStats) < b.cfg.SampleEvery {
		b.mu.Unlock()
		return
	}
	b.lastStats = now
	byNode := map[string][]*allocRec{}
	for _, a := range b.allocs {
		if a.ClientStatus == api.AllocClientStatusRunning && !terminal(a) && len(a.Devices) > 0 {
			if _, ok := b.jobs[jobKey(a.Namespace, a.JobID)]; ok {
				byNode[a.NodeID] = append(byNode[a.NodeID], a)
			}
		}
	}
	b.mu.Unlock()
	nodes := make([]string, 0, len(byNode))
	for n := range byNode {
		nodes = append(nodes, n)
	}
	sort.Strings(nodes)
	parallel.For(len(nodes), b.cfg.StatsParallel, func(i int) {
		if ctx.Err() != nil {
			return
		}
		sctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		hs, err := b.c.Nodes().Stats(nodes[i], (&api.QueryOptions{}).WithContext(sctx))
		cancel()
		if err != nil || hs == nil {
			b.log.Debug("node device stats unavailable; no energy sample", "node", nodes[i], "error", err)
			return
		}
		power := map[string]float64{}
		eachInstance(hs, func(id string, st *api.DeviceStats) {
			if p, ok := powerW(st.Stats); ok {
				power[id] = p
			}
		})
		t := b.now()
		b.mu.Lock()
		defer b.mu.Unlock()
		for _, a := range byNode[nodes[i]] {
			total, n := 0.0, 0
			seen := map[string]bool{}
			for _, id := range a.deviceIDs() {
				if p, ok := power[id]; ok && !seen[id] {
					total += p
					n++
					seen[id] = true // an instance listed twice counts once
				}
			}
			if n == 0 {
				continue
			}
			acc := b.energy[a.ID]
			if acc == nil {
				acc = &energyAcc{}
				b.energy[a.ID] = acc
			}
			if !acc.last.IsZero() {
				acc.joules += (acc.lastW + total) / 2 * t.Sub(acc.last).Seconds()
			} else if !a.Start.IsZero() && a.Start.Before(t) {
				// First sample: assume the draw since the task started was the same.
				acc.joules += total * t.Sub(a.Start).Seconds()
			}
			acc.last, acc.lastW = t, total
			acc.peak = max(acc.peak, total)
			acc.samples++
		}
	})
}

// finishedRuns reports groups whose allocations all ended, at least one of them having
// finished its work (finishedOK), once LearnGrace has passed since the last one ended.
// Stopped, failed and lost allocations are never a finished run: the task driver reports
// what they did, marked partial. Each run's record claims its allocations, so whichever of
// the task driver and the sidecar reports it first is the one stored and learned.
func (b *Backend) finishedRuns() []cluster.FinishedRun {
	b.mu.Lock()
	defer b.mu.Unlock()
	type run struct {
		live     int
		complete []*allocRec
	}
	runs := map[string]*run{}
	for _, a := range b.allocs {
		gk := groupKey(a.Namespace, a.JobID, a.Group)
		r := runs[gk]
		if r == nil {
			r = &run{}
			runs[gk] = r
		}
		if !terminal(a) {
			r.live++
		} else if finishedOK(a) && len(a.Devices) > 0 && !b.learned[a.ID] {
			r.complete = append(r.complete, a)
		}
	}
	keys := make([]string, 0, len(runs))
	for k := range runs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var out []cluster.FinishedRun
	for _, gk := range keys {
		r := runs[gk]
		if r.live > 0 || len(r.complete) == 0 {
			continue
		}
		last := time.Time{}
		for _, al := range r.complete {
			if al.End.After(last) {
				last = al.End
			}
		}
		if b.now().Sub(last) < b.cfg.LearnGrace {
			continue // the task driver's record, measured on the GPUs, usually comes first
		}
		sort.Slice(r.complete, func(i, j int) bool { return r.complete[i].ID < r.complete[j].ID })
		first := r.complete[0]
		jr, ok := b.jobs[jobKey(first.Namespace, first.JobID)]
		if !ok {
			continue
		}
		tg := findGroup(jr.job, first.Group)
		if tg == nil {
			continue
		}
		a, _ := annot.Parse(jr.job.Meta, tg.Meta, first.Group)
		obs := cluster.Observation{
			Namespace: first.Namespace, JobID: first.JobID, Group: first.Group,
			ModelFamily: a.ModelFamily, ModelName: a.ModelName, BatchSize: a.BatchSize, ParamCount: a.ParamCount,
			Framework: a.Framework,
		}
		var start, end time.Time
		nodes := map[string]bool{}
		ids := []string{}
		samples := 0
		for _, al := range r.complete {
			b.learned[al.ID] = true
			ids = append(ids, al.ID)
			nodes[al.NodeID] = true
			obs.GPUs += len(al.deviceIDs())
			if obs.GPUName == "" {
				obs.GPUName = al.Devices[0].Name
				obs.GPUType = gpuspec.Canonical(obs.GPUName)
			}
			if !al.Start.IsZero() && (start.IsZero() || al.Start.Before(start)) {
				start = al.Start
			}
			if al.End.After(end) {
				end = al.End
			}
			if e := b.energy[al.ID]; e != nil {
				obs.EnergyJ += e.joules
				obs.PeakPowerW = max(obs.PeakPowerW, e.peak)
				samples += e.samples
				delete(b.energy, al.ID)
			}
		}
		obs.Nodes = len(nodes)
		if !start.IsZero() && end.After(start) {
			obs.RuntimeS = end.Sub(start).Seconds()
		}
		obs.Time = end
		// A run resumed after a preemption (hetgpu.ran) did only the rest of the steps, how
		// many is not known here: steps over its runtime would overstate its throughput.
		if w := annot.Steps(jr.job.Meta, tg.Meta, first.Group); w > 0 && obs.RuntimeS > 0 && a.Ran == 0 {
			obs.Throughput = w / obs.RuntimeS
		}
		if obs.EnergyJ > 0 && obs.RuntimeS > 0 {
			obs.AvgPowerW = obs.EnergyJ / obs.RuntimeS
		}
		sum := sha256.Sum256([]byte(strings.Join(ids, ",")))
		out = append(out, cluster.FinishedRun{Key: gk + "@" + hex.EncodeToString(sum[:8]), AllocIDs: ids, Obs: obs, Start: start, Samples: samples,
			EstRuntime: a.EstRuntime, Ran: a.Ran, ParentID: deref(jr.job.ParentID, "")})
	}
	return out
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
