package queue

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/hetgpu/hetgpu/model/cluster"
	"github.com/hetgpu/hetgpu/sidecar/sched"
)

// Set is the configured queues at run time: the namespace mapping, the decayed usage and the
// per-round stage (Prepare, Order). It is safe for concurrent use.
type Set struct {
	cfg      Config
	specs    map[string]*Spec
	names    []string // every queue, parents first, then by name
	children map[string][]string
	nsQueue  map[string]string

	mu    sync.Mutex
	usage map[string]float64 // decayed GPU-hours per leaf queue
	last  time.Time
}

var _ sched.Queues = (*Set)(nil)

// New validates cfg (defaults applied) and returns the set; a default queue is added unless
// configured.
func New(cfg Config) (*Set, error) {
	cfg.Queues = slices.Clone(cfg.Queues)
	cfg.Defaults()
	if _, err := cfg.Validate(0); err != nil {
		return nil, err
	}
	s := &Set{cfg: cfg, specs: map[string]*Spec{}, children: map[string][]string{}, nsQueue: map[string]string{}, usage: map[string]float64{}}
	for i := range cfg.Queues {
		q := &s.cfg.Queues[i]
		s.specs[q.Name] = q
		for _, ns := range q.Namespaces {
			s.nsQueue[ns] = q.Name
		}
		if q.Parent != "" {
			s.children[q.Parent] = append(s.children[q.Parent], q.Name)
		}
	}
	if s.specs[DefaultQueue] == nil {
		d := Spec{Name: DefaultQueue, Weight: 1}
		s.cfg.Queues = append(s.cfg.Queues, d)
		s.specs[DefaultQueue] = &s.cfg.Queues[len(s.cfg.Queues)-1]
		for i := range s.cfg.Queues { // the append may have moved the specs
			s.specs[s.cfg.Queues[i].Name] = &s.cfg.Queues[i]
		}
	}
	for n := range s.specs {
		s.names = append(s.names, n)
	}
	sort.Slice(s.names, func(a, b int) bool {
		pa, pb := s.specs[s.names[a]].Parent == "", s.specs[s.names[b]].Parent == ""
		if pa != pb {
			return pa
		}
		return s.names[a] < s.names[b]
	})
	return s, nil
}

// Config returns the configuration (defaults applied, the default queue included).
func (s *Set) Config() Config {
	c := s.cfg
	c.Queues = slices.Clone(c.Queues)
	return c
}

// QueueOf is the leaf queue of a namespace.
func (s *Set) QueueOf(ns string) string {
	if q, ok := s.nsQueue[ns]; ok {
		return q
	}
	return DefaultQueue
}

// leaf reports whether a queue takes jobs (has no children).
func (s *Set) leaf(q string) bool { return len(s.children[q]) == 0 }

// namespaces of a queue: its own, or its children's for a parent. The default queue has none
// listed: its cap is "every namespace no other queue lists" (Except).
func (s *Set) namespaces(q string) (ns []string, except bool) {
	if q == DefaultQueue {
		for n := range s.nsQueue {
			ns = append(ns, n)
		}
		sort.Strings(ns)
		return ns, true
	}
	if kids := s.children[q]; len(kids) > 0 {
		for _, k := range kids {
			ns = append(ns, s.specs[k].Namespaces...)
		}
		sort.Strings(ns)
		return ns, false
	}
	return slices.Clone(s.specs[q].Namespaces), false
}

// Total is the queue's guarantee in GPUs of any type: the larger of guarantee and the sum
// of its guarantees by type.
func (q *Spec) Total() int { return guarantee(q) }

func guarantee(q *Spec) int {
	n := 0
	for _, v := range q.GuaranteeByType {
		n += v
	}
	return max(q.Guarantee, n)
}

// observe decays the usage to snap.Now and adds the GPU-hours of the running allocations
// since the last observation (assumed to have run the whole interval: the integral of the
// decay over it). Time only moves forward: an older snapshot adds nothing.
func (s *Set) observe(snap *cluster.Snapshot) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.last.IsZero() || !snap.Now.After(s.last) {
		if s.last.IsZero() {
			s.last = snap.Now
		}
		return
	}
	dt := snap.Now.Sub(s.last).Hours()
	h := s.cfg.HalfLife.Hours()
	decay := math.Exp2(-dt / h)
	// Integral over [0, dt] of 2^(-(dt-t)/h) dt: GPU-hours earned now decay like older ones.
	earned := h / math.Ln2 * (1 - decay)
	gpus := map[string]int{}
	for _, a := range snap.Running {
		gpus[s.QueueOf(a.Namespace)] += len(a.DeviceIDs)
	}
	for q := range s.usage {
		s.usage[q] *= decay
	}
	for q, n := range gpus {
		s.usage[q] += float64(n) * earned
	}
	s.last = snap.Now
}

