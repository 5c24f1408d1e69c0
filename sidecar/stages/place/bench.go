package place

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"syscall"
	"time"

	"github.com/hetgpu/hetgpu/model/cluster"
	"github.com/hetgpu/hetgpu/model/gpuspec"
)

// BenchSpec sizes a random cluster and queue.
type BenchSpec struct {
	Jobs, GPUs, Types int
	Seed              uint64
	// GPUsPerNode is 8 unless set.
	GPUsPerNode int
	// Busy is the fraction of GPUs held by running jobs (0.35 unless set; negative for none).
	Busy float64
}

// benchTypes lists the GPU types a random cluster draws from, newest first, with an NVML
// product name and whether nodes of that type have NVLink.
var benchTypes = []struct {
	typ, name string
	nvlink    bool
	meshPeers bool
}{
	{"a100", "NVIDIA A100-SXM4-80GB", true, false},
	{"v100", "Tesla V100-SXM2-32GB", true, true},
	{"t4", "Tesla T4", false, false},
	{"h100", "NVIDIA H100 80GB HBM3", true, false},
	{"l4", "NVIDIA L4", false, false},
	{"a10", "NVIDIA A10", false, false},
	{"p100", "Tesla P100-PCIE-16GB", false, false},
	{"k80", "Tesla K80", false, false},
	{"h200", "NVIDIA H200", true, false},
}

// hybridCubeMesh is the NVLink topology of an 8-GPU DGX-1 (V100): each GPU links to four
// others, so 4-GPU cliques exist ({0,1,2,3}, {4,5,6,7}) but no 8-GPU clique.
var hybridCubeMesh = [8][]int{{1, 2, 3, 4}, {0, 2, 3, 5}, {0, 1, 3, 6}, {0, 1, 2, 7}, {0, 5, 6, 7}, {1, 4, 6, 7}, {2, 4, 5, 7}, {3, 4, 5, 6}}

var benchNamespaces = []string{"default", "research", "prod", "batch"}

