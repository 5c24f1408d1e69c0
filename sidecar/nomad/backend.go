// Package nomad is the Nomad backend of cluster.Cluster: it watches a Nomad cluster through
// github.com/hashicorp/nomad/api (event stream, resumed at the last index + 1, with a full
// resync through the list APIs on every (re)connect), builds snapshots of nodes, GPUs,
// allocations and held jobs, pins decisions by re-registering jobs with EnforceRegister, shows
// each decision in the job's ui block and a version tag, re-holds pinned jobs whose node or
// GPUs fail, and reports finished runs for the learner.
package nomad

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"

	"github.com/hetgpu/hetgpu/internal/parallel"
	"github.com/hetgpu/hetgpu/model/annot"
	"github.com/hetgpu/hetgpu/model/cluster"
	"github.com/hetgpu/hetgpu/model/gpuspec"
	"github.com/hetgpu/hetgpu/sidecar/service"
)

// Config configures the backend.
type Config struct {
	Client *api.Client
	// Namespace to watch; "*" (default) is every namespace the token can read.
	Namespace string
	Logger    hclog.Logger
	// ExplainBaseURL is the sidecar's address as users reach it; the job's ui link points to
	// {ExplainBaseURL}/v1/jobs/{ns}/{id}/explain?format=html. Empty: no link.
	ExplainBaseURL string
	// SignExplain, when set, returns the "exp=…&sig=…" query that lets the link open the
	// job's explain page without a token (sidecar/explainlink).
	SignExplain func(ns, id string) string
	// Shadow: un-held annotated jobs are offered for decision too (the service records but
	// never pins in shadow mode), and their own allocations are left out of the snapshot.
	Shadow bool
	// SampleDeviceStats polls the device stats of running hetgpu allocations to measure
	// energy (one client RPC per allocation per SampleEvery).
	SampleDeviceStats bool
	SampleEvery       time.Duration
	// Topology reads instance topology (NVLink peers, NUMA, PCIe switch) from node device
	// stats once per node registration.
	Topology bool
	// ResyncEvery adds a full list resync besides the one on every (re)connect; default 1m,
	// negative disables.
	ResyncEvery time.Duration
	// LearnGrace is how long after a group's last allocation ended the sidecar waits before
	// it records the run itself, so the task driver's record (throughput and energy measured
	// on the GPUs) is usually the one kept; default 20 s, negative reports at once.
	LearnGrace time.Duration
	// Now is the clock; default time.Now.
	Now func() time.Time
	// RetryBackoff is the first wait before reconnecting (doubling to 30 s); default 1 s.
	RetryBackoff time.Duration
	// Parallel bounds the API calls in flight at once for pins (jobs pinned side by side in a
	// round) and for the node and job reads of a resync (default 16); StatsParallel the node
	// stats requests for energy sampling and live readings (default 16; a server forwards each
	// to a client).
	Parallel      int
	StatsParallel int
	// Fence, when set (sidecar/ha), is checked before every batch of job writes (pins,
	// preemptions, re-holds): a replica that lost the leader lock writes nothing more. Nil:
	// one replica, always allowed.
	Fence cluster.Fence
}

// Backend implements cluster.Cluster and service.Backend on Nomad.
type Backend struct {
	cfg Config
	c   *api.Client
	log hclog.Logger

	mu      sync.Mutex
	nodes   map[string]*nodeRec
	jobs    map[string]*jobRec // by "ns/id"
	allocs  map[string]*allocRec
	blocked map[string]*api.Evaluation // latest blocked eval by "ns/id"
	index   uint64
	// pending is the last snapshot's pending jobs by key: Pin checks their JobModifyIndex.
	pending   map[string]cluster.Job
	energy    map[string]*energyAcc
	learned   map[string]bool
	placed    map[string]bool
	gone      []string
	lastFault map[string]time.Time
	lastStats time.Time
	// unmanaged: job key -> version of jobs read and found not hetgpu's (see knownUnmanaged).
	unmanaged map[string]uint64
	// orphans: live allocations of jobs that are gone, to ask Nomad about (checkOrphans).
	orphans map[string]bool
}

type nodeRec struct {
	api  *api.Node
	node cluster.Node
}