// round is what one snapshot says of every queue.
type round struct {
	used, pendingJobs, pendingGPUs map[string]int
	// pending lists the GPUs of each leaf queue's waiting jobs.
	pending                  map[string][]int
	usedByType               map[string]map[string]int
	gpuHours, share, entitle map[string]float64
	// relocated are the GPUs of each leaf queue's waiting jobs that were stopped this round to
	// move within its guarantee (cluster.Tenancy.Relocated).
	relocated map[string]int
	// free and healthy count the GPUs of ready nodes, per type too.
	free, healthy         int
	freeByType, byTypeAll map[string]int
}

func (s *Set) measure(snap *cluster.Snapshot) *round {
	r := &round{used: map[string]int{}, pendingJobs: map[string]int{}, pendingGPUs: map[string]int{}, pending: map[string][]int{},
		usedByType: map[string]map[string]int{}, gpuHours: map[string]float64{}, share: map[string]float64{},
		entitle: map[string]float64{}, freeByType: map[string]int{}, byTypeAll: map[string]int{}, relocated: map[string]int{}}
	ready := map[string]bool{}
	for i := range snap.Nodes {
		n := &snap.Nodes[i]
		if !n.Ready() {
			continue
		}
		ready[n.ID] = true
		for _, g := range n.Devices {
			h := g.Healthy()
			r.healthy += h
			r.byTypeAll[g.GPUType] += h
		}
	}
	busy, busyByType := 0, map[string]int{}
	for _, a := range snap.Running {
		q := s.QueueOf(a.Namespace)
		for _, p := range []string{q, s.specs[q].Parent} {
			if p == "" {
				continue
			}
			r.used[p] += len(a.DeviceIDs)
			if r.usedByType[p] == nil {
				r.usedByType[p] = map[string]int{}
			}
			r.usedByType[p][a.GPUType] += len(a.DeviceIDs)
		}
		if ready[a.NodeID] {
			busy += len(a.DeviceIDs)
			busyByType[a.GPUType] += len(a.DeviceIDs)
		}
	}
	r.free = max(r.healthy-busy, 0)
	for t, n := range r.byTypeAll {
		r.freeByType[t] = max(n-busyByType[t], 0)
	}
	for i := range snap.Pending {
		j := &snap.Pending[i]
		q := s.QueueOf(j.Namespace)
		r.pending[q] = append(r.pending[q], j.GPUs)
		for _, p := range []string{q, s.specs[q].Parent} {
			if p != "" {
				r.pendingJobs[p]++
				r.pendingGPUs[p] += j.GPUs
			}
		}
	}
	s.mu.Lock()
	total := 0.0
	for q, u := range s.usage {
		r.gpuHours[q] = u
		if p := s.specs[q].Parent; p != "" {
			r.gpuHours[p] += u
		}
		total += u
	}
	s.mu.Unlock()
	// Entitlements: weights normalised among the queues with usage or work (a queue nobody
	// uses does not dilute the others), a child's within its parent's.
	active := func(q string) bool { return r.gpuHours[q] > 1e-9 || r.used[q] > 0 || r.pendingJobs[q] > 0 }
	var top []string
	for _, q := range s.names {
		if s.specs[q].Parent == "" && active(q) {
			top = append(top, q)
		}
	}
	sumW := 0.0
	for _, q := range top {
		sumW += s.specs[q].Weight
	}
	for _, q := range top {
		r.entitle[q] = s.specs[q].Weight / sumW
		kidsW := 0.0
		for _, k := range s.children[q] {
			if active(k) {
				kidsW += s.specs[k].Weight
			}
		}
		for _, k := range s.children[q] {
			if active(k) {
				r.entitle[k] = r.entitle[q] * s.specs[k].Weight / kidsW
			}
		}
	}
	for _, q := range s.names {
		if total > 0 && r.entitle[q] > 0 {
			r.share[q] = r.gpuHours[q] / total / r.entitle[q]
		}
	}
	return r
}