// RandomSnapshot builds a random heterogeneous cluster and pending queue: Types GPU types in
// equal shares, GPUsPerNode GPUs per node (NVLink on A100/H100/H200 nodes and DGX-1 hybrid
// cube-mesh peers on V100 nodes, two GPUs per PCIe switch), about 2% of nodes down or
// draining, 1% of GPUs unhealthy, Busy of the GPUs held by running jobs, and Jobs pending
// jobs with 1-16 GPUs, some spanning nodes, some with constraints, T_min, sharing, and pins.
func RandomSnapshot(spec BenchSpec) (*cluster.Snapshot, error) {
	if spec.GPUsPerNode == 0 {
		spec.GPUsPerNode = 8
	}
	if spec.Busy == 0 {
		spec.Busy = 0.35
	}
	switch {
	case spec.Types < 1 || spec.Types > len(benchTypes):
		return nil, fmt.Errorf("--types = %d, expected 1..%d", spec.Types, len(benchTypes))
	case spec.GPUsPerNode < 1 || spec.GPUsPerNode > 64:
		return nil, fmt.Errorf("GPUs per node = %d, expected 1..64", spec.GPUsPerNode)
	case spec.GPUs < spec.GPUsPerNode || spec.GPUs%spec.GPUsPerNode != 0:
		return nil, fmt.Errorf("--gpus = %d, expected a positive multiple of %d (GPUs per node)", spec.GPUs, spec.GPUsPerNode)
	case spec.Jobs < 0:
		return nil, fmt.Errorf("--jobs = %d, expected >= 0", spec.Jobs)
	}
	rng := rand.New(rand.NewPCG(spec.Seed, 0x9e3779b97f4a7c15))
	specs := gpuspec.Default()
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	snap := &cluster.Snapshot{Now: now}
	nNodes := spec.GPUs / spec.GPUsPerNode
	allocN := 0
	for i := 0; i < nNodes; i++ {
		bt := benchTypes[i%spec.Types]
		n := cluster.Node{
			ID: fmt.Sprintf("node-%05d", i), Name: fmt.Sprintf("gpu-%05d", i), Datacenter: "dc1", Pool: "gpu",
			Class: bt.typ, Status: "ready", Eligible: true,
			Attributes: map[string]string{"kernel.name": "linux", "nomad.version": "1.10.3", "cpu.numcores": "64"},
			Meta:       map[string]string{"rack": fmt.Sprintf("r%03d", i/16), "zone": []string{"a", "b"}[i%2]},
		}
		if bt.nvlink {
			n.Interconnect = "nvlink"
		} else {
			n.Interconnect = "pcie"
		}
		switch r := rng.Float64(); {
		case r < 0.01:
			n.Status = "down"
		case r < 0.02:
			n.Draining = true
		}
		s, _ := specs.Lookup(bt.typ)
		mem := int64(math.Round(s.MemoryGiB))
		g := cluster.DeviceGroup{Vendor: "nvidia", Type: "gpu", Name: bt.name, GPUType: bt.typ,
			Attributes: map[string]cluster.Attribute{"memory": {Int: &mem, Unit: "GiB"}}}
		for k := 0; k < spec.GPUsPerNode; k++ {
			in := cluster.Instance{ID: fmt.Sprintf("GPU-%05d-%02d", i, k), Healthy: rng.Float64() >= 0.01,
				PCIBusID: fmt.Sprintf("0000:%02x:00.0", 0x10+k), NUMANode: k * 2 / spec.GPUsPerNode,
				PCIeSwitch: fmt.Sprintf("sw%d", k/2)}
			if bt.meshPeers && spec.GPUsPerNode == 8 {
				for _, p := range hybridCubeMesh[k] {
					in.NVLinkPeers = append(in.NVLinkPeers, fmt.Sprintf("GPU-%05d-%02d", i, p))
				}
			}
			g.Instances = append(g.Instances, in)
		}
		n.Devices = []cluster.DeviceGroup{g}
		// Running jobs: whole-node, half-node or single-GPU allocations up to a random load.
		target := int(math.Round(rng.Float64() * 2 * spec.Busy * float64(spec.GPUsPerNode)))
		k := 0
		for k < target && k < spec.GPUsPerNode {
			size := min([]int{1, 1, 2, 4, 8}[rng.IntN(5)], spec.GPUsPerNode-k)
			var ids []string
			for x := k; x < k+size; x++ {
				if g.Instances[x].Healthy {
					ids = append(ids, g.Instances[x].ID)
				}
			}
			k += size
			if len(ids) == 0 {
				continue
			}
			allocN++
			snap.Running = append(snap.Running, cluster.Alloc{ID: fmt.Sprintf("alloc-%d", allocN),
				Namespace: benchNamespaces[rng.IntN(len(benchNamespaces))], JobID: fmt.Sprintf("running-%d", allocN),
				Group: "train", NodeID: n.ID, DeviceIDs: ids, GPUType: bt.typ, StartTime: now.Add(-time.Hour),
				Shared: size == 1 && rng.Float64() < 0.3})
		}
		snap.Nodes = append(snap.Nodes, n)
	}
	prior := NewPriorPredictor()
	types := make([]string, spec.Types)
	for i := range types {
		types[i] = benchTypes[i].typ
	}
	sort.Strings(types)
	for i := 0; i < spec.Jobs; i++ {
		var gpus int
		switch r := rng.Float64(); {
		case r < 0.45:
			gpus = 1
		case r < 0.65:
			gpus = 2
		case r < 0.82:
			gpus = 4
		case r < 0.95:
			gpus = 8
		default:
			gpus = 16
		}
		gpus = min(gpus, spec.GPUs)
		j := cluster.Job{Namespace: benchNamespaces[rng.IntN(len(benchNamespaces))], ID: fmt.Sprintf("job-%05d", i),
			Group: "train", Priority: 50, SubmitTime: now.Add(-time.Duration(spec.Jobs-i) * time.Second), GPUs: gpus,
			DeviceName: "nvidia/gpu", Hetgpu: cluster.Annotations{Enabled: true, ModelName: "ResNet-50", BatchSize: 64}}
		if gpus > spec.GPUsPerNode {
			j.Hetgpu.MaxNodes = (gpus + spec.GPUsPerNode - 1) / spec.GPUsPerNode
			if rng.Float64() < 0.5 {
				j.GPUsPerNode = spec.GPUsPerNode
			}
		} else if gpus >= 4 && rng.Float64() < 0.2 {
			j.Hetgpu.MaxNodes = 2
		}
		r := rng.Float64()
		switch {
		case r < 0.10:
			j.DeviceConstraints = append(j.DeviceConstraints, cluster.Constraint{LTarget: "${device.attr.memory}", Operand: ">=", RTarget: "24 GiB"})
		case r < 0.15:
			j.DeviceName = "nvidia/gpu/" + benchTypes[rng.IntN(spec.Types)].name
		case r < 0.22:
			j.Constraints = append(j.Constraints, cluster.Constraint{LTarget: "${meta.zone}", Operand: "=", RTarget: "a"})
		case r < 0.25:
			j.Constraints = append(j.Constraints, cluster.Constraint{LTarget: "${meta.rack}", Operand: "regexp", RTarget: "^r0[0-4]"})
		case r < 0.27 && j.MaxNodes() > 1:
			j.Constraints = append(j.Constraints, cluster.Constraint{Operand: "distinct_hosts", RTarget: "true"})
		case r < 0.30:
			j.Affinities = append(j.Affinities, cluster.Affinity{LTarget: "${meta.zone}", Operand: "=", RTarget: "b", Weight: 50})
		}
		if rng.Float64() < 0.2 {
			// T_min between the slowest and the fastest type's prior, so some types are excluded.
			lo, hi := math.Inf(1), 0.0
			for _, t := range types {
				v := prior.Predict(&j, t, gpus).Throughput
				lo, hi = min(lo, v), max(hi, v)
			}
			j.Hetgpu.MinThroughput = lo + rng.Float64()*(hi-lo)*0.6
		}
		if gpus == 1 && rng.Float64() < 0.15 {
			j.Hetgpu.AllowSharing = true
		}
		if rng.Float64() < 0.01 && len(snap.Nodes) > 0 {
			// A job pinned to a few instances of one node, as the sidecar pins retried jobs.
			n := &snap.Nodes[rng.IntN(len(snap.Nodes))]
			ids := ""
			for k := 0; k < min(gpus+1, spec.GPUsPerNode); k++ {
				if ids != "" {
					ids += ","
				}
				ids += n.Devices[0].Instances[k].ID
			}
			j.DeviceConstraints = append(j.DeviceConstraints, cluster.Constraint{LTarget: "${device.ids}", Operand: "set_contains_any", RTarget: ids})
		}
		snap.Pending = append(snap.Pending, j)
	}
	return snap, nil
}

