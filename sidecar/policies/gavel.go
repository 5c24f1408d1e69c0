package policies

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"sort"

	"github.com/lanl/highs"

	_ "github.com/hetgpu/hetgpu/internal/highslink" // finds libhighs at run time
	"github.com/hetgpu/hetgpu/sidecar/sim"
)

// gavel is Gavel's heterogeneity-aware least-attained-service policy (max-min fairness over
// normalised effective throughput) with its round-based mechanism (Narayanan et al.,
// "Heterogeneity-Aware Cluster Scheduling Policies for Deep Learning Workloads", OSDI 2020).
//
// Allocation: whenever the set of active jobs changes, an LP (HiGHS) finds X[j][t], the fraction
// of time job j should spend on GPU type t, maximising min_j throughput_j(X) / equal_j where
// throughput_j(X) = sum_t thr[j][t] X[j][t], equal_j is the job's throughput when it gets an
// equal time share of every type (sum_t thr[j][t] cap_t / sum cap), subject to sum_t X[j][t] <= 1
// and sum_j gpus_j X[j][t] <= cap_t. thr comes from the measured table (Gavel profiles every job
// type on every GPU type).
//
// Mechanism: every 6-minute round, (job, type) pairs are ranked by priority X[j][t] / share[j][t]
// (share = fraction of the job's time in the system it has spent on t; unserved pairs first) and
// granted greedily while the type has GPUs; running jobs not granted their current type are
// preempted (progress kept). Between rounds, completions free GPUs that waiting jobs take in
// priority order (no preemption), so GPUs do not idle until the next round.
type gavel struct {
	round     float64
	nextRound float64
	alloc     map[*sim.JobState]map[string]float64
	received  map[*sim.JobState]map[string]float64 // seconds run per type
	lastSeen  map[*sim.JobState]float64            // last accounting time of running jobs
	active    map[*sim.JobState]bool
	perNode   map[string]int // largest node per GPU type
}

// It is the one registered policy that is not a composition of pipeline stages (Policy.Native):
// Gavel time-shares GPU types. Its allocation is a fraction of each 6-minute round per job and
// GPU type, realised by granting (job, type) leases by the ratio of that fraction to the time
// the job has received on each type so far; the grants pick the GPU type for the job and
// preempt at round boundaries on Gavel's own clock. As stages that would be a stateful ranker
// that returns (job, type) grants, a placer bound to each grant's type and a round clock; the
// sched interfaces carry a ranked job, not a job bound to a type, so it stays native until they
// do.
func newGavel(Options) (Policy, error) {
	return Policy{Native: &gavel{round: 360, alloc: map[*sim.JobState]map[string]float64{},
		received: map[*sim.JobState]map[string]float64{}, lastSeen: map[*sim.JobState]float64{}}}, nil
}

func (g *gavel) Name() string { return "gavel" }

func (g *gavel) Schedule(_ context.Context, s *sim.State) error {
	now := s.Now()
	// Account time received by running jobs since the last round.
	for _, j := range s.Running() {
		if t, ok := g.lastSeen[j]; ok && now > t {
			if g.received[j] == nil {
				g.received[j] = map[string]float64{}
			}
			g.received[j][j.GPUType] += now - t
		}
		g.lastSeen[j] = now
	}
	active := map[*sim.JobState]bool{}
	jobs := make([]*sim.JobState, 0, len(s.Running())+len(s.Pending()))
	for _, j := range s.Running() {
		active[j] = true
		jobs = append(jobs, j)
	}
	for _, j := range s.Pending() {
		active[j] = true
		jobs = append(jobs, j)
		delete(g.lastSeen, j)
	}
	sort.Slice(jobs, func(a, b int) bool { return jobs[a].Seq < jobs[b].Seq })
	if !sameSet(active, g.active) {
		if err := g.solve(s, jobs); err != nil {
			return err
		}
		g.active = active
		for j := range g.received {
			if !active[j] {
				delete(g.received, j)
				delete(g.lastSeen, j)
			}
		}
	}
	full := now >= g.nextRound
	if full {
		g.nextRound = now + g.round
	}
	type pair struct {
		j    *sim.JobState
		t    string
		prio float64
	}
	var pairs []pair
	for _, j := range jobs {
		age := math.Max(now-j.ArrivalS, 1)
		for t, x := range g.alloc[j] {
			if x <= 1e-6 {
				continue
			}
			share := g.received[j][t] / age
			prio := math.Inf(1)
			if share > 0 {
				prio = x / share
			}
			pairs = append(pairs, pair{j, t, prio})
		}
	}
	sort.SliceStable(pairs, func(a, b int) bool {
		if pairs[a].prio != pairs[b].prio {
			return pairs[a].prio > pairs[b].prio
		}
		if g.alloc[pairs[a].j][pairs[a].t] != g.alloc[pairs[b].j][pairs[b].t] {
			return g.alloc[pairs[a].j][pairs[a].t] > g.alloc[pairs[b].j][pairs[b].t]
		}
		if pairs[a].j.Seq != pairs[b].j.Seq {
			return pairs[a].j.Seq < pairs[b].j.Seq
		}
		return pairs[a].t < pairs[b].t
	})
	if full {
		capLeft := s.Capacity()
		granted := map[*sim.JobState]string{}
		for _, p := range pairs {
			if _, done := granted[p.j]; done || capLeft[p.t] < p.j.GPUs {
				continue
			}
			granted[p.j] = p.t
			capLeft[p.t] -= p.j.GPUs
		}
		for _, j := range append([]*sim.JobState(nil), s.Running()...) {
			if granted[j] != j.GPUType {
				if err := s.PreemptJob(j); err != nil {
					return err
				}
				delete(g.lastSeen, j)
			}
		}
		for _, p := range pairs {
			if p.j.Status != sim.StatusPending || granted[p.j] != p.t {
				continue
			}
			if err := g.start(s, p.j, p.t, now); err != nil {
				return err
			}
		}
	}
	// Work conservation: waiting jobs take free GPUs in priority order.
	for _, p := range pairs {
		if p.j.Status == sim.StatusPending {
			if err := g.start(s, p.j, p.t, now); err != nil {
				return err
			}
		}
	}
	if len(jobs) > 0 {
		s.WakeAt(g.nextRound)
	} else {
		s.WakeAt(math.Inf(1))
	}
	return nil
}