// Admitted is what a guarantee g admits of waiting jobs (their GPUs) when used GPUs are held:
// the GPUs of the jobs that would not take the queue above g by themselves. A queue whose
// waiting jobs are all larger than what its guarantee has left is not owed them: they start
// on borrowed GPUs, as any job beyond a guarantee does (Kueue's nominal quota works so).
func Admitted(pending []int, used, g int) int {
	n := 0
	for _, p := range pending {
		if used+p <= g {
			n += p
		}
	}
	return n
}

// withinGuarantee reports whether gpus more GPUs fit what queue q's guarantee (in all, or of a
// type) has left.
func (r *round) withinGuarantee(q *Spec, gpus int) bool {
	if r.used[q.Name]+gpus <= guarantee(q) {
		return true
	}
	for t, n := range q.GuaranteeByType {
		if r.usedByType[q.Name][t]+gpus <= n {
			return true
		}
	}
	return false
}

// belowGuarantee reports whether a queue holds less than its guarantee, in all or of a type.
func (r *round) belowGuarantee(q *Spec) bool {
	if r.used[q.Name] < guarantee(q) {
		return true
	}
	for t, n := range q.GuaranteeByType {
		if r.usedByType[q.Name][t] < n {
			return true
		}
	}
	return false
}

// Prepare is the queue stage's start of a round: it accounts usage up to snap.Now and returns
// the snapshot the round works on, with this round's caps (replacing any) and its Tenancy:
// the preemptible jobs that are not borrowed (see Reclaimable) are marked guaranteed, and the
// preemption planner stops those only for jobs of their own queue. snap itself is not
// modified. The pipeline calls it again once preemptions freed GPUs, so that the reserves see
// them.
func (s *Set) Prepare(snap *cluster.Snapshot) *cluster.Snapshot {
	s.observe(snap)
	r := s.measure(snap)
	out := *snap
	// Jobs the preemption planner moved within their queue's guarantee (a second Prepare, after
	// the preemptions) keep their standing: the reserve holds GPUs for them and Order puts them
	// first.
	var moved map[string]bool
	if snap.Tenancy != nil && len(snap.Tenancy.Relocated) > 0 {
		moved = map[string]bool{}
		for i := range snap.Pending {
			if j := &snap.Pending[i]; snap.Tenancy.Relocated[j.Key()] {
				moved[j.Key()] = true
				r.relocated[s.QueueOf(j.Namespace)] += j.GPUs
			}
		}
	}
	var owed map[string]int
	out.Caps, owed = s.caps(r) // a second Prepare (after preemptions) replaces the first's caps
	t := &cluster.Tenancy{Queue: s.nsQueue, DefaultQueue: DefaultQueue, Guaranteed: map[string]bool{}, Owed: owed, Relocated: moved}
	borrowed := map[string]bool{}
	for _, j := range s.reclaimable(snap, r) {
		borrowed[j.Key()] = true
	}
	// A gang is stopped whole: one guaranteed member protects all of it.
	guardedGang := map[string]bool{}
	for _, j := range snap.Preemptible {
		if !borrowed[j.Key()] {
			t.Guaranteed[j.Key()] = true
			guardedGang[sched.GangKey(&j)] = true
		}
	}
	for _, j := range snap.Preemptible {
		if g := sched.GangKey(&j); g != "" && guardedGang[g] {
			t.Guaranteed[j.Key()] = true
		}
	}
	out.Tenancy = t
	return &out
}