// BenchResult summarises repeated placement rounds.
type BenchResult struct {
	Jobs   int     `json:"jobs"`
	GPUs   int     `json:"gpus"`
	Types  int     `json:"types"`
	Seed   uint64  `json:"seed"`
	Rounds int     `json:"rounds"`
	Solver string  `json:"solver"`
	P50Ms  float64 `json:"p50_ms"`
	// CPU time of the process per Place call (all threads): on a machine shared with other
	// work it shows what the wall-clock figures would be without the contention.
	CPUP50Ms  float64 `json:"cpu_p50_ms"`
	CPUP99Ms  float64 `json:"cpu_p99_ms"`
	P99Ms     float64 `json:"p99_ms"`
	MaxMs     float64 `json:"max_ms"`
	MeanMs    float64 `json:"mean_ms"`
	Fallbacks int     `json:"fallbacks"`
	// DeadlineHits counts rounds in which the round deadline (Config.RoundDeadline) cut or
	// skipped an LP or MILP step (some of them are also fallbacks).
	DeadlineHits int     `json:"deadline_hits"`
	Objective    float64 `json:"objective"`
	GreedyObj    float64 `json:"greedy_objective"`
	Gap          float64 `json:"gap"`
	Placed       float64 `json:"placed"`
	Backfilled   float64 `json:"backfilled"`
	Window       float64 `json:"window"`
	Candidates   float64 `json:"candidates"`
	Cols         float64 `json:"cols"`
	Rows         float64 `json:"rows"`
	MIPNodes     float64 `json:"mip_nodes"`
	LPIters      float64 `json:"lp_iterations"`
	Solves       float64 `json:"solves"`
	Subproblems  float64 `json:"subproblems"`
	BuildMs      float64 `json:"build_ms"`
	// VsGreedyPct is the mean objective's gain over the greedy round's, in percent.
	VsGreedyPct float64 `json:"vs_greedy_pct"`
	// FullObj is the mean objective of one full MILP per round without time limit, polish
	// limit or round deadline (--compare-full); DecompGap the fraction of it the configured
	// solver loses, VsFullPct the same as a signed percentage.
	FullObj   float64 `json:"full_objective,omitempty"`
	DecompGap float64 `json:"decomposition_gap,omitempty"`
	VsFullPct float64 `json:"vs_full_pct,omitempty"`
	// WarmMs is the untimed warm-up round's wall time (0: no warm-up).
	WarmMs float64 `json:"warm_ms"`
	// LPMs and MILPMs are the mean wall time per round in HiGHS's LP relaxations and MILPs.
	LPMs   float64 `json:"lp_ms"`
	MILPMs float64 `json:"milp_ms"`
	// PhaseMs is the mean wall time of each step of a round (see Stats.Phases).
	PhaseMs     map[string]float64 `json:"phase_ms,omitempty"`
	Reasons     []string           `json:"fallback_reasons,omitempty"`
	VerifyError string             `json:"verify_error,omitempty"`
}