type jobRec struct {
	job *api.Job
	// firstSubmit is the earliest submit time seen: re-registers (pins, re-holds) must not
	// reset a job's waiting time.
	firstSubmit time.Time
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

type energyAcc struct {
	joules, peak, lastW float64
	last                time.Time
	samples             int
}

// New returns a backend; Watch must run for it to see anything.
func New(cfg Config) (*Backend, error) {
	if cfg.Client == nil {
		return nil, errors.New("nomad backend: no API client")
	}
	if cfg.Namespace == "" {
		cfg.Namespace = "*"
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.ResyncEvery == 0 {
		cfg.ResyncEvery = time.Minute
	}
	if cfg.SampleEvery <= 0 {
		cfg.SampleEvery = 5 * time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.LearnGrace == 0 {
		cfg.LearnGrace = 20 * time.Second
	}
	if cfg.RetryBackoff <= 0 {
		cfg.RetryBackoff = time.Second
	}
	if cfg.Parallel <= 0 {
		cfg.Parallel = 32
	}
	if cfg.StatsParallel <= 0 {
		cfg.StatsParallel = 16
	}
	return &Backend{
		cfg: cfg, c: cfg.Client, log: cfg.Logger.Named("nomad"),
		nodes: map[string]*nodeRec{}, jobs: map[string]*jobRec{}, allocs: map[string]*allocRec{},
		blocked: map[string]*api.Evaluation{}, pending: map[string]cluster.Job{},
		energy: map[string]*energyAcc{}, learned: map[string]bool{}, placed: map[string]bool{},
		lastFault: map[string]time.Time{}, unmanaged: map[string]uint64{}, orphans: map[string]bool{},
	}, nil
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

func allocFromFull(a *api.Allocation) *allocRec {
	r := &allocRec{ID: a.ID, Namespace: a.Namespace, JobID: a.JobID, Group: a.TaskGroup, NodeID: a.NodeID,
		ClientStatus: a.ClientStatus, DesiredStatus: a.DesiredStatus, CreateIndex: a.CreateIndex, ModifyIndex: a.ModifyIndex}
	if a.Job != nil && a.Job.Version != nil {
		r.JobVersion = *a.Job.Version
	}
	r.Devices = gpuAllocated(a.AllocatedResources)
	r.Start, r.End, r.Failed = taskTimes(a.TaskStates)
	return r
}

func allocFromStub(a *api.AllocationListStub) *allocRec {
	r := &allocRec{ID: a.ID, Namespace: a.Namespace, JobID: a.JobID, Group: a.TaskGroup, NodeID: a.NodeID,
		JobVersion: a.JobVersion, ClientStatus: a.ClientStatus, DesiredStatus: a.DesiredStatus,
		CreateIndex: a.CreateIndex, ModifyIndex: a.ModifyIndex}
	r.Devices = gpuAllocated(a.AllocatedResources)
	r.Start, r.End, r.Failed = taskTimes(a.TaskStates)
	return r
}

func gpuAllocated(ar *api.AllocatedResources) []*api.AllocatedDeviceResource {
	if ar == nil {
		return nil
	}
	var out []*api.AllocatedDeviceResource
	names := make([]string, 0, len(ar.Tasks))
	for n := range ar.Tasks {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		t := ar.Tasks[n]
		if t == nil {
			continue
		}
		for _, d := range t.Devices {
			if d != nil && d.Type == "gpu" {
				out = append(out, d)
			}
		}
	}
	return out
}

func taskTimes(ts map[string]*api.TaskState) (start, end time.Time, failed bool) {
	for _, s := range ts {
		if s == nil {
			continue
		}
		failed = failed || s.Failed
		if !s.StartedAt.IsZero() && (start.IsZero() || s.StartedAt.Before(start)) {
			start = s.StartedAt
		}
		if s.FinishedAt.After(end) {
			end = s.FinishedAt
		}
	}
	return start, end, failed
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

func (b *Backend) now() time.Time { return b.cfg.Now() }

// Snapshot builds the view every round works on.
func (b *Backend) Snapshot(ctx context.Context) (*cluster.Snapshot, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	snap := &cluster.Snapshot{Now: b.now()}
	nodeIDs := make([]string, 0, len(b.nodes))
	for id := range b.nodes {
		nodeIDs = append(nodeIDs, id)
	}
	sort.Strings(nodeIDs)
	instNode := map[string]string{}
	devName := map[string]string{}
	for _, id := range nodeIDs {
		n := b.nodes[id].node
		snap.Nodes = append(snap.Nodes, n)
		for _, g := range n.Devices {
			for _, in := range g.Instances {
				instNode[in.ID] = n.ID
				devName[in.ID] = g.Name
			}
		}
	}
	pendingKeys := map[string]bool{}
	b.pending = map[string]cluster.Job{}
	jobKeys := make([]string, 0, len(b.jobs))
	for k := range b.jobs {
		jobKeys = append(jobKeys, k)
	}
	sort.Strings(jobKeys)
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
		pj, err := pendingJob(job, tg, jr.firstSubmit)
		if err != nil {
			return // reported by Maintain as invalid
		}
		snap.Pending = append(snap.Pending, pj)
		b.pending[pj.Key()] = pj
		if shadowOnly {
			pendingKeys[pj.Key()] = true
		}
	})
	sort.SliceStable(snap.Pending, func(i, j int) bool { return snap.Pending[i].SubmitTime.Before(snap.Pending[j].SubmitTime) })
	// Running: every live allocation holding GPUs, whoever owns it.
	held := map[string]bool{}
	liveByGroup := map[string]int{}
	allocIDs := make([]string, 0, len(b.allocs))
	for id := range b.allocs {
		allocIDs = append(allocIDs, id)
	}
	sort.Strings(allocIDs)
	for _, id := range allocIDs {
		a := b.allocs[id]
		if !holdsDevices(a) {
			continue
		}
		gk := groupKey(a.Namespace, a.JobID, a.Group)
		if !terminal(a) {
			liveByGroup[gk]++
		}
		if pendingKeys[gk] || len(a.Devices) == 0 {
			continue
		}
		ca := cluster.Alloc{ID: a.ID, Namespace: a.Namespace, JobID: a.JobID, Group: a.Group, NodeID: a.NodeID,
			DeviceIDs: a.deviceIDs(), GPUType: gpuspec.TypeOf(a.Devices[0].Name), StartTime: a.Start}
		if jr, ok := b.jobs[jobKey(a.Namespace, a.JobID)]; ok {
			if tg := findGroup(jr.job, a.Group); tg != nil {
				if an, err := annot.Parse(jr.job.Meta, tg.Meta, a.Group); err == nil {
					ca.Shared, ca.Hetgpu = an.AllowSharing, an
				}
			}
		}
		for _, d := range ca.DeviceIDs {
			held[d] = true
		}
		snap.Running = append(snap.Running, ca)
	}
	snap.Preemptible = b.preemptible(jobKeys, snap.Running, snap.Now)
	// Pins issued but not placed yet hold their GPUs, or the next round would hand them out
	// twice.
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
			if n, ok := instNode[d]; ok && !held[d] {
				byNode[n] = append(byNode[n], d)
			}
		}
		nodes := make([]string, 0, len(byNode))
		for n := range byNode {
			nodes = append(nodes, n)
		}
		sort.Strings(nodes)
		for _, n := range nodes {
			ids := byNode[n]
			snap.Running = append(snap.Running, cluster.Alloc{
				ID:        "pin:" + groupKey(deref(job.Namespace, "default"), deref(job.ID, ""), *tg.Name) + "@" + n,
				Namespace: deref(job.Namespace, "default"), JobID: deref(job.ID, ""), Group: *tg.Name, NodeID: n,
				DeviceIDs: ids, GPUType: gpuspec.Canonical(devName[ids[0]]), StartTime: snap.Now,
			})
		}
	})
	return snap, nil
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

// preemptible lists the running pinned groups annotated hetgpu.preemptible, as the jobs they
// would be once re-held (hetgpu's pin constraints gone). EstRuntime is what is left of the
// annotated runtime after the time the group's current allocations have run, and that time
// times its GPUs is its attained service (a group's earlier runs are not counted). Callers
// hold b.mu.
func (b *Backend) preemptible(jobKeys []string, running []cluster.Alloc, now time.Time) []cluster.Job {
	since := map[string]time.Time{}
	for _, a := range running {
		k := groupKey(a.Namespace, a.JobID, a.Group)
		if t, ok := since[k]; !ok || a.StartTime.Before(t) {
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
		pj, err := pendingJob(cp, findGroup(cp, *tg.Name), jr.firstSubmit)
		if err != nil {
			return
		}
		ran := max(now.Sub(start), 0)
		if pj.Hetgpu.EstRuntime > 0 {
			pj.Hetgpu.EstRuntime = max(pj.Hetgpu.EstRuntime-ran, time.Minute)
		}
		pj.AttainedGPUSeconds = ran.Seconds() * float64(pj.GPUs)
		out = append(out, pj)
	})
	return out
}

var _ cluster.Preempter = (*Backend)(nil)

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

// stopGroup stops the group's live allocations.
func (b *Backend) stopGroup(ctx context.Context, ns, id, group string) error {
	b.mu.Lock()
	var ids []string
	for _, a := range b.allocs {
		if a.Namespace == ns && a.JobID == id && a.Group == group && !terminal(a) {
			ids = append(ids, a.ID)
		}
	}
	b.mu.Unlock()
	sort.Strings(ids)
	q := (&api.QueryOptions{Namespace: ns}).WithContext(ctx)
	var errs []error
	for _, aid := range ids {
		if _, err := b.c.Allocations().Stop(&api.Allocation{ID: aid, Namespace: ns}, q); err != nil && statusCode(err) != 404 {
			errs = append(errs, fmt.Errorf("stop allocation %s: %w", aid, err))
		}
	}
	return errors.Join(errs...)
}

// jobStopped reports jobs that place nothing: stopped, finished, or templates (periodic and
// parameterized parents; their children are jobs of their own).
func jobStopped(job *api.Job) bool {
	return (job.Stop != nil && *job.Stop) || deref(job.Status, "") == "dead" || job.ParameterizedJob != nil ||
		(job.Periodic != nil && deref(job.Periodic.Enabled, true))
}

// copyJob deep-copies a job so rewrites never touch the tracked state.
func copyJob(job *api.Job) (*api.Job, error) {
	data, err := json.Marshal(job)
	if err != nil {
		return nil, fmt.Errorf("copy job: %w", err)
	}
	var out api.Job
	if err := json.Unmarshal(data, &out); err != nil {
		return nil, fmt.Errorf("copy job: %w", err)
	}
	return &out, nil
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

// ErrJobGone is the PinResult error of a job deregistered before its pin.
var ErrJobGone = service.ErrJobGone

// Pin re-registers each decided job with its pins, enforcing the JobModifyIndex of the
// snapshot the decision was made on.
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
	b.mu.Lock()
	holders := b.deviceHolders()
	b.mu.Unlock()
	// Each job's pin is three calls in sequence (read, register, tag); jobs are independent,
	// so they go out side by side, results kept in decision order.
	perJob := make([][]cluster.PinResult, len(order))
	parallel.For(len(order), b.cfg.Parallel, func(i int) {
		jp := byJob[order[i]]
		perJob[i] = b.pinJob(ctx, jp.ns, jp.id, jp.ds, holders)
	})
	results := make([]cluster.PinResult, 0, len(decisions))
	for _, r := range perJob {
		results = append(results, r...)
	}
	return results, ctx.Err()
}

func (b *Backend) pinJob(ctx context.Context, ns, id string, ds []cluster.Decision, holders map[string][]*allocRec) []cluster.PinResult {
	fail := func(conflict bool, err error) []cluster.PinResult {
		out := make([]cluster.PinResult, len(ds))
		for i, d := range ds {
			out[i] = cluster.PinResult{JobKey: d.JobKey(), Conflict: conflict, Err: err}
		}
		return out
	}
	b.mu.Lock()
	want := uint64(0)
	for _, d := range ds {
		if p, ok := b.pending[d.JobKey()]; ok {
			want = p.JobModifyIndex
		}
	}
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
	// The job as the events left it is the one decided on when its JobModifyIndex is the
	// snapshot's: the register below enforces that index, so reading the job again first
	// would only cost a round trip per pin. Otherwise (or when unknown) read it.
	var job *api.Job
	if jr, ok := b.jobs[jobKey(ns, id)]; ok && want != 0 && deref(jr.job.JobModifyIndex, 0) == want {
		job = jr.job
	}
	b.mu.Unlock()
	if job == nil {
		q := (&api.QueryOptions{Namespace: ns}).WithContext(ctx)
		var err error
		job, _, err = b.c.Jobs().Info(id, q)
		if err != nil {
			if statusCode(err) == 404 {
				b.dropJob(ns, id)
				return fail(false, fmt.Errorf("pin %s/%s: %w", ns, id, ErrJobGone))
			}
			return fail(false, fmt.Errorf("pin %s/%s: read job: %w", ns, id, err))
		}
		b.storeJob(job)
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
	version := deref(job.Version, 0)
	wq := (&api.WriteOptions{Namespace: ns}).WithContext(ctx)
	resp, _, err := b.c.Jobs().RegisterOpts(newJob, &api.RegisterOptions{EnforceIndex: true, ModifyIndex: cur, PreserveCounts: true}, wq)
	if err != nil {
		if isConflict(err) {
			return fail(true, fmt.Errorf("pin %s/%s: %w", ns, id, err))
		}
		if statusCode(err) == 404 || strings.Contains(err.Error(), "job does not exist") {
			// Purged since the snapshot: Nomad refuses the enforced register so.
			b.dropJob(ns, id)
			return fail(false, fmt.Errorf("pin %s/%s: %w", ns, id, ErrJobGone))
		}
		return fail(false, fmt.Errorf("pin %s/%s: register: %w", ns, id, err))
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
	tagName := fmt.Sprintf("hetgpu-pin-%d", resp.JobModifyIndex)
	desc := "hetgpu pinned " + strings.Join(tagParts, "; ")
	if len(desc) > 200 {
		desc = desc[:200]
	}
	if _, err := b.c.Jobs().TagVersion(id, nv, tagName, desc, wq); err != nil {
		b.log.Warn("tagging the pinned job version failed; the pin stands", "job", jobKey(ns, id), "version", nv, "error", err)
	}
	out := make([]cluster.PinResult, len(ds))
	for i, d := range ds {
		out[i] = cluster.PinResult{JobKey: d.JobKey(), Applied: true}
	}
	return out
}

func (b *Backend) explainURL(ns, id string) string {
	if b.cfg.ExplainBaseURL == "" {
		return ""
	}
	u := strings.TrimRight(b.cfg.ExplainBaseURL, "/") + "/v1/jobs/" + url.PathEscape(ns) + "/" + url.PathEscape(id) + "/explain?format=html"
	if b.cfg.SignExplain != nil {
		u += "&" + b.cfg.SignExplain(ns, id)
	}
	return u
}

func nodeNames(as []cluster.Assignment, nodes map[string]cluster.Node) string {
	var names []string
	for _, a := range as {
		n := a.NodeID
		if nd, ok := nodes[a.NodeID]; ok && nd.Name != "" {
			n = nd.Name
		}
		names = append(names, n)
	}
	return strings.Join(names, "+")
}

// DecisionLine formats a decision for the job's ui description.
func DecisionLine(d *cluster.Decision, nodes map[string]cluster.Node, explain string) string {
	var parts []string
	for _, a := range d.Assign {
		n := nodes[a.NodeID]
		name := n.Name
		if name == "" {
			name = a.NodeID
		}
		model := a.DeviceGroup
		for _, g := range n.Devices {
			if g.ID() == a.DeviceGroup {
				model = g.Name
			}
		}
		ids := append([]string(nil), a.InstanceIDs...)
		sort.Strings(ids)
		parts = append(parts, fmt.Sprintf("**%s** (`%s`): %d× %s {%s}", name, shortID(a.NodeID), len(ids), model, strings.Join(ids, ", ")))
	}
	s := "pinned to " + strings.Join(parts, "; ")
	if d.PredThroughput > 0 {
		s += fmt.Sprintf("; predicted %.4g steps/s", d.PredThroughput)
		if d.PredPowerW > 0 {
			s += fmt.Sprintf(" at %.0f W (%.3g J/step)", d.PredPowerW, d.PredPowerW/d.PredThroughput)
		}
	}
	s += fmt.Sprintf("; score %.4g, rank %d", d.Score, d.Rank)
	if d.Shared {
		s += "; shares its GPUs"
	}
	if explain != "" {
		s += fmt.Sprintf(" · [why](%s)", explain)
	}
	return GroupLine(d.Group, s)
}

func shortID(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}

func statusCode(err error) int {
	var ure api.UnexpectedResponseError
	if errors.As(err, &ure) && ure.HasStatusCode() {
		return ure.StatusCode()
	}
	var p *api.UnexpectedResponseError
	if errors.As(err, &p) && p != nil && p.HasStatusCode() {
		return p.StatusCode()
	}
	s := err.Error()
	switch {
	case strings.Contains(s, "404") || strings.Contains(s, "not found"):
		return 404
	}
	return 0
}

func isConflict(err error) bool {
	s := err.Error()
	return strings.Contains(s, "conflicting job modify index") || strings.Contains(s, "job already exists")
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
	}
	b.jobs[k] = &jobRec{job: job, firstSubmit: submit}
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

var _ service.Backend = (*Backend)(nil)
