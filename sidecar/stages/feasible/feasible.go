// Package feasible tells a pending task group that can never run on the cluster apart from
// one that only waits. It checks the group's request with Nomad's constraint semantics
// (model/constraint) against every ready node, draining and ineligible ones too, with all
// their healthy GPUs free, and names the requirement that rules the group out ("needs 16 GPUs
// of one type on one node; the largest node has 8 V100"). The same check on the nodes open to
// new work and the GPUs free now tells "waits for capacity" from "waits behind higher-ranked
// jobs". It is the one place that answers these questions; the service asks it every round,
// so a group is re-checked whenever nodes join or change.
package feasible

import (
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/hetgpu/hetgpu/model/cluster"
	"github.com/hetgpu/hetgpu/model/constraint"
	"github.com/hetgpu/hetgpu/sidecar/sched"
)

// Kind says why a pending group was not placed.
type Kind string

const (
	// Infeasible: the group can never run on the current cluster.
	Infeasible Kind = cluster.WaitInfeasible
	// Capacity: it fits the cluster but not the GPUs free now.
	Capacity Kind = cluster.WaitCapacity
	// Behind: it fits the GPUs free now; jobs ranked ahead were placed first.
	Behind Kind = cluster.WaitBehind
	// Invalid: its request is malformed or cannot be evaluated.
	Invalid Kind = cluster.WaitInvalid
)

// View selects the capacity a check counts.
type View int

const (
	// Ever counts every ready node (draining or ineligible ones too) with all its healthy GPUs
	// free: what the cluster could ever give the group as it stands.
	Ever View = iota
	// Now counts the nodes open to new work and the healthy GPUs no running allocation holds.
	Now
)

// Verdict is the answer of a check.
type Verdict struct {
	// Fits is true when the group can be placed in the view.
	Fits bool
	// Invalid marks a request that is malformed or cannot be evaluated (Reason says why).
	Invalid bool
	// NoNodes marks a view without any node with devices to judge by (a cluster starting up,
	// device plugins not fingerprinted yet, every node down): the group waits, it is not
	// judged infeasible.
	NoNodes bool
	// Reason names the requirement that rules the group out; empty when it fits.
	Reason string
}

// Kind classifies an Ever-view verdict: Infeasible, Invalid, or "" for a group that may run
// (a view without nodes is not a verdict on the group).
func (v Verdict) Kind() Kind {
	switch {
	case v.Invalid:
		return Invalid
	case v.Fits || v.NoNodes:
		return ""
	}
	return Infeasible
}

// Options are the placement rules the check follows besides the constraints.
type Options struct {
	// MinThroughput rules out GPU types predicted below the group's T_min
	// (hetgpu.min_throughput), as a placer that honours T_min does. The prediction is taken
	// at its best (one node, no cross-node or PCIe penalty), so a group reported infeasible
	// for T_min is so for every placement.
	MinThroughput bool
}

// Check answers whether job can be placed on snap in the view.
func Check(snap *cluster.Snapshot, job *cluster.Job, view View, pred sched.Predictor, opts Options) Verdict {
	req, err := compile(nil, job)
	if err != nil {
		return Verdict{Invalid: true, Reason: err.Error()}
	}
	return req.judge(capacityOf(snap, req, view), job, view, pred, opts)
}

// request is a job's placement request, compiled.
type request struct {
	job *cluster.Job
	cj  *constraint.Job
	// g GPUs in all; exactly p on each node (0: any split); on at most k nodes.
	g, p, k int
	sig     string
}

// compile validates a job's request as the placer does and compiles its constraints (read
// from the round's state rs; nil compiles afresh).
func compile(rs *sched.RoundState, j *cluster.Job) (*request, error) {
	r := &request{job: j, g: j.GPUs, k: j.MaxNodes(), sig: signature(j)}
	if j.GPUs < 1 {
		return nil, fmt.Errorf("requests %d GPUs; expected at least 1", j.GPUs)
	}
	if p := j.GPUsPerNode; p != 0 {
		if p < 0 || j.GPUs%p != 0 {
			return nil, fmt.Errorf("%d GPUs cannot be split into allocations of %d GPUs each", j.GPUs, p)
		}
		nodes := j.GPUs / p
		if j.Hetgpu.MaxNodes > 0 && nodes > j.Hetgpu.MaxNodes {
			return nil, fmt.Errorf("%d GPUs at %d per node need %d nodes, but hetgpu.max_nodes = %d", j.GPUs, p, nodes, j.Hetgpu.MaxNodes)
		}
		r.p, r.k = p, nodes
	}
	if t := j.Hetgpu.MinThroughput; t < 0 || math.IsNaN(t) {
		return nil, fmt.Errorf("hetgpu.min_throughput = %v; expected a number >= 0", t)
	}
	cj, err := rs.Compiled(j)
	if err != nil {
		return nil, err
	}
	r.cj = cj
	return r, nil
}

