package place

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"
)

// Solver modes.
const (
	// SolverAuto solves the full MILP when it is small enough and the decomposition otherwise.
	SolverAuto = "auto"
	// SolverMILP always solves the full MILP.
	SolverMILP = "milp"
	// SolverDecomposed always decomposes by GPU type (see decompose.go).
	SolverDecomposed = "decomposed"
	// SolverGreedy never calls HiGHS: jobs in rank order take their best feasible option.
	SolverGreedy = "greedy"
)

// Config holds the placement model's weights and the solver's settings. The zero value is not
// useful; start from Default() or a preset and change fields.
//
// The objective, per chosen option o of job j (g GPUs), is
//
//	g x ( PlaceReward
//	    + PriorityWeight x P_j x S_o              priority x speed (RLTune)
//	    + RankWeight x P_j                         priority alone (tie-break by rank)
//	    - lambda_j x E_o                           energy (GOGH)
//	    - FragmentWeight x F_o                     fragmentation left behind
//	    - ImbalanceWeight x L_o                    load imbalance across nodes
//	    + LookAheadWeight x A_o                    room left for the next queued jobs (RLTune)
//	    + AffinityWeight x Aff_o )                 Nomad affinities
//
// with every term in [0, 1] (L_o in [-1, 1], Aff_o in [-2, 2]):
//   - P_j = 1 / (1 + r / RankHalfLife) for the job's 0-based position r in the ranker's order;
//     where the queue stage moved a job ahead for its guarantee (sched.Ranked.RankerPos), P_j
//     is that of the ranker's position and every option of the job gets (PriorityWeight +
//     RankWeight) x (P of its place in the order - P_j) more: it is placed as early, but
//     chooses its GPUs as its rank does;
//   - S_o = predicted throughput on o / the job's best predicted throughput on any GPU type
//     in the cluster (o's throughput includes the cross-node, PCIe and sharing factors);
//   - E_o = 1 - (the job's least predicted energy per unit of work on any GPU type) / (that
//     of o, including the placement factors);
//   - F_o = mean over o's nodes of the free GPUs o leaves in that device group / its size
//     (best fit: filling a group exactly costs nothing);
//   - L_o = mean over o's GPUs of (node utilisation after placement - cluster utilisation);
//   - A_o = 1 - min(1, demand of the look-ahead jobs for o's GPU type, weighted by how much
//     they gain from that type / free GPUs of that type);
//   - Aff_o = Nomad's normalised node affinity plus device affinity, averaged over o's nodes.
//
// PlaceReward makes the engine work-conserving: as long as it exceeds the largest possible
// sum of penalties (2 x EnergyWeight + FragmentWeight + ImbalanceWeight + 2 x AffinityWeight
// with the defaults) every feasible placement is worth more than leaving GPUs idle, and the
// penalties only choose between placements. Options whose predicted throughput is below the
// job's T_min (hetgpu.min_throughput) are never offered.
type Config struct {
	PlaceReward     float64
	PriorityWeight  float64
	RankWeight      float64
	RankHalfLife    float64
	EnergyWeight    float64
	FragmentWeight  float64
	ImbalanceWeight float64
	LookAheadWeight float64
	AffinityWeight  float64

	// EnergyAdaptive scales EnergyWeight with the cluster's load, GOGH-style, from the last
	// LoadHistory rounds: lambda = EnergyWeight x clamp(1 - (load - mean) / std, 0, 2), where
	// load = (GPUs busy + GPUs pending) / healthy GPUs. A busier than usual cluster puts less
	// weight on energy and more on throughput, an idler one the reverse. (The sign is chosen
	// so that the stated intent holds; see the README's Placement section.) A job's
	// hetgpu.energy_weight annotation overrides lambda for that job.
	EnergyAdaptive bool
	LoadHistory    int

	// HonorMinThroughput drops options below the job's T_min (GOGH); RLTune ignores T_min.
	HonorMinThroughput bool

	// CrossNodeEfficiency multiplies the predicted throughput of a job spread over nodes
	// (the simulator's default, Gavel's median unconsolidated/consolidated ratio).
	CrossNodeEfficiency float64
	// PCIeEfficiency multiplies the throughput of a multi-GPU job on one node whose GPUs are
	// not all NVLink-connected.
	PCIeEfficiency float64
	// SharedEfficiency multiplies the throughput of a job co-located on GPUs another job uses.
	SharedEfficiency float64
	// MaxShare is the most jobs on one GPU when all of them allow sharing (k).
	MaxShare int
	// PairIdleGPUs lets a round pair a left-out sharing job with a new job it put alone on an
	// idle GPU (newpairs.go). Only where co-location on a whole GPU can be applied (the
	// simulator); Nomad gives a whole GPU to one allocation, so live pairs use GPU slots.
	PairIdleGPUs bool

	// MaxJobsPerNode caps new plus running jobs per node; 0 means no cap.
	MaxJobsPerNode int
	// NamespaceShare caps a namespace's GPUs (running + new) at a fraction of the healthy
	// GPUs; namespaces not listed get DefaultNamespaceShare (1 = no cap).
	NamespaceShare        map[string]float64
	DefaultNamespaceShare float64
	// TenantIsolation never puts jobs of different namespaces on one GPU or behind one PCIe
	// switch (instances' PCIeSwitch; without it, the GPU itself).
	TenantIsolation bool

	// WindowDemand bounds the jobs the optimiser sees: ranked jobs are taken in order until
	// their GPU demand reaches WindowDemand x free GPUs, and at most MaxWindow jobs. The rest
	// are backfilled greedily into what is left; the first LookAhead of them form the
	// look-ahead set.
	WindowDemand float64
	MaxWindow    int
	LookAhead    int

	// MaxOptionsPerJob caps the candidate options (model columns) per job: per GPU type, the
	// classes of interchangeable nodes worth most to the job. NodesPerClass is how many
	// representative nodes of a class options are built on (jobs spanning nodes need distinct
	// nodes of a class) and how many co-location options a sharing job gets per type.
	MaxOptionsPerJob int
	NodesPerClass    int

	// Solver is SolverAuto, SolverMILP, SolverDecomposed or SolverGreedy.
	Solver string
	// DecomposeAbove: in auto mode, decompose when the full model has more option columns.
	DecomposeAbove int
	// TimeLimit bounds one Place call's solving; on expiry the better of HiGHS's incumbent and
	// the greedy solution is used and counted as a fallback.
	TimeLimit time.Duration
	// NodeLimit caps the branch-and-bound nodes of each MILP (HiGHS mip_max_nodes; 0: no
	// cap) and ends it like TimeLimit does. A work limit stops a solve at the same point on
	// any machine under any load, which a wall-clock limit does not: the simulator bounds its
	// solves with it (and a TimeLimit they never reach) so that runs reproduce bit for bit.
	NodeLimit int
	// MIPGap ends the solve as soon as a solution is within this fraction of the LP bound
	// (and is HiGHS's mip_rel_gap).
	MIPGap float64
	// PolishLimit bounds the last two steps together, the restricted MILP and the full MILP,
	// which only run when the cheaper steps end outside MIPGap; they only improve on a
	// solution at hand, so stopping there is not a fallback (0: up to TimeLimit).
	PolishLimit time.Duration
	// RoundDeadline bounds a round's solving, measured from the start of the Place call, per
	// 1,024 healthy GPUs in the cluster (a cluster of 10,240 gets ten times as long; never
	// less than RoundDeadline). When it passes, the LP relaxations and MILPs still running
	// are cut and those not started are skipped; the best solution at hand (greedy, rounded
	// LP or MILP incumbent) is used and Stats.DeadlineHit says so. A cut that leaves the
	// first pass with nothing better than its greedy solution also counts as a fallback.
	// Building the model and the greedy round always run; the steps after the solve (the
	// second pass's greedy, picking instance IDs) take a few ms. It is what bounds the
	// decision time's tail. 0 disables it (TimeLimit still applies). The default, 60 ms, keeps
	// a round at 256 jobs on 1,024 GPUs under 100 ms: there the LP is done after about 30 ms
	// on an idle machine, and the MILPs after it rarely add more than 0.1 % to the objective.
	RoundDeadline time.Duration
	// WarmStart passes the greedy solution to HiGHS as a starting incumbent.
	WarmStart bool
	// Parallelism is how many per-type models of the decomposition are solved at once
	// (0: GOMAXPROCS).
	Parallelism int

	// exhaustive (tests only) makes every domain its own class and every option explicit, so
	// that a brute force over the same options can check the MILP.
	exhaustive bool
}

