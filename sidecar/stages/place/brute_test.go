package place

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/hetgpu/hetgpu/model/cluster"
	"github.com/hetgpu/hetgpu/sidecar/sched"
)

// tinyInstance is a random small cluster and queue exercising every rule: several types,
// unhealthy and busy GPUs, a node that is down, spanning jobs, GPUsPerNode, constraints,
// T_min, sharing, pins, and (by flags) tenant isolation, node caps and namespace caps.
func tinyInstance(rng *rand.Rand) (*cluster.Snapshot, Config) {
	cfg := Default()
	cfg.TimeLimit = 20 * time.Second
	cfg.MIPGap = 0
	cfg.WindowDemand = 1e9
	cfg.LookAhead = 0
	cfg.MaxOptionsPerJob = 1 << 20
	cfg.EnergyAdaptive = false
	cfg.TenantIsolation = rng.IntN(4) == 0
	if rng.IntN(4) == 0 {
		cfg.MaxJobsPerNode = 1 + rng.IntN(2)
	}
	if rng.IntN(4) == 0 {
		cfg.NamespaceShare = map[string]float64{"b": 0.25 + 0.25*float64(rng.IntN(2))}
	}
	types := []struct{ typ, name string }{{"a100", "NVIDIA A100-SXM4-40GB"}, {"t4", "Tesla T4"}, {"v100", "Tesla V100-SXM2-16GB"}}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	snap := &cluster.Snapshot{Now: now}
	nNodes := 1 + rng.IntN(3)
	for i := 0; i < nNodes; i++ {
		bt := types[rng.IntN(2+rng.IntN(2))]
		n := cluster.Node{ID: fmt.Sprintf("n%d", i), Name: fmt.Sprintf("n%d", i), Status: "ready", Eligible: true,
			Meta: map[string]string{"zone": []string{"a", "b"}[rng.IntN(2)]}, Attributes: map[string]string{}}
		if rng.IntN(10) == 0 {
			n.Status = "down"
		}
		if rng.IntN(2) == 0 {
			n.Interconnect = "nvlink"
		}
		g := cluster.DeviceGroup{Vendor: "nvidia", Type: "gpu", Name: bt.name, GPUType: bt.typ}
		size := 1 + rng.IntN(4)
		for k := 0; k < size; k++ {
			g.Instances = append(g.Instances, cluster.Instance{ID: fmt.Sprintf("g%d-%d", i, k), Healthy: rng.IntN(8) != 0,
				PCIeSwitch: fmt.Sprintf("sw%d", k/2)})
		}
		n.Devices = []cluster.DeviceGroup{g}
		for k := 0; k < size; k++ {
			if rng.IntN(4) == 0 && g.Instances[k].Healthy {
				snap.Running = append(snap.Running, cluster.Alloc{ID: fmt.Sprintf("a%d-%d", i, k), Namespace: []string{"a", "b"}[rng.IntN(2)],
					JobID: fmt.Sprintf("r%d-%d", i, k), Group: "g", NodeID: n.ID, DeviceIDs: []string{g.Instances[k].ID}, Shared: rng.IntN(2) == 0})
			}
		}
		snap.Nodes = append(snap.Nodes, n)
	}
	nJobs := 2 + rng.IntN(4)
	for i := 0; i < nJobs; i++ {
		gpus := 1 + rng.IntN(4)
		j := cluster.Job{Namespace: []string{"a", "b"}[rng.IntN(2)], ID: fmt.Sprintf("j%d", i), Group: "g", GPUs: gpus,
			SubmitTime: now.Add(time.Duration(i) * time.Second), DeviceName: "nvidia/gpu"}
		if rng.IntN(2) == 0 {
			j.Hetgpu.MaxNodes = 2
			if gpus%2 == 0 && rng.IntN(2) == 0 {
				j.GPUsPerNode = gpus / 2
			}
		}
		switch rng.IntN(8) {
		case 0:
			j.Constraints = append(j.Constraints, cluster.Constraint{LTarget: "${meta.zone}", Operand: "=", RTarget: "a"})
		case 1:
			j.DeviceName = "nvidia/gpu/Tesla T4"
		case 2:
			j.Hetgpu.MinThroughput = 1.5 * float64(gpus) * 0.8 // excludes the slower types
		case 3:
			j.Constraints = append(j.Constraints, cluster.Constraint{Operand: "distinct_hosts"})
		case 4:
			if len(snap.Nodes) > 0 {
				n := snap.Nodes[rng.IntN(len(snap.Nodes))]
				j.DeviceConstraints = append(j.DeviceConstraints, cluster.Constraint{LTarget: "${device.ids}", Operand: "set_contains_any",
					RTarget: n.Devices[0].Instances[0].ID + "," + n.Devices[0].Instances[len(n.Devices[0].Instances)-1].ID})
			}
		case 5:
			j.Affinities = append(j.Affinities, cluster.Affinity{LTarget: "${meta.zone}", Operand: "=", RTarget: "b", Weight: 60})
		}
		if gpus == 1 && rng.IntN(3) == 0 {
			j.Hetgpu.AllowSharing = true
		}
		snap.Pending = append(snap.Pending, j)
	}
	return snap, cfg
}