func (g *gavel) start(s *sim.State, j *sim.JobState, t string, now float64) error {
	p, ok := s.BestFit(j, t)
	if !ok {
		return nil
	}
	if err := s.Start(j, p); err != nil {
		return err
	}
	g.lastSeen[j] = now
	return nil
}

func sameSet(a, b map[*sim.JobState]bool) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if !b[k] {
			return false
		}
	}
	return true
}

// solve computes the max-min allocation X with HiGHS. Variables: X[j][t] for feasible pairs,
// then z. Rows: per job sum_t X <= 1; per type sum_j gpus_j X <= cap; per job
// sum_t thr X / equal_j - z >= 0.
func (g *gavel) solve(s *sim.State, jobs []*sim.JobState) error {
	g.alloc = map[*sim.JobState]map[string]float64{}
	if len(jobs) == 0 {
		return nil
	}
	types := s.GPUTypes()
	capacity := s.Capacity()
	if g.perNode == nil {
		g.perNode = map[string]int{}
		for _, n := range s.Nodes() {
			g.perNode[n.GPUType] = max(g.perNode[n.GPUType], n.GPUs)
		}
	}
	total := 0.0
	for _, t := range types {
		total += float64(capacity[t])
	}
	type v struct {
		j   int
		t   string
		thr float64
	}
	var vars []v
	equal := make([]float64, len(jobs))
	for ji, j := range jobs {
		for _, t := range types {
			nodes := (j.GPUs + g.perNode[t] - 1) / g.perNode[t]
			if nodes > j.MaxNodes || j.GPUs > capacity[t] {
				continue
			}
			thr := s.Rate(j, t, j.GPUs, nodes)
			if thr <= 0 {
				continue
			}
			vars = append(vars, v{ji, t, thr})
			equal[ji] += thr * float64(capacity[t]) / total
		}
	}
	nv := len(vars) + 1
	z := len(vars)
	m := highs.Model{Maximize: true, ColCosts: make([]float64, nv), ColLower: make([]float64, nv), ColUpper: make([]float64, nv)}
	for i := range vars {
		m.ColUpper[i] = 1
	}
	m.ColCosts[z] = 1
	m.ColUpper[z] = math.Inf(1)
	row := 0
	add := func(lb, ub float64, nz map[int]float64) {
		m.RowLower = append(m.RowLower, lb)
		m.RowUpper = append(m.RowUpper, ub)
		cols := make([]int, 0, len(nz))
		for c := range nz {
			cols = append(cols, c)
		}
		sort.Ints(cols)
		for _, c := range cols {
			m.ConstMatrix = append(m.ConstMatrix, highs.Nonzero{Row: row, Col: c, Val: nz[c]})
		}
		row++
	}
	byJob := make([]map[int]float64, len(jobs))
	fair := make([]map[int]float64, len(jobs))
	byType := map[string]map[int]float64{}
	for i, x := range vars {
		if byJob[x.j] == nil {
			byJob[x.j], fair[x.j] = map[int]float64{}, map[int]float64{z: -1}
		}
		byJob[x.j][i] = 1
		fair[x.j][i] = x.thr / equal[x.j]
		if byType[x.t] == nil {
			byType[x.t] = map[int]float64{}
		}
		byType[x.t][i] = float64(jobs[x.j].GPUs)
	}
	for ji := range jobs {
		if byJob[ji] == nil {
			continue // cannot run anywhere; the engine never admits such jobs
		}
		add(math.Inf(-1), 1, byJob[ji])
		add(0, math.Inf(1), fair[ji])
	}
	for _, t := range types {
		if byType[t] != nil {
			add(math.Inf(-1), float64(capacity[t]), byType[t])
		}
	}
	raw, err := m.ToRawModel()
	if err != nil {
		return fmt.Errorf("gavel LP: %w", err)
	}
	// lanl/highs v1.0.0's RawModel.Solve hands the Highs object to the solution and stops
	// referencing the model, whose finalizer then may free that object while the solution is
	// still read (a SIGSEGV seen with policies simulated in parallel): keep it alive.
	defer runtime.KeepAlive(raw)
	if err := raw.SetBoolOption("output_flag", false); err != nil {
		return fmt.Errorf("gavel LP: %w", err)
	}
	if err := raw.SetIntOption("threads", 1); err != nil {
		return fmt.Errorf("gavel LP: %w", err)
	}
	sol, err := raw.Solve()
	if err != nil {
		return fmt.Errorf("gavel LP over %d jobs: %w", len(jobs), err)
	}
	if sol.Status != highs.Optimal {
		return fmt.Errorf("gavel LP over %d jobs: status %s", len(jobs), sol.Status)
	}
	for i, x := range vars {
		val := sol.ColumnPrimal[i]
		if val <= 1e-9 {
			continue
		}
		j := jobs[x.j]
		if g.alloc[j] == nil {
			g.alloc[j] = map[string]float64{}
		}
		g.alloc[j][x.t] = val
	}
	return nil
}