// caps are a round's limits: every queue's maximum, and one reserve for the leaf queues below
// their guarantee with pending work their guarantee admits (see Admitted): the idle GPUs they
// are owed together, which jobs of the other queues may not take. Queues that are owed compete
// among themselves by the order (their admitted jobs come first), so one owed queue's reserve
// never blocks another's. The same per GPU type for guarantees by type.
func (s *Set) caps(r *round) ([]cluster.GPUCap, map[string]int) {
	var out []cluster.GPUCap
	for _, q := range s.names {
		sp := s.specs[q]
		if sp.Max > 0 {
			ns, except := s.namespaces(q)
			out = append(out, cluster.GPUCap{Name: "queue " + q, Namespaces: ns, Except: except, GPUs: sp.Max,
				Reason: fmt.Sprintf("queue %s is at its maximum of %d GPUs", q, sp.Max)})
		}
	}
	// owedOf is what leaf q is owed of GPU type typ ("" all) given its guarantee g and use.
	owedOf := func(q string, g, used int) int {
		if g <= used || r.pendingJobs[q] == 0 {
			return 0
		}
		return min(g-used, Admitted(r.pending[q], used, g))
	}
	reserve := func(typ string, free int, owed map[string]int, usedOf func(q string) int) {
		total := 0
		var names []string
		for _, q := range s.names {
			if owed[q] > 0 {
				total += owed[q]
				names = append(names, q)
			}
		}
		if total == 0 || free == 0 {
			return
		}
		// The cap covers every queue not owed: the default queue's namespaces are those no
		// queue lists, so when it is not owed the cap lists the owed queues' and excludes them.
		others, run := 0, 0
		var listed []string
		defaultOwed := owed[DefaultQueue] > 0
		for _, q := range s.names {
			if !s.leaf(q) {
				continue
			}
			if owed[q] == 0 {
				run += usedOf(q)
				others++
			}
			if q != DefaultQueue && (owed[q] > 0) != defaultOwed {
				listed = append(listed, s.specs[q].Namespaces...)
			}
		}
		if others == 0 {
			return
		}
		sort.Strings(listed)
		what := "GPUs"
		if typ != "" {
			what = typ + " GPUs"
		}
		out = append(out, cluster.GPUCap{Name: "guarantees of queue " + strings.Join(names, ", "), Namespaces: listed, Except: !defaultOwed,
			GPUType: typ, GPUs: run + max(free-total, 0),
			Reason: fmt.Sprintf("idle %s are held for %s %s, below %s", what, plural(len(names), "queue", "queues"), strings.Join(names, ", "),
				plural(len(names), "its guarantee", "their guarantees"))})
	}
	owed := map[string]int{}
	for _, q := range s.names {
		if s.leaf(q) {
			owed[q] = max(owedOf(q, guarantee(s.specs[q]), r.used[q]), r.relocated[q])
		}
	}
	reserve("", r.free, owed, func(q string) int { return r.used[q] })
	var types []string
	for _, q := range s.names {
		for t := range s.specs[q].GuaranteeByType {
			if !slices.Contains(types, t) {
				types = append(types, t)
			}
		}
	}
	sort.Strings(types)
	for _, t := range types {
		owedT := map[string]int{}
		for _, q := range s.names {
			if g, ok := s.specs[q].GuaranteeByType[t]; ok && s.leaf(q) {
				owedT[q] = owedOf(q, g, r.usedByType[q][t])
			}
		}
		reserve(t, r.freeByType[t], owedT, func(q string) int { return r.usedByType[q][t] })
		for q, n := range owedT {
			owed[q] += n
		}
	}
	for q, n := range owed {
		if n == 0 {
			delete(owed, q)
		}
	}
	return out, owed
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// Reclaimable returns snap's preemptible jobs that are borrowed (see reclaimable).
func (s *Set) Reclaimable(snap *cluster.Snapshot) []cluster.Job {
	return s.reclaimable(snap, s.measure(snap))
}

// reclaimable keeps the preemptible jobs that run on borrowed GPUs: those whose queue's jobs
// that may not be stopped, and then its jobs that started before them, already fill its
// guarantee. Jobs within their queue's guarantee are never preempted.
func (s *Set) reclaimable(snap *cluster.Snapshot, r *round) []cluster.Job {
	if len(snap.Preemptible) == 0 {
		return snap.Preemptible
	}
	type group struct {
		key         string
		gpus        int
		start       time.Time
		preemptible bool
	}
	pre := map[string]bool{}
	for i := range snap.Preemptible {
		pre[snap.Preemptible[i].Key()] = true
	}
	// Allocations of groups that wait again (preempted or re-held, still stopping) are on
	// their way out: they fill no guarantee.
	leaving := map[string]bool{}
	for i := range snap.Pending {
		leaving[snap.Pending[i].Key()] = true
	}
	byKey := map[string]*group{}
	byQueue := map[string][]*group{}
	for _, a := range snap.Running {
		k := a.Key()
		if leaving[k] {
			continue
		}
		g := byKey[k]
		if g == nil {
			g = &group{key: k, start: a.StartTime, preemptible: pre[k]}
			byKey[k] = g
			q := s.QueueOf(a.Namespace)
			byQueue[q] = append(byQueue[q], g)
		}
		g.gpus += len(a.DeviceIDs)
		if a.StartTime.Before(g.start) {
			g.start = a.StartTime
		}
		if g.start.IsZero() {
			g.start = snap.Now // not started yet: the newest
		}
	}
	borrowed := map[string]bool{}
	for q, gs := range byQueue {
		sort.Slice(gs, func(a, b int) bool {
			if gs[a].preemptible != gs[b].preemptible {
				return !gs[a].preemptible
			}
			if !gs[a].start.Equal(gs[b].start) {
				return gs[a].start.Before(gs[b].start)
			}
			return gs[a].key < gs[b].key
		})
		g := guarantee(s.specs[q])
		held := 0
		for _, x := range gs {
			if x.preemptible && held >= g {
				borrowed[x.key] = true
			}
			held += x.gpus
		}
	}
	out := make([]cluster.Job, 0, len(snap.Preemptible))
	for _, j := range snap.Preemptible {
		if borrowed[j.Key()] {
			out = append(out, j)
		}
	}
	return out
}

// Order implements the fair-share step on the ranker's order (learned or heuristic alike):
//
//  1. waiting jobs that fit what their queue's guarantee has left (in all or of a GPU type),
//     taken in the ranker's order until the guarantee is filled, come first, led by the jobs
//     moved within their queue's guarantee this round (cluster.Tenancy.Relocated); a job
//     that fits no node's free and borrowed GPUs (nodeRoom) leaves that room to the next,
//     unless none of its queue's jobs fits: then the first of them that the cluster could
//     hold at all is in tier 0 all the same (the preemption planner may relocate other
//     queues' guaranteed jobs for it);
//  2. jobs that do not fit under their queue's (or parent's) maximum come last;
//  3. within each of these tiers, a job at 0-based position p of the ranker's order takes
//     position p x f (shareFactor), f = 2^((share-1)/2) clamped to [1/sqrt 2, sqrt 2], where
//     share is its queue's decayed GPU-hours over all queues' divided by its entitlement (its
//     weight normalised among the queues with usage or work, a child's within its parent's):
//     a queue that got its fair share (1) keeps the ranker's order, one that got nothing moves
//     its jobs to 0.71 of their position, one that got twice its share or more to 1.41 times
//     (ties keep the ranker's order).
//
// A tier-0 job keeps its position in the ranker's order as RankerPos (unless an earlier Order
// of the round set it): the placement chooses its GPUs with the priority of that position, so
// it is placed first (its queue is owed GPUs) but does not take the fastest GPUs from
// better-ranked jobs. With the priority of the front of the order, small long jobs of owed
// queues took the H100 and A100 nodes of modern-mix one GPU at a time and its 8-GPU jobs
// waited for whole nodes (philly-tenants-2k, auto:0.5: +19.2 % average JCT over the run
// without queues, -0.8 % with this; README, Queues).
func (s *Set) Order(st *sched.RoundState, snap *cluster.Snapshot, ranked []sched.Ranked) []sched.Ranked {
	if len(ranked) < 2 {
		return ranked
	}
	r := s.measure(snap)
	type key struct {
		tier int
		pos  float64
		i    int
	}
	pending := make(map[string]bool, len(snap.Pending))
	for i := range snap.Pending {
		pending[snap.Pending[i].Key()] = true
	}
	// taken is what each queue's guarantee has given tier 0 so far, in the ranker's order, after
	// the jobs moved within it this round (they lead tier 0: their queue held their GPUs).
	taken := map[string]int{}
	var moved map[string]bool
	if snap.Tenancy != nil {
		moved = snap.Tenancy.Relocated
	}
	for _, rk := range ranked {
		if k := rk.Job.Key(); moved[k] && pending[k] {
			taken[s.QueueOf(rk.Job.Namespace)] += rk.Job.GPUs
		}
	}
	room := newNodeRoom(st, snap, s.reclaimable(snap, r))
	// capacity is every healthy GPU of the ready nodes, as if none ran: the last resort below
	// goes only to a job that some node set could hold at all, not to one asking for a GPU
	// type or count the cluster lacks.
	var capRoom *nodeRoom
	capacity := func() *nodeRoom {
		if capRoom == nil {
			capRoom = newNodeRoom(st, &cluster.Snapshot{Now: snap.Now, Nodes: snap.Nodes}, nil)
		}
		return capRoom
	}
	keys := make([]key, len(ranked))
	missed := map[string]int{}
	for i, rk := range ranked {
		q := s.QueueOf(rk.Job.Namespace)
		sp := s.specs[q]
		tier, pos := 1, float64(i)*shareFactor(r.share[q])
		switch k := rk.Job.Key(); {
		case moved[k] && pending[k]:
			tier, pos = 0, -1
		case pending[k] && r.withinGuarantee(sp, taken[q]+rk.Job.GPUs):
			if room.claim(rk.Job) {
				tier = 0
				taken[q] += rk.Job.GPUs
			} else if _, ok := missed[q]; !ok && capacity().fits(rk.Job) {
				missed[q] = i
			}
		}
		for _, p := range []string{q, sp.Parent} {
			if p == "" {
				continue
			}
			if m := s.specs[p].Max; m > 0 && r.used[p]+rk.Job.GPUs > m {
				tier = 2
			}
		}
		keys[i] = key{tier, pos, i}
	}
	// Last resort: a queue none of whose admitted jobs fits a node's room would otherwise wait
	// in tier 1 until some node clears by itself; its first admitted job that the cluster could
	// hold at all leads the order, where the preemption planner may still relocate other
	// queues' guaranteed jobs for it.
	for q, i := range missed {
		if taken[q] == 0 && keys[i].tier == 1 {
			keys[i].tier = 0
		}
	}
	idx := make([]int, len(ranked))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool {
		ka, kb := keys[idx[a]], keys[idx[b]]
		if ka.tier != kb.tier {
			return ka.tier < kb.tier
		}
		if ka.pos != kb.pos {
			return ka.pos < kb.pos
		}
		return ka.i < kb.i
	})
	out := make([]sched.Ranked, len(ranked))
	for k, i := range idx {
		out[k] = ranked[i]
		if keys[i].tier == 0 && out[k].RankerPos == 0 {
			out[k].RankerPos = i + 1
		}
	}
	return out
}