// Default is the hetgpu configuration: RLTune's priority x speed, fragmentation and
// look-ahead terms together with GOGH's energy term, adaptive energy weight and T_min.
func Default() Config {
	return Config{
		PlaceReward:           1,
		PriorityWeight:        2,
		RankWeight:            0,
		RankHalfLife:          16,
		EnergyWeight:          0.3,
		FragmentWeight:        0.2,
		ImbalanceWeight:       0.05,
		LookAheadWeight:       0.1,
		AffinityWeight:        0.1,
		EnergyAdaptive:        true,
		LoadHistory:           64,
		HonorMinThroughput:    true,
		CrossNodeEfficiency:   0.75,
		PCIeEfficiency:        0.95,
		SharedEfficiency:      0.6,
		MaxShare:              2,
		DefaultNamespaceShare: 1,
		WindowDemand:          2,
		MaxWindow:             1024,
		LookAhead:             16,
		MaxOptionsPerJob:      16,
		NodesPerClass:         2,
		Solver:                SolverAuto,
		DecomposeAbove:        8000,
		TimeLimit:             time.Second,
		MIPGap:                0.01,
		PolishLimit:           20 * time.Millisecond,
		RoundDeadline:         60 * time.Millisecond,
		WarmStart:             true,
	}
}

// PresetHetgpu is Default().
func PresetHetgpu() Config { return Default() }