// bruteForce finds the best choice of at most one column per job by exhaustive search,
// checking capacity with its own bookkeeping (not the model's fits/apply).
func bruteForce(m *model, sc *scope, st *state) float64 {
	jobs := sc.jobs
	domFree := append([]int(nil), st.domFree...)
	instUsed := append([]int(nil), st.instUsed...)
	nodeJobs := append([]int(nil), st.nodeJobs...)
	nsGPUs := append([]int(nil), st.nsGPUs...)
	isoNS := append([]int(nil), st.isoNS...)
	best := 0.0
	var rec func(i int, val float64)
	rec = func(i int, val float64) {
		if i == len(jobs) {
			best = math.Max(best, val)
			return
		}
		rec(i+1, val) // job i waits
		for _, c := range sc.byJob[jobs[i]] {
			o := &sc.opts[c]
			j := &m.jobs[o.job]
			ok := true
			for _, p := range o.parts {
				if !o.coloc && domFree[p.dom] < p.count {
					ok = false
				}
				for _, ii := range p.insts {
					limit := 1
					if o.coloc {
						limit = m.cfg.MaxShare
					}
					if instUsed[ii] >= limit {
						ok = false
					}
				}
				if iso := m.doms[p.dom].iso; iso >= 0 && isoNS[iso] != -1 && isoNS[iso] != j.ns {
					ok = false
				}
			}
			for _, u := range o.units {
				if m.cfg.MaxJobsPerNode > 0 && nodeJobs[m.units[u].node] >= m.cfg.MaxJobsPerNode {
					ok = false
				}
			}
			if m.nsCap[j.ns] >= 0 && nsGPUs[j.ns]+j.g > m.nsCap[j.ns] {
				ok = false
			}
			if !ok {
				continue
			}
			savedIso := append([]int(nil), isoNS...)
			for _, p := range o.parts {
				if !o.coloc {
					domFree[p.dom] -= p.count
				}
				for _, ii := range p.insts {
					instUsed[ii]++
				}
				if iso := m.doms[p.dom].iso; iso >= 0 {
					isoNS[iso] = j.ns
				}
			}
			for _, u := range o.units {
				nodeJobs[m.units[u].node]++
			}
			nsGPUs[j.ns] += j.g
			rec(i+1, val+o.value)
			nsGPUs[j.ns] -= j.g
			for _, u := range o.units {
				nodeJobs[m.units[u].node]--
			}
			for _, p := range o.parts {
				if !o.coloc {
					domFree[p.dom] += p.count
				}
				for _, ii := range p.insts {
					instUsed[ii]--
				}
			}
			isoNS = savedIso
		}
	}
	rec(0, 0)
	return best
}