// signature is everything of a job that compile and capacityOf look at: jobs with the same
// signature get the same request and capacity.
func signature(j *cluster.Job) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s|%d|%d|%d|%t|", j.DeviceName, j.GPUs, j.GPUsPerNode, j.Hetgpu.MaxNodes,
		j.Hetgpu.MinThroughput < 0 || math.IsNaN(j.Hetgpu.MinThroughput))
	distinct := false
	for _, c := range j.Constraints {
		b.WriteString(c.String() + "\x00")
		distinct = distinct || c.Operand == constraint.OpDistinctHosts
	}
	b.WriteString("|")
	for _, c := range j.DeviceConstraints {
		b.WriteString(c.String() + "\x00")
	}
	if distinct {
		// distinct_hosts depends on the job's own allocations (Now view).
		b.WriteString("|" + j.WholeKey())
	}
	return b.String()
}

// capacity is what a request can get in a view: per GPU type, the usable GPUs of each
// admitted node, most first. A device request is served by one device group of a node, so
// a node counts with its largest usable group of each type.
type capacity struct {
	// reason is set when no GPU passes the request's constraints; noNodes when the view has
	// no node at all.
	reason  string
	noNodes bool
	byType  map[string][]int
}

// open reports whether a node counts in the view.
func open(n *cluster.Node, view View) bool {
	if view == Now {
		return n.Ready()
	}
	return n.Status == "ready"
}

// capacityOf counts what req can get on snap; the Now view leaves out the instances running
// allocations hold (the snapshot's free-capacity index).
func capacityOf(snap *cluster.Snapshot, req *request, view View) *capacity {
	var free *cluster.FreeIndex
	if view == Now {
		free = snap.Free()
	}
	j, cj := req.job, req.cj
	var own map[string]bool
	if view == Now && cj.Distinct {
		own = map[string]bool{}
		for _, a := range snap.Running {
			if a.Namespace == j.Namespace && a.JobID == j.ID {
				own[a.NodeID] = true
			}
		}
	}
	c := &capacity{byType: map[string][]int{}}
	nodePass := make([]int, len(cj.Nodes))
	devPass := make([]int, len(cj.Devices))
	considered, admitted, matching, groupsOK := 0, 0, 0, 0
	for i := range snap.Nodes {
		n := &snap.Nodes[i]
		// A node without devices can host no GPU group; one whose device plugin has not
		// fingerprinted yet must not make a group look infeasible.
		if !open(n, view) || len(n.Devices) == 0 {
			continue
		}
		considered++
		for ci, nc := range cj.Nodes {
			if nc.Check(n) {
				nodePass[ci]++
			}
		}
		if !admits(cj, n, own) {
			continue
		}
		admitted++
		best := map[string]int{}
		for gi := range n.Devices {
			g := &n.Devices[gi]
			if !constraint.MatchesRequest(j.DeviceName, g) {
				continue
			}
			matching++
			for di, dc := range cj.Devices {
				if dc.Check(g) {
					devPass[di]++
				}
			}
			if !cj.GroupFeasible(g) {
				continue
			}
			groupsOK++
			usable := 0
			for _, in := range g.Instances {
				if in.Healthy && (free == nil || free.Holders(n.ID, in.ID) == 0) && cj.InstanceAllowed(g, in.ID) {
					usable++
				}
			}
			t := g.TypeKey()
			best[t] = max(best[t], usable)
		}
		for t, u := range best {
			if u > 0 {
				c.byType[t] = append(c.byType[t], u)
			}
		}
	}
	for _, us := range c.byType {
		sort.Sort(sort.Reverse(sort.IntSlice(us)))
	}
	where := "ready node"
	if view == Now {
		where = "node open to new work"
	}
	switch {
	case considered == 0:
		c.noNodes = true
		c.reason = "no " + where + " with devices"
	case admitted == 0:
		c.reason = fmt.Sprintf("no %s satisfies all of its constraints together (%d checked)", where, considered)
		for ci, n := range nodePass {
			if n == 0 {
				c.reason = fmt.Sprintf("no %s satisfies the constraint `%s`", where, j.Constraints[ci])
				break
			}
		}
	case matching == 0:
		c.reason = fmt.Sprintf("no %s has a device matching %q", where, j.DeviceName)
		if admitted < considered {
			c.reason = fmt.Sprintf("no %s that satisfies its constraints has a device matching %q", where, j.DeviceName)
		}
	case groupsOK == 0:
		c.reason = fmt.Sprintf("no %q device on a %s satisfies all of its device constraints together", j.DeviceName, where)
		for di, n := range devPass {
			if n == 0 {
				c.reason = fmt.Sprintf("no %q device on a %s satisfies the device constraint `%s`", j.DeviceName, where, j.DeviceConstraints[di])
				break
			}
		}
	case len(c.byType) == 0 && view == Ever && cj.PinsInstances():
		c.reason = fmt.Sprintf("none of the GPUs its ${device.ids} constraint names is healthy on a %s", where)
	case len(c.byType) == 0 && view == Ever:
		c.reason = fmt.Sprintf("every matching GPU on a %s is unhealthy", where)
	case len(c.byType) == 0:
		c.reason = "no matching GPU is free"
	}
	return c
}

