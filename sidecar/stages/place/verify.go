package place

import (
	"fmt"

	"github.com/hetgpu/hetgpu/model/cluster"
	"github.com/hetgpu/hetgpu/model/constraint"
	"github.com/hetgpu/hetgpu/sidecar/sched"
)

// Verify checks decisions against a snapshot independently of how they were found: every job
// is pending and decided once with exactly its GPUs, of one GPU type, on at most D_j ready
// nodes (exactly GPUsPerNode each when set), one device group per node; every instance exists,
// is healthy, and is free (or, for a shared decision, held only by jobs that share, fewer than
// cfg.MaxShare); no instance is given twice unless shared; node and device constraints,
// ${device.ids} pins, distinct_hosts and distinct_property hold; the predicted throughput
// meets T_min when cfg.HonorMinThroughput; namespace caps, node caps and tenant isolation hold.
// sched.Pipeline.RunRound runs it (Placer.Verify) before pinning, in the sidecar and the
// simulator, and pins nothing of a round it rejects; tests run it on every placement.
func Verify(snap *cluster.Snapshot, decisions []cluster.Decision, cfg Config) error {
	return verify(nil, snap, decisions, cfg)
}

// verify is Verify reading the jobs' compiled constraints from the round's state.
func verify(rs *sched.RoundState, snap *cluster.Snapshot, decisions []cluster.Decision, cfg Config) error {
	pending := map[string]*cluster.Job{}
	for i := range snap.Pending {
		pending[snap.Pending[i].Key()] = &snap.Pending[i]
	}
	nodes := map[string]*cluster.Node{}
	for i := range snap.Nodes {
		nodes[snap.Nodes[i].ID] = &snap.Nodes[i]
	}
	type instKey struct{ node, id string }
	// use is an instance's holders: how many, whether all share, and their namespace (mixed
	// once a second one holds it). No map per instance: Verify runs before every pin.
	type use struct {
		n      int
		shared bool
		ns     string
		mixed  bool
	}
	addNS := func(u *use, ns string) {
		if u.n == 1 {
			u.ns = ns
		} else if u.ns != ns {
			u.mixed = true
		}
	}
	// Only the instances some decision names can conflict: count the running holders of those.
	uses := map[instKey]*use{}
	for _, d := range decisions {
		for _, as := range d.Assign {
			for _, id := range as.InstanceIDs {
				uses[instKey{as.NodeID, id}] = nil
			}
		}
	}
	get := func(k instKey) *use {
		u := uses[k]
		if u == nil {
			u = &use{shared: true}
			uses[k] = u
		}
		return u
	}
	nodeJobs := map[string]int{}
	nsGPUs := map[string]int{}
	healthy := 0
	for i := range snap.Nodes {
		for _, g := range snap.Nodes[i].Devices {
			healthy += g.Healthy()
		}
	}
	jobNodes := map[string]map[string]bool{} // ns/job -> nodes with running allocs
	for _, a := range snap.Running {
		nodeJobs[a.NodeID]++
		nsGPUs[a.Namespace] += len(a.DeviceIDs)
		k := cluster.JobKey(a.Namespace, a.JobID)
		if jobNodes[k] == nil {
			jobNodes[k] = map[string]bool{}
		}
		jobNodes[k][a.NodeID] = true
		for _, id := range a.DeviceIDs {
			k := instKey{a.NodeID, id}
			if _, named := uses[k]; !named {
				continue
			}
			u := get(k)
			u.n++
			u.shared = u.shared && a.Shared
			addNS(u, a.Namespace)
		}
	}
	// Switch occupancy for tenant isolation.
	switchNS := map[instKey]map[string]bool{}
	switchOf := func(node, id string) (string, bool) {
		n := nodes[node]
		for _, g := range n.Devices {
			for _, in := range g.Instances {
				if in.ID == id && in.PCIeSwitch != "" {
					return in.PCIeSwitch, true
				}
			}
		}
		return "", false
	}
	if cfg.TenantIsolation {
		for _, a := range snap.Running {
			if _, ok := nodes[a.NodeID]; !ok {
				continue
			}
			for _, id := range a.DeviceIDs {
				if sw, ok := switchOf(a.NodeID, id); ok {
					k := instKey{a.NodeID, sw}
					if switchNS[k] == nil {
						switchNS[k] = map[string]bool{}
					}
					switchNS[k][a.Namespace] = true
				}
			}
		}
	}
	decided := map[string]bool{}
	for di := range decisions {
		d := &decisions[di]
		key := d.JobKey()
		j, ok := pending[key]
		if !ok {
			return fmt.Errorf("decision %d: job %s is not pending", di, key)
		}
		if decided[key] {
			return fmt.Errorf("job %s decided twice", key)
		}
		decided[key] = true
		cj, err := rs.Compiled(j)
		if err != nil {
			return fmt.Errorf("job %s was placed although its constraints do not compile: %w", key, err)
		}
		if d.GPUs() != j.GPUs {
			return fmt.Errorf("job %s needs %d GPUs, decision has %d", key, j.GPUs, d.GPUs())
		}
		maxNodes := j.MaxNodes()
		if j.GPUsPerNode > 0 {
			maxNodes = max(maxNodes, j.GPUs/j.GPUsPerNode)
		}
		if len(d.Assign) > maxNodes {
			return fmt.Errorf("job %s may span %d nodes, decision spans %d", key, maxNodes, len(d.Assign))
		}
		if cfg.HonorMinThroughput && d.PredThroughput < j.Hetgpu.MinThroughput {
			return fmt.Errorf("job %s: predicted %.4g/s is below its T_min %.4g/s", key, d.PredThroughput, j.Hetgpu.MinThroughput)
		}
		seenNodes := map[string]bool{}
		propCount := make([]map[string]int, len(cj.DistinctBy))
		for pi, dp := range cj.DistinctBy {
			propCount[pi] = map[string]int{}
			for _, a := range snap.Running {
				if a.Namespace == j.Namespace && a.JobID == j.ID {
					if v, ok := constraint.ResolveNode(dp.Target, nodes[a.NodeID]); ok {
						propCount[pi][v]++
					}
				}
			}
		}
		gpuType := ""
		for _, as := range d.Assign {
			n, ok := nodes[as.NodeID]
			if !ok {
				return fmt.Errorf("job %s: node %s not in snapshot", key, as.NodeID)
			}
			if seenNodes[n.ID] {
				return fmt.Errorf("job %s: node %s appears twice", key, n.ID)
			}
			seenNodes[n.ID] = true
			if !n.Ready() {
				return fmt.Errorf("job %s: node %s is not ready (status %s, eligible %t, draining %t)", key, n.ID, n.Status, n.Eligible, n.Draining)
			}
			if !cj.NodeFeasible(n) {
				return fmt.Errorf("job %s: node %s fails its constraints", key, n.ID)
			}
			if cj.Distinct && jobNodes[cluster.JobKey(j.Namespace, j.ID)][n.ID] {
				return fmt.Errorf("job %s: distinct_hosts, but node %s already runs it", key, n.ID)
			}
			for pi, dp := range cj.DistinctBy {
				v, ok := constraint.ResolveNode(dp.Target, n)
				if !ok {
					return fmt.Errorf("job %s: node %s lacks distinct_property %s", key, n.ID, dp.Target)
				}
				propCount[pi][v]++
				if propCount[pi][v] > dp.Limit {
					return fmt.Errorf("job %s: distinct_property %s = %q used %d times, limit %d", key, dp.Target, v, propCount[pi][v], dp.Limit)
				}
			}
			if j.GPUsPerNode > 0 && len(as.InstanceIDs) != j.GPUsPerNode {
				return fmt.Errorf("job %s: node %s gets %d GPUs, GPUsPerNode is %d", key, n.ID, len(as.InstanceIDs), j.GPUsPerNode)
			}
			var g *cluster.DeviceGroup
			for gi := range n.Devices {
				if n.Devices[gi].ID() == as.DeviceGroup {
					g = &n.Devices[gi]
				}
			}
			if g == nil {
				return fmt.Errorf("job %s: node %s has no device group %s", key, n.ID, as.DeviceGroup)
			}
			if !cj.GroupFeasible(g) {
				return fmt.Errorf("job %s: device group %s on %s fails its device request or constraints", key, g.ID(), n.ID)
			}
			t := g.TypeKey()
			if gpuType == "" {
				gpuType = t
			} else if gpuType != t {
				return fmt.Errorf("job %s mixes GPU types %s and %s", key, gpuType, t)
			}
			nodeJobs[n.ID]++
			if cfg.MaxJobsPerNode > 0 && nodeJobs[n.ID] > cfg.MaxJobsPerNode {
				return fmt.Errorf("node %s holds %d jobs, cap %d", n.ID, nodeJobs[n.ID], cfg.MaxJobsPerNode)
			}
			for _, id := range as.InstanceIDs {
				var in *cluster.Instance
				for ii := range g.Instances {
					if g.Instances[ii].ID == id {
						in = &g.Instances[ii]
					}
				}
				if in == nil {
					return fmt.Errorf("job %s: instance %s not in %s on %s", key, id, g.ID(), n.ID)
				}
				if !in.Healthy {
					return fmt.Errorf("job %s: instance %s on %s is unhealthy", key, id, n.ID)
				}
				if !cj.InstanceAllowed(g, id) {
					return fmt.Errorf("job %s: instance %s is excluded by its ${device.ids} constraint", key, id)
				}
				u := get(instKey{n.ID, id})
				if u.n > 0 {
					if !d.Shared || !j.Hetgpu.AllowSharing || !u.shared || u.n >= cfg.MaxShare {
						return fmt.Errorf("job %s: instance %s on %s is already in use (%d holders, shared %t; decision shared %t)", key, id, n.ID, u.n, u.shared, d.Shared)
					}
					if cfg.TenantIsolation && (u.mixed || u.ns != j.Namespace) {
						return fmt.Errorf("job %s: instance %s on %s shared across namespaces under tenant isolation", key, id, n.ID)
					}
				}
				u.n++
				u.shared = u.shared && d.Shared
				addNS(u, j.Namespace)
				if cfg.TenantIsolation && in.PCIeSwitch != "" {
					k := instKey{n.ID, in.PCIeSwitch}
					if switchNS[k] == nil {
						switchNS[k] = map[string]bool{}
					}
					switchNS[k][j.Namespace] = true
					if len(switchNS[k]) > 1 {
						return fmt.Errorf("job %s: PCIe switch %s on %s hosts several namespaces under tenant isolation", key, in.PCIeSwitch, n.ID)
					}
				}
			}
		}
		if gpuType != d.GPUType {
			return fmt.Errorf("job %s: decision says GPU type %s, instances are %s", key, d.GPUType, gpuType)
		}
		nsGPUs[j.Namespace] += j.GPUs
		share, ok := cfg.NamespaceShare[j.Namespace]
		if !ok {
			share = cfg.DefaultNamespaceShare
		}
		if share < 1 && float64(nsGPUs[j.Namespace]) > share*float64(healthy)+1e-9 {
			return fmt.Errorf("namespace %s holds %d GPUs, cap %.0f", j.Namespace, nsGPUs[j.Namespace], share*float64(healthy))
		}
	}
	return verifyCaps(snap, decisions)
}

// Verify checks decisions with the placer's own configuration (sched.Verifier): the pipeline
// calls it before pinning and pins nothing of a round it rejects.
func (p *Placer) Verify(st *sched.RoundState, snap *cluster.Snapshot, decisions []cluster.Decision) error {
	return verify(st, snap, decisions, p.cfg)
}