// PresetRLTune models RLTune's MILP: priority x speed, fragmentation, load balance and
// look-ahead, no energy term, no T_min.
func PresetRLTune() Config {
	c := Default()
	c.EnergyWeight = 0
	c.EnergyAdaptive = false
	c.HonorMinThroughput = false
	return c
}

// PresetGOGH models GOGH's ILP: minimise energy subject to each job's minimum throughput and
// distribution degree, every job placed if possible (PlaceReward), jobs taken in rank order
// only to break ties, no fragmentation, look-ahead or imbalance terms; GOGH's load-adaptive
// energy weight.
func PresetGOGH() Config {
	c := Default()
	c.PriorityWeight = 0
	c.RankWeight = 0.1
	c.EnergyWeight = 0.45
	c.EnergyAdaptive = true
	c.FragmentWeight = 0
	c.ImbalanceWeight = 0
	c.LookAheadWeight = 0
	c.HonorMinThroughput = true
	return c
}

// Preset returns a preset by name: "hetgpu", "rltune" or "gogh".
func Preset(name string) (Config, error) {
	switch strings.ToLower(name) {
	case "hetgpu", "":
		return PresetHetgpu(), nil
	case "rltune":
		return PresetRLTune(), nil
	case "gogh":
		return PresetGOGH(), nil
	}
	return Config{}, fmt.Errorf("placement preset %q: expected one of hetgpu, rltune, gogh", name)
}