// admits checks node constraints, that distinct_property targets exist, and distinct_hosts
// against the job's running allocations (own, Now view only).
func admits(cj *constraint.Job, n *cluster.Node, own map[string]bool) bool {
	if !cj.NodeFeasible(n) {
		return false
	}
	for _, dp := range cj.DistinctBy {
		if _, ok := constraint.ResolveNode(dp.Target, n); !ok || dp.Limit < 1 {
			return false
		}
	}
	return !own[n.ID]
}

// fits reports whether per-node counts (most first) hold the request.
func (r *request) fits(us []int) bool { return r.job.FitsFree(us) }

// judge turns a capacity into a verdict: the GPU counts first, then T_min.
func (r *request) judge(c *capacity, job *cluster.Job, view View, pred sched.Predictor, opts Options) Verdict {
	if c.reason != "" {
		return Verdict{NoNodes: c.noNodes, Reason: c.reason}
	}
	types := make([]string, 0, len(c.byType))
	for t := range c.byType {
		types = append(types, t)
	}
	sort.Strings(types)
	var fitting []string
	for _, t := range types {
		if r.fits(c.byType[t]) {
			fitting = append(fitting, t)
		}
	}
	if len(fitting) == 0 {
		return Verdict{Reason: r.shortfall(c, types, view)}
	}
	tmin := job.Hetgpu.MinThroughput
	if !opts.MinThroughput || tmin <= 0 || pred == nil {
		return Verdict{Fits: true}
	}
	bestT, bestType := 0.0, ""
	for _, t := range fitting {
		thr := pred.Predict(job, t, r.g).Throughput
		if math.IsNaN(thr) || math.IsInf(thr, 0) {
			thr = 0
		}
		if thr >= tmin {
			return Verdict{Fits: true}
		}
		if bestType == "" || thr > bestT {
			bestT, bestType = thr, t
		}
	}
	return Verdict{Reason: fmt.Sprintf("needs %.4g steps/s (hetgpu.min_throughput); the fastest GPU type it fits, %s, is predicted at %.4g steps/s",
		tmin, strings.ToUpper(bestType), bestT)}
}

// types are the GPU types of c that hold the request alone and, where opts ask, meet its
// T_min, sorted.
func (r *request) types(c *capacity, job *cluster.Job, pred sched.Predictor, opts Options) []string {
	if c.reason != "" {
		return nil
	}
	var out []string
	tmin := job.Hetgpu.MinThroughput
	for t, us := range c.byType {
		if !r.fits(us) {
			continue
		}
		if opts.MinThroughput && tmin > 0 && pred != nil {
			if thr := pred.Predict(job, t, r.g).Throughput; !(thr >= tmin) || math.IsInf(thr, 0) {
				continue
			}
		}
		out = append(out, t)
	}
	sort.Strings(out)
	return out
}

// shortfall says how the GPU counts fall short, with the best the cluster offers.
func (r *request) shortfall(c *capacity, types []string, view View) string {
	free := ""
	if view == Now {
		free = " free"
	}
	switch {
	case r.p > 0:
		// The type with the most nodes that hold p; ties go to the larger node.
		bestN, bestT, largest, largestT := 0, "", 0, ""
		for _, t := range types {
			us := c.byType[t]
			n := sort.Search(len(us), func(i int) bool { return us[i] < r.p })
			if n > bestN || n == bestN && n > 0 && us[0] > c.byType[bestT][0] {
				bestN, bestT = n, t
			}
			if us[0] > largest {
				largest, largestT = us[0], t
			}
		}
		need := fmt.Sprintf("needs %d nodes with %d%s GPUs of one type", r.k, r.p, free)
		if bestN == 0 {
			return fmt.Sprintf("%s; no node has %d%s GPUs of one type (the most is %d %s)", need, r.p, free, largest, strings.ToUpper(largestT))
		}
		return fmt.Sprintf("%s; at most %d %s %d%s %s", need, bestN, plural(bestN, "node has", "nodes have"), r.p, free, strings.ToUpper(bestT))
	case r.k == 1:
		largest, largestT := 0, ""
		for _, t := range types {
			if us := c.byType[t]; us[0] > largest {
				largest, largestT = us[0], t
			}
		}
		if view == Now {
			return fmt.Sprintf("needs %d free GPUs of one type on one node; at most %d %s are free on one node", r.g, largest, strings.ToUpper(largestT))
		}
		return fmt.Sprintf("needs %d GPUs of one type on one node; the largest node has %d %s", r.g, largest, strings.ToUpper(largestT))
	}
	most, mostT, mostN := 0, "", 0
	for _, t := range types {
		us := c.byType[t]
		sum, n := 0, 0
		for i := 0; i < len(us) && i < r.k; i++ {
			sum += us[i]
			n++
		}
		if sum > most {
			most, mostT, mostN = sum, t, n
		}
	}
	return fmt.Sprintf("needs %d%s GPUs of one type on at most %d nodes; the most is %d %s on %d %s",
		r.g, free, r.k, most, strings.ToUpper(mostT), mostN, plural(mostN, "node", "nodes"))
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