// Bench places Rounds random snapshots (seeds Seed, Seed+1, ...) with a fresh, warmed Placer
// of cfg (see BenchOptions.Warm) and FIFO ranking, timing each Place call. Every placement is
// checked with Verify. With compareFull, each round is also solved as one full MILP with the
// round's energy weight and no time limit, polish limit or round deadline, and the objective
// lost against it is reported.
func Bench(ctx context.Context, cfg Config, spec BenchSpec, rounds int, compareFull bool) (BenchResult, error) {
	return BenchWith(ctx, cfg, spec, BenchOptions{Rounds: rounds, CompareFull: compareFull, Warm: true})
}

// BenchOptions are Bench's knobs.
type BenchOptions struct {
	Rounds int
	// CompareFull also solves each round as one full MILP without time limit, polish limit or
	// round deadline and reports the objective lost against it.
	CompareFull bool
	// Warm calls Placer.Warm (an untimed synthetic round of the same size, a seed not among
	// the measured ones) before the first timed round, as a long-running sidecar does at
	// start-up; every timed round counts in the percentiles.
	Warm bool
}

// BenchWith is Bench with options.
func BenchWith(ctx context.Context, cfg Config, spec BenchSpec, opt BenchOptions) (BenchResult, error) {
	rounds, compareFull := opt.Rounds, opt.CompareFull
	res := BenchResult{Jobs: spec.Jobs, GPUs: spec.GPUs, Types: spec.Types, Seed: spec.Seed, Rounds: rounds}
	if rounds < 1 {
		return res, fmt.Errorf("rounds = %d, expected >= 1", rounds)
	}
	pl, err := New(cfg, nil)
	if err != nil {
		return res, err
	}
	if opt.Warm {
		t0 := time.Now()
		if err := pl.Warm(ctx, spec.Jobs, spec.GPUs); err != nil {
			return res, err
		}
		res.WarmMs = float64(time.Since(t0).Microseconds()) / 1000
	}
	fullCfg := cfg
	fullCfg.Solver, fullCfg.TimeLimit, fullCfg.PolishLimit, fullCfg.RoundDeadline = SolverMILP, time.Hour, 0, 0
	res.PhaseMs = map[string]float64{}
	pred := NewPriorPredictor()
	var times, cpus []float64
	reasons := map[string]bool{}
	solvers := map[string]int{}
	for r := 0; r < rounds; r++ {
		s := spec
		s.Seed = spec.Seed + uint64(r)
		snap, err := RandomSnapshot(s)
		if err != nil {
			return res, err
		}
		ranked, err := FIFO{}.Rank(ctx, snap, pred)
		if err != nil {
			return res, err
		}
		c0 := processCPU()
		t0 := time.Now()
		dec, st, err := pl.PlaceDetailed(ctx, snap, ranked, pred)
		el := time.Since(t0)
		cpus = append(cpus, float64((processCPU()-c0).Microseconds())/1000)
		if err != nil {
			return res, err
		}
		if err := Verify(snap, dec, cfg); err != nil && res.VerifyError == "" {
			res.VerifyError = fmt.Sprintf("seed %d: %v", s.Seed, err)
		}
		times = append(times, float64(el.Microseconds())/1000)
		solvers[st.Solver]++
		if st.Fallback {
			res.Fallbacks++
			reasons[st.FallbackReason] = true
		}
		if st.DeadlineHit {
			res.DeadlineHits++
		}
		for _, p := range st.Phases {
			res.PhaseMs[p.Name] += float64(p.Time.Microseconds()) / 1000
		}
		res.LPMs += float64(st.LPTime.Microseconds()) / 1000
		res.MILPMs += float64(st.MILPTime.Microseconds()) / 1000
		res.Objective += st.Objective
		res.GreedyObj += st.GreedyObjective
		res.Gap = max(res.Gap, st.Gap)
		res.Placed += float64(st.Placed)
		res.Backfilled += float64(st.Backfilled)
		res.Window += float64(st.Window)
		res.Candidates += float64(st.Candidates)
		res.Cols += float64(st.Cols)
		res.Rows += float64(st.Rows)
		res.MIPNodes += float64(st.MIPNodes)
		res.LPIters += float64(st.LPIterations)
		res.Solves += float64(st.Solves)
		res.Subproblems += float64(st.Subproblems)
		res.BuildMs += float64(st.BuildTime.Microseconds()) / 1000
		if compareFull {
			// The same objective: this round's (load-adapted) energy weight, fixed.
			fc := fullCfg
			fc.EnergyWeight, fc.EnergyAdaptive = st.Lambda, false
			fp, err := New(fc, nil)
			if err != nil {
				return res, err
			}
			_, fst, err := fp.PlaceDetailed(ctx, snap, ranked, pred)
			if err != nil {
				return res, err
			}
			res.FullObj += fst.Objective
		}
	}
	n := float64(rounds)
	for _, p := range []*float64{&res.Objective, &res.GreedyObj, &res.Placed, &res.Backfilled, &res.Window, &res.Candidates,
		&res.Cols, &res.Rows, &res.MIPNodes, &res.LPIters, &res.Solves, &res.Subproblems, &res.BuildMs, &res.FullObj,
		&res.LPMs, &res.MILPMs} {
		*p /= n
	}
	for k := range res.PhaseMs {
		res.PhaseMs[k] /= n
	}
	if res.GreedyObj > 0 {
		res.VsGreedyPct = 100 * (res.Objective - res.GreedyObj) / res.GreedyObj
	}
	if compareFull && res.FullObj > 0 {
		res.DecompGap = (res.FullObj - res.Objective) / res.FullObj
		res.VsFullPct = -100 * res.DecompGap
	}
	sort.Float64s(times)
	sort.Float64s(cpus)
	res.CPUP50Ms, res.CPUP99Ms = quantile(cpus, 0.5), quantile(cpus, 0.99)
	res.P50Ms, res.P99Ms, res.MaxMs = quantile(times, 0.5), quantile(times, 0.99), times[len(times)-1]
	for _, t := range times {
		res.MeanMs += t / n
	}
	for k := range reasons {
		res.Reasons = append(res.Reasons, k)
	}
	sort.Strings(res.Reasons)
	var names []string
	for k := range solvers {
		names = append(names, k)
	}
	sort.Strings(names)
	for i, k := range names {
		if i > 0 {
			res.Solver += ","
		}
		res.Solver += fmt.Sprintf("%s:%d", k, solvers[k])
	}
	return res, nil
}

// processCPU is the user+system CPU time of the process so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// quantile is the nearest-rank quantile of sorted xs.
func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(xs)))) - 1
	return xs[max(0, min(i, len(xs)-1))]
}