// Validate reports the first field with a value the placer cannot use.
func (c *Config) Validate() error {
	nonNeg := []struct {
		name string
		v    float64
	}{
		{"PlaceReward", c.PlaceReward}, {"PriorityWeight", c.PriorityWeight}, {"RankWeight", c.RankWeight},
		{"EnergyWeight", c.EnergyWeight}, {"FragmentWeight", c.FragmentWeight},
		{"ImbalanceWeight", c.ImbalanceWeight}, {"LookAheadWeight", c.LookAheadWeight},
		{"AffinityWeight", c.AffinityWeight}, {"WindowDemand", c.WindowDemand}, {"MIPGap", c.MIPGap},
		{"DefaultNamespaceShare", c.DefaultNamespaceShare},
	}
	for _, f := range nonNeg {
		if f.v < 0 || math.IsNaN(f.v) || math.IsInf(f.v, 0) {
			return fmt.Errorf("placement config: %s = %v, expected a finite number >= 0", f.name, f.v)
		}
	}
	if c.RankHalfLife <= 0 {
		return fmt.Errorf("placement config: RankHalfLife = %v, expected > 0", c.RankHalfLife)
	}
	for _, f := range []struct {
		name string
		v    float64
	}{{"CrossNodeEfficiency", c.CrossNodeEfficiency}, {"PCIeEfficiency", c.PCIeEfficiency}, {"SharedEfficiency", c.SharedEfficiency}} {
		if !(f.v > 0 && f.v <= 1) {
			return fmt.Errorf("placement config: %s = %v, expected a factor in (0, 1]", f.name, f.v)
		}
	}
	if c.MaxShare < 1 {
		return fmt.Errorf("placement config: MaxShare = %d, expected >= 1 (1 disables sharing)", c.MaxShare)
	}
	if c.MaxJobsPerNode < 0 || c.MaxWindow < 1 || c.LookAhead < 0 || c.LoadHistory < 0 {
		return fmt.Errorf("placement config: MaxJobsPerNode = %d, MaxWindow = %d, LookAhead = %d, LoadHistory = %d; expected >= 0, >= 1, >= 0, >= 0",
			c.MaxJobsPerNode, c.MaxWindow, c.LookAhead, c.LoadHistory)
	}
	if c.MaxOptionsPerJob < 1 || c.NodesPerClass < 1 {
		return fmt.Errorf("placement config: MaxOptionsPerJob = %d, NodesPerClass = %d; expected >= 1", c.MaxOptionsPerJob, c.NodesPerClass)
	}
	names := make([]string, 0, len(c.NamespaceShare))
	for ns := range c.NamespaceShare {
		names = append(names, ns)
	}
	sort.Strings(names)
	for _, ns := range names {
		if v := c.NamespaceShare[ns]; !(v >= 0 && v <= 1) {
			return fmt.Errorf("placement config: NamespaceShare[%q] = %v, expected a fraction in [0, 1]", ns, v)
		}
	}
	switch c.Solver {
	case SolverAuto, SolverMILP, SolverDecomposed, SolverGreedy:
	default:
		return fmt.Errorf("placement config: Solver = %q, expected %s, %s, %s or %s", c.Solver, SolverAuto, SolverMILP, SolverDecomposed, SolverGreedy)
	}
	if c.DecomposeAbove < 1 {
		return fmt.Errorf("placement config: DecomposeAbove = %d, expected >= 1", c.DecomposeAbove)
	}
	if c.TimeLimit <= 0 {
		return fmt.Errorf("placement config: TimeLimit = %v, expected > 0", c.TimeLimit)
	}
	if c.NodeLimit < 0 {
		return fmt.Errorf("placement config: NodeLimit = %d, expected >= 0 (0: no cap)", c.NodeLimit)
	}
	if c.PolishLimit < 0 {
		return fmt.Errorf("placement config: PolishLimit = %v, expected >= 0", c.PolishLimit)
	}
	if c.RoundDeadline < 0 {
		return fmt.Errorf("placement config: RoundDeadline = %v, expected >= 0 (0 disables it)", c.RoundDeadline)
	}
	if c.Parallelism < 0 {
		return fmt.Errorf("placement config: Parallelism = %d, expected >= 0", c.Parallelism)
	}
	return nil
}