// TestMILPMatchesBruteForce: on many small random instances, with every placement of every
// job as a column, the MILP's objective equals the exhaustive optimum, and it is never below
// the greedy solution.
func TestMILPMatchesBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	n := 300
	if testing.Short() {
		n = 60
	}
	nonTrivial := 0
	for it := 0; it < n; it++ {
		snap, cfg := tinyInstance(rng)
		cfg.exhaustive = true
		// Wall-clock cuts are for production rounds; on a loaded machine they would stop the
		// MILP before the optimum this test compares with.
		cfg.PolishLimit, cfg.TimeLimit = 0, time.Minute
		ranked, err := FIFO{}.Rank(context.Background(), snap, nil)
		if err != nil {
			t.Fatal(err)
		}
		m, st, err := newModel(cfg, nil, snap, ranked, NewPriorPredictor(), cfg.EnergyWeight)
		if err != nil {
			t.Fatal(err)
		}
		var order []int
		for ji := 0; ji < m.window; ji++ {
			if m.jobs[ji].err == nil {
				order = append(order, ji)
			}
		}
		sc := m.prepareScope(order, nil, st, nil)
		sol, ss := m.solveScope(sc, st, time.Now().Add(cfg.TimeLimit))
		got := sumOpts(sol)
		want := bruteForce(m, sc, st)
		if math.Abs(got-want) > 1e-6*math.Max(1, want) {
			t.Fatalf("instance %d: MILP objective %.9g, brute force %.9g (status %s, %d columns)\n%s", it, got, want, ss.status, len(sc.opts), describeInstance(snap, cfg))
		}
		if got+1e-9 < ss.greedyObjective {
			t.Fatalf("instance %d: MILP %.9g below greedy %.9g", it, got, ss.greedyObjective)
		}
		if want > ss.greedyObjective+1e-9 {
			nonTrivial++
		}
		// The chosen options must also pass the independent verifier once IDs are picked.
		dec := m.assign(sol, nil, st, SolverMILP, &Stats{})
		if err := Verify(snap, dec, cfg); err != nil {
			t.Fatalf("instance %d: %v\n%s", it, err, describeInstance(snap, cfg))
		}
	}
	t.Logf("%d instances, %d where greedy was not optimal", n, nonTrivial)
	if nonTrivial == 0 {
		t.Error("no instance where the MILP had to beat greedy; the test is too easy")
	}
}

func describeInstance(snap *cluster.Snapshot, cfg Config) string {
	s := fmt.Sprintf("isolation %t, node cap %d, ns shares %v\n", cfg.TenantIsolation, cfg.MaxJobsPerNode, cfg.NamespaceShare)
	for _, n := range snap.Nodes {
		s += fmt.Sprintf("node %s %s %s zone %s:", n.ID, n.Status, n.Devices[0].GPUType, n.Meta["zone"])
		for _, in := range n.Devices[0].Instances {
			s += fmt.Sprintf(" %s(h=%t,%s)", in.ID, in.Healthy, in.PCIeSwitch)
		}
		s += "\n"
	}
	for _, a := range snap.Running {
		s += fmt.Sprintf("running %s/%s on %s %v shared %t\n", a.Namespace, a.JobID, a.NodeID, a.DeviceIDs, a.Shared)
	}
	for _, j := range snap.Pending {
		s += fmt.Sprintf("job %s gpus %d k %d p %d share %t tmin %.3g constraints %v dev %v\n", j.Key(), j.GPUs, j.MaxNodes(), j.GPUsPerNode,
			j.Hetgpu.AllowSharing, j.Hetgpu.MinThroughput, j.Constraints, j.DeviceConstraints)
	}
	return s
}

var _ sched.Placer = (*Placer)(nil)
var _ sched.Predictor = (*PriorPredictor)(nil)
var _ sched.Ranker = FIFO{}