// shareFactor scales a job's position in the ranker's order by its queue's fair share: light,
// so that fair share reorders jobs of similar size (and breaks ties) but does not undo the
// ranker's shortest-first order beyond the guarantees. On the overloaded Philly trace
// (philly-tenants-2k) the earlier 2^(share-1) in [1/4, 4] moved short jobs of busy queues
// behind long jobs of idle ones and cost 4 to 16 points of average JCT (README, Queues).
func shareFactor(share float64) float64 {
	return math.Exp2(math.Max(-0.5, math.Min(0.5, (share-1)/2)))
}

// Status is one queue as GET /v1/queues shows it.
type Status struct {
	Name            string         `json:"name"`
	Parent          string         `json:"parent,omitempty"`
	Namespaces      []string       `json:"namespaces,omitempty"`
	Weight          float64        `json:"weight"`
	Guarantee       int            `json:"guarantee"`
	GuaranteeByType map[string]int `json:"guarantee_by_type,omitempty"`
	Max             int            `json:"max"`
	// UsageGPUs is what its running allocations hold now; BorrowedGPUs what of that is beyond
	// its guarantee.
	UsageGPUs      int            `json:"usage_gpus"`
	UsageByType    map[string]int `json:"usage_by_type,omitempty"`
	BorrowedGPUs   int            `json:"borrowed_gpus"`
	PendingJobs    int            `json:"pending_jobs"`
	PendingGPUs    int            `json:"pending_gpus"`
	GPUHours       float64        `json:"decayed_gpu_hours"`
	Entitlement    float64        `json:"entitlement"`
	Share          float64        `json:"share"`
	BelowGuarantee bool           `json:"below_guarantee"`
}

// Status reports every queue (parents first) as of snap; it accounts nothing.
func (s *Set) Status(snap *cluster.Snapshot) []Status {
	r := s.measure(snap)
	out := make([]Status, 0, len(s.names))
	for _, q := range s.names {
		sp := s.specs[q]
		ns, _ := s.namespaces(q)
		if q == DefaultQueue {
			ns = nil
		}
		st := Status{Name: q, Parent: sp.Parent, Namespaces: ns, Weight: sp.Weight, Guarantee: sp.Guarantee,
			GuaranteeByType: sp.GuaranteeByType, Max: sp.Max, UsageGPUs: r.used[q], UsageByType: r.usedByType[q],
			BorrowedGPUs: max(r.used[q]-guarantee(sp), 0), PendingJobs: r.pendingJobs[q], PendingGPUs: r.pendingGPUs[q],
			GPUHours: r.gpuHours[q], Entitlement: r.entitle[q], Share: r.share[q], BelowGuarantee: r.belowGuarantee(sp)}
		out = append(out, st)
	}
	return out
}
