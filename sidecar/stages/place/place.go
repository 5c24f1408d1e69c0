// Package place is hetgpu's placement engine: given a snapshot, the ranked pending jobs and a
// throughput/power predictor, it chooses for each job the nodes and exact GPU instance IDs (or
// leaves it waiting) by solving a MILP on HiGHS, respecting every rule Nomad will check
// (model/constraint) so that a pinned job is always placeable.
//
// Model (see Config for the objective). Capacity domains are device groups on ready nodes (or,
// under tenant isolation, one PCIe switch of a group) with their healthy free GPUs. Domains no
// job can tell apart form classes (classes.go). A column x[j,o] is one way to place job j: GPUs
// of one type on one class, or on several for jobs that may span D_j nodes (exactly
// GPUsPerNode each when set), or on named GPUs (pinned by ${device.ids}, or shared with running
// jobs that allow it). Rows: one column per job; per class, its free GPUs and, per GPU count
// s, how many items of >= s GPUs fit; named GPUs at most once (or MaxShare holders); optional
// per-node job caps and per-namespace GPU caps; tenant isolation keeps namespaces apart per
// PCIe switch. Columns below a job's T_min are never built.
//
// Solving (milp_solve.go; the rows are written in milp_build.go): greedy, then the LP
// relaxation and its rounding, a restricted MILP, and
// the full MILP warm-started from the best solution so far (Highs_setSolution; lanl/highs has
// no call for it, see highs_shim.go), stopping as soon as a solution is within MIPGap of the
// LP bound. Solutions are realized into concrete domains first fit decreasing, concrete IDs
// are picked after that (NVLink cliques first). On HiGHS error or time limit the best solution
// at hand is used and Stats.Fallback is set. The LP and MILP steps also end at the round
// deadline (Config.RoundDeadline), measured from the start of the round (Stats.DeadlineHit; a
// fallback too when nothing better than greedy was found by then). Large models are
// decomposed by GPU type
// (decompose.go). Jobs left out, and those behind the window, are then backfilled greedily;
// a round is never worth less than the greedy round.
package place

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/hetgpu/hetgpu/model/cluster"
	"github.com/hetgpu/hetgpu/sidecar/sched"
)

// Skip is a job the placer could not consider, and why.
type Skip struct {
	Job    string
	Reason string
}

// Stats is sched.PlaceStats plus what the CLI and tests want to see of a solve.
type Stats struct {
	sched.PlaceStats
	// Window is how many ranked jobs the optimiser saw; LookAhead how many formed the
	// look-ahead set.
	Window, LookAhead int
	Placed            int
	// Backfilled counts decisions made by the second pass (jobs left out by the first model
	// or behind the window, on what the first left).
	Backfilled int
	Skipped    []Skip
	// HiGHS statistics summed over all solves of the call.
	Rows, Cols   int
	MIPNodes     int64
	LPIterations int64
	Solves       int
	// Subproblems is how many per-type models the decomposition solved.
	Subproblems int
	// GreedyObjective is the objective of the greedy round (greedy window, then backfill).
	GreedyObjective float64
	// Lambda is the round's base energy weight after load adaptation; Load the load it saw.
	Lambda, Load float64
	// AssignConflicts counts chosen options dropped because concrete IDs ran out (a bug if
	// ever non-zero).
	AssignConflicts int
	BuildTime       time.Duration
	// Bound is the sum of the LP bounds of the solved models; Status their HiGHS outcomes.
	Bound  float64
	Status string
	// GreedyKept is set when the greedy round was worth more than the optimised one and was
	// used instead.
	GreedyKept bool
	// DeadlineHit is set when the round deadline (Config.RoundDeadline) cut or skipped an LP
	// or MILP step.
	DeadlineHit bool
	// Phases is the wall time of each step of the round, in order; LPTime and MILPTime the
	// time spent in HiGHS on LP relaxations and on MILPs, summed over solves (the
	// decomposition's parallel solves overlap).
	Phases           []Phase
	LPTime, MILPTime time.Duration
}

// Phase is one step of a round and its wall time.
type Phase struct {
	Name string
	Time time.Duration
}

// lap records the time since *last as phase name and moves *last to now.
func (s *Stats) lap(name string, last *time.Time) {
	now := time.Now()
	s.Phases = append(s.Phases, Phase{name, now.Sub(*last)})
	*last = now
}

func (s *Stats) add(ss solveStats) {
	s.Solves++
	s.Rows += ss.rows
	s.Cols += ss.cols
	s.MIPNodes += ss.nodes
	s.LPIterations += ss.lpIters
	s.GreedyObjective += ss.greedyObjective
	s.Objective += ss.objective
	if !math.IsInf(ss.gap, 0) && ss.gap > s.Gap {
		s.Gap = ss.gap
	}
	if ss.fallback {
		s.fallback(ss.reason)
	}
	s.DeadlineHit = s.DeadlineHit || ss.deadlineHit
	s.LPTime += ss.lpTime
	s.MILPTime += ss.milpTime
	if ss.bound > 0 {
		s.Bound += ss.bound
	}
	if ss.status != "" && !strings.Contains(s.Status, ss.status) {
		if s.Status != "" {
			s.Status += "; "
		}
		s.Status += ss.status
	}
}

func (s *Stats) fallback(reason string) {
	s.Fallback = true
	if !strings.Contains(s.FallbackReason, reason) {
		if s.FallbackReason != "" {
			s.FallbackReason += "; "
		}
		s.FallbackReason += reason
	}
}

// Placer implements sched.Placer. It is safe for concurrent use; it keeps the load history
// the adaptive energy weight needs.
type Placer struct {
	cfg    Config
	logger hclog.Logger

	mu    sync.Mutex
	loads []float64
}

// New returns a Placer; the configuration is validated.
func New(cfg Config, logger hclog.Logger) (*Placer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	cfg.NamespaceShare = cloneMap(cfg.NamespaceShare)
	return &Placer{cfg: cfg, logger: logger.Named("place")}, nil
}

// HonorsMinThroughput reports whether the placer drops placements below a job's T_min (the
// sidecar's feasibility check follows the same rule).
func (p *Placer) HonorsMinThroughput() bool { return p.cfg.HonorMinThroughput }

func cloneMap(m map[string]float64) map[string]float64 {
	if m == nil {
		return nil
	}
	out := make(map[string]float64, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// roundBudget is the round deadline for a cluster of healthy GPUs: RoundDeadline per 1,024
// of them (the work of a round grows with the cluster), at least RoundDeadline.
func roundBudget(perK time.Duration, healthy int) time.Duration {
	return time.Duration(float64(perK) * max(1, float64(healthy)/1024))
}

// Warm places one synthetic round of about the given size (a random cluster of gpus GPUs and
// a queue of jobs pending jobs, see RandomSnapshot) and discards it, so that the first real
// round does not pay for the process's heap growth and HiGHS's first solves (at 256 jobs on
// 1,024 GPUs that first round took about twice as long as the others). The placer's load
// history is not touched. Long-running callers call it once at start-up.
func (p *Placer) Warm(ctx context.Context, jobs, gpus int) error {
	const perNode = 8
	spec := BenchSpec{Jobs: max(jobs, 1), GPUs: max(perNode, gpus/perNode*perNode), Types: 4, Seed: 0x5eed}
	snap, err := RandomSnapshot(spec)
	if err != nil {
		return fmt.Errorf("place: warm-up snapshot: %w", err)
	}
	pred := NewPriorPredictor()
	ranked, err := FIFO{}.Rank(ctx, snap, pred)
	if err != nil {
		return fmt.Errorf("place: warm-up ranking: %w", err)
	}
	scratch := &Placer{cfg: p.cfg, logger: hclog.NewNullLogger()}
	if _, _, err := scratch.PlaceDetailed(ctx, snap, ranked, pred); err != nil {
		return fmt.Errorf("place: warm-up round: %w", err)
	}
	return nil
}

// Config returns the placer's configuration.
func (p *Placer) Config() Config {
	c := p.cfg
	c.NamespaceShare = cloneMap(c.NamespaceShare)
	return c
}

// Place implements sched.Placer.
func (p *Placer) Place(ctx context.Context, st *sched.RoundState, snap *cluster.Snapshot, ranked []sched.Ranked, pred sched.Predictor) ([]cluster.Decision, sched.PlaceStats, error) {
	d, s, err := p.placeDetailed(ctx, st, snap, ranked, pred)
	return d, s.PlaceStats, err
}

// adaptLambda records this round's load and returns the energy weight for it.
func (p *Placer) adaptLambda(load float64) float64 {
	base := p.cfg.EnergyWeight
	if !p.cfg.EnergyAdaptive || p.cfg.LoadHistory == 0 {
		return base
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	lambda := base
	if len(p.loads) >= 2 {
		mean, sd := meanStd(p.loads)
		if sd > 1e-9 {
			lambda = base * math.Max(0, math.Min(2, 1-(load-mean)/sd))
		}
	}
	p.loads = append(p.loads, load)
	if len(p.loads) > p.cfg.LoadHistory {
		p.loads = p.loads[len(p.loads)-p.cfg.LoadHistory:]
	}
	return lambda
}

func meanStd(xs []float64) (float64, float64) {
	var s float64
	for _, x := range xs {
		s += x
	}
	mean := s / float64(len(xs))
	var v float64
	for _, x := range xs {
		v += (x - mean) * (x - mean)
	}
	return mean, math.Sqrt(v / float64(len(xs)))
}

// PlaceDetailed is Place with the detailed statistics.
func (p *Placer) PlaceDetailed(ctx context.Context, snap *cluster.Snapshot, ranked []sched.Ranked, pred sched.Predictor) ([]cluster.Decision, Stats, error) {
	return p.placeDetailed(ctx, nil, snap, ranked, pred)
}

// placeDetailed is PlaceDetailed reading the jobs' compiled constraints from the round's state.
func (p *Placer) placeDetailed(ctx context.Context, rs *sched.RoundState, snap *cluster.Snapshot, ranked []sched.Ranked, pred sched.Predictor) ([]cluster.Decision, Stats, error) {
	start := time.Now()
	var stats Stats
	if snap == nil {
		return nil, stats, fmt.Errorf("place: snapshot is nil")
	}
	if err := ctx.Err(); err != nil {
		return nil, stats, err
	}
	if pred == nil {
		pred = NewPriorPredictor()
	}
	for i, r := range ranked {
		if r.Job == nil {
			return nil, stats, fmt.Errorf("place: ranked[%d].Job is nil", i)
		}
	}
	deadline := start.Add(p.cfg.TimeLimit)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	m, st0, err := newModel(p.cfg, rs, snap, ranked, pred, p.cfg.EnergyWeight)
	if err != nil {
		return nil, stats, err
	}
	last := start
	stats.lap("index", &last)
	m.lambda = p.adaptLambda(m.load)
	if p.cfg.RoundDeadline > 0 {
		m.roundEnd = start.Add(roundBudget(p.cfg.RoundDeadline, m.healthy))
	}
	for i := range m.jobs {
		if m.jobs[i].j.Hetgpu.EnergyWeight <= 0 {
			m.jobs[i].lambda = m.lambda
		}
		if m.jobs[i].err != nil {
			stats.Skipped = append(stats.Skipped, Skip{Job: m.jobs[i].j.Key(), Reason: m.jobs[i].err.Error()})
			p.logger.Warn("job cannot be placed by hetgpu", "job", m.jobs[i].j.Key(), "error", m.jobs[i].err)
		}
	}
	stats.Lambda, stats.Load, stats.Window, stats.LookAhead = m.lambda, m.load, m.window, len(m.lookAhead)

	// Candidates for the window, at class level.
	var order []int
	for ji := 0; ji < m.window; ji++ {
		if m.jobs[ji].err == nil {
			order = append(order, ji)
		}
	}
	full := m.prepareScope(order, nil, st0, nil)
	alts := make(map[int][]*option, len(order))
	for i := range full.opts {
		o := &full.opts[i]
		alts[o.job] = append(alts[o.job], o)
	}
	stats.Candidates = len(full.opts)
	stats.BuildTime = time.Since(start)
	stats.lap("candidates", &last)
	if err := ctx.Err(); err != nil {
		return nil, stats, err
	}

	st := st0.clone()
	solver := p.cfg.Solver
	if solver == SolverAuto {
		solver = SolverMILP
		if len(full.opts) > p.cfg.DecomposeAbove {
			solver = SolverDecomposed
		}
	}
	stats.Solver = solver
	// The greedy round (greedy window, then greedy backfill) comes first: it is the incumbent
	// the optimiser starts from and the floor of the round, and computing it before the MILP
	// steps leaves less work after the round deadline.
	var greedyRound []option
	if solver != SolverGreedy {
		gst := st0.clone()
		full.greedy = m.greedyRealize(full, order, gst)
		gb := m.backfill(full.greedy, gst, nil, nil)
		greedyRound = append(append(make([]option, 0, len(full.greedy)+len(gb)), full.greedy...), gb...)
		stats.lap("greedy round", &last)
	}
	var chosen []option
	switch solver {
	case SolverGreedy:
		chosen = m.greedyRealize(full, order, st)
		stats.Objective = sumOpts(chosen)
	case SolverMILP:
		var ss solveStats
		chosen, ss = m.solveScope(full, st, deadline)
		stats.add(ss)
		for i := range chosen {
			m.apply(&chosen[i], st)
		}
		stats.Objective = sumOpts(chosen)
	case SolverDecomposed:
		chosen = m.decompose(full, st, deadline, &stats)
		stats.Objective = sumOpts(chosen)
	}
	stats.Variables = stats.Cols
	stats.lap("solve", &last)

	// Second pass: every job still waiting (left out by the optimiser, or behind the window)
	// gets fresh columns on what is left, solved the same way. The first model's columns
	// cover each job's best classes; once those fill up, other nodes are the best left.
	var bf []option
	if solver == SolverGreedy {
		bf = m.backfill(chosen, st, alts, nil)
	} else {
		var ss solveStats
		bf = m.backfill(chosen, st, alts, func(sc *scope) []option {
			sc.noPolish = true
			var out []option
			out, ss = m.solveScope(sc, st, deadline)
			for i := range out {
				m.apply(&out[i], st)
			}
			return out
		})
		if ss.cols > 0 {
			o := stats.Objective
			stats.add(ss)
			stats.Objective = o
		}
	}
	chosen = append(chosen, bf...)
	stats.Objective += sumOpts(bf)
	stats.Backfilled = len(bf)
	stats.lap("second pass", &last)
	// Never worse than greedy: the optimiser only sees the window, so its choices can leave
	// less room for the jobs behind it than greedy's do. Compare the complete rounds.
	if solver != SolverGreedy {
		stats.GreedyObjective = sumOpts(greedyRound)
		if stats.GreedyObjective > stats.Objective+1e-9 {
			chosen = greedyRound
			stats.Objective, stats.Backfilled, stats.GreedyKept = stats.GreedyObjective, len(greedyRound)-len(full.greedy), true
		}
	} else {
		stats.GreedyObjective = stats.Objective
	}

	label := solver
	if stats.GreedyKept {
		label = "greedy (worth more than the " + solver + " round)"
	}
	decisions := m.pairOnIdle(m.admitPairs(m.assign(chosen, alts, st0, label, &stats)))
	stats.Placed = len(decisions)
	stats.SolveTime = time.Since(start)
	stats.lap("assign", &last)
	p.logger.Debug("placement round", "jobs", len(ranked), "window", m.window, "candidates", stats.Candidates,
		"solver", stats.Solver, "placed", stats.Placed, "backfilled", stats.Backfilled, "objective", stats.Objective,
		"fallback", stats.Fallback, "time", stats.SolveTime.String())
	return decisions, stats, nil
}

func sumOpts(os []option) float64 {
	s := 0.0
	for _, o := range os {
		s += o.value
	}
	return s
}

// backfill places the jobs chosen leaves waiting on what is left of st (mutated): with solve
// (which must apply what it returns to st), or else greedily in rank order. alts, when not
// nil, collects the options of jobs beyond the window for explanations.
func (m *model) backfill(chosen []option, st *state, alts map[int][]*option, solve func(*scope) []option) []option {
	placed := map[int]bool{}
	for _, o := range chosen {
		placed[o.job] = true
	}
	var rest []int
	for ji := range m.jobs {
		if !placed[ji] && m.jobs[ji].err == nil {
			rest = append(rest, ji)
		}
	}
	if len(rest) == 0 || !m.anyCapacity(st) {
		return nil
	}
	bsc := m.prepareScope(rest, nil, st, nil)
	if alts != nil {
		for i := range bsc.opts {
			if o := &bsc.opts[i]; o.job >= m.window && len(alts[o.job]) < m.cfg.MaxOptionsPerJob {
				alts[o.job] = append(alts[o.job], o)
			}
		}
	}
	if solve != nil {
		return solve(bsc)
	}
	return m.greedyRealize(bsc, rest, st)
}

// anyCapacity reports whether any GPU is free or shareable.
func (m *model) anyCapacity(st *state) bool {
	for _, f := range st.domFree {
		if f > 0 {
			return true
		}
	}
	if m.cfg.MaxShare > 1 {
		for ii := range m.insts {
			if m.insts[ii].used > 0 && m.insts[ii].shareable && st.instUsed[ii] < m.cfg.MaxShare {
				return true
			}
		}
	}
	return false
}

// assign picks concrete instance IDs for the chosen options (named instances first, then the
// largest sets, each an NVLink clique where one exists) and writes the decisions.
func (m *model) assign(chosen []option, alts map[int][]*option, st0 *state, solver string, stats *Stats) []cluster.Decision {
	taken := append([]int(nil), st0.instUsed...)
	sort.SliceStable(chosen, func(a, b int) bool {
		if chosen[a].concrete != chosen[b].concrete {
			return chosen[a].concrete
		}
		return m.jobs[chosen[a].job].g > m.jobs[chosen[b].job].g
	})
	type result struct {
		o     option
		insts [][]int // per part
	}
	var results []result
	for _, o := range chosen {
		r := result{o: o}
		ok := true
		var got []int
		for _, pt := range o.parts {
			if pt.insts != nil {
				r.insts = append(r.insts, pt.insts)
				got = append(got, pt.insts...)
				continue
			}
			var cands []int
			for _, ii := range m.doms[pt.dom].insts {
				if taken[ii] == 0 && !slices.Contains(got, ii) {
					cands = append(cands, ii)
				}
			}
			if len(cands) < pt.count {
				ok = false
				break
			}
			set := m.pickSet(m.doms[pt.dom].unit, cands, pt.count)
			r.insts = append(r.insts, set)
			got = append(got, set...)
		}
		if !ok {
			stats.AssignConflicts++
			continue
		}
		for _, ii := range got {
			taken[ii]++
		}
		results = append(results, r)
	}
	sort.SliceStable(results, func(a, b int) bool { return results[a].o.job < results[b].o.job })
	out := make([]cluster.Decision, 0, len(results))
	for _, r := range results {
		o := r.o
		j := &m.jobs[o.job]
		d := cluster.Decision{Namespace: j.j.Namespace, JobID: j.j.ID, Group: j.j.Group, GPUType: m.types[o.typ],
			PredThroughput: o.T, PredPowerW: o.P, Score: j.score, Rank: j.pos + 1,
			Shared: o.coloc || len(m.coRunners(&o)) > 0}
		byUnit := map[int]int{}
		for pi, pt := range o.parts {
			u := m.doms[pt.dom].unit
			ai, ok := byUnit[u]
			if !ok {
				un := &m.units[u]
				ai = len(d.Assign)
				byUnit[u] = ai
				d.Assign = append(d.Assign, cluster.Assignment{NodeID: m.nodes[un.node].n.ID, DeviceGroup: un.g.ID()})
			}
			for _, ii := range r.insts[pi] {
				d.Assign[ai].InstanceIDs = append(d.Assign[ai].InstanceIDs, m.insts[ii].in.ID)
			}
		}
		for i := range d.Assign {
			sort.Strings(d.Assign[i].InstanceIDs)
		}
		d.Explanation = m.explain(&o, alts[o.job], solver, stats)
		out = append(out, d)
	}
	return out
}

// describe is a short human form of an option: "2x a100 on gpu-07 (NVLink)".
func (m *model) describe(o *option) string {
	j := &m.jobs[o.job]
	var nodes []string
	seen := map[int]bool{}
	for _, u := range o.units {
		nd := m.units[u].node
		if !seen[nd] {
			seen[nd] = true
			name := m.nodes[nd].n.Name
			if name == "" {
				name = m.nodes[nd].n.ID
			}
			nodes = append(nodes, name)
		}
	}
	s := fmt.Sprintf("%dx %s on %s", j.g, m.types[o.typ], strings.Join(nodes, "+"))
	switch {
	case o.coloc:
		s += " (shared with running jobs)"
	case o.nodes > 1:
		s += fmt.Sprintf(" (%d nodes)", o.nodes)
	case j.g > 1 && o.nvlink:
		s += " (NVLink)"
	case j.g > 1:
		s += " (PCIe)"
	}
	return s
}

// explain says why: rank and priority, what was chosen with its prediction and terms, and the
// best alternatives considered on other GPU types or nodes.
func (m *model) explain(o *option, alts []*option, solver string, stats *Stats) string {
	j := &m.jobs[o.job]
	var b strings.Builder
	fmt.Fprintf(&b, "rank %d of %d (ranker score %.3g, priority %.2f); placed %s: %.4g/s predicted (%.0f%% of its best GPU type), %.0f W; ",
		j.pos+1, len(m.jobs), j.score, j.prio, m.describe(o), o.T, 100*o.S, o.P)
	fmt.Fprintf(&b, "value %.3g = %d GPUs x (reward %.2g + speed %.2f x %.2g - energy %.2f x %.2g - fragmentation %.2f x %.2g - imbalance %.2f x %.2g + look-ahead %.2f x %.2g",
		o.value, j.g, m.cfg.PlaceReward, o.S, m.cfg.PriorityWeight*j.prio, o.E, j.lambda, o.F, m.cfg.FragmentWeight,
		o.L, m.cfg.ImbalanceWeight, o.A, m.cfg.LookAheadWeight)
	if o.Aff != 0 {
		fmt.Fprintf(&b, " + affinity %.2f x %.2g", o.Aff, m.cfg.AffinityWeight)
	}
	b.WriteString(")")
	if j.tmin > 0 {
		fmt.Fprintf(&b, "; meets T_min %.4g/s", j.tmin)
	}
	b.WriteString(m.shareNote(o))
	var others []option
	seenType := map[int]bool{o.typ: true}
	for _, a := range alts { // best first; prefer one per other type, then other nodes
		if !seenType[a.typ] {
			seenType[a.typ] = true
			others = append(others, *a)
		}
	}
	for _, a := range alts {
		if len(others) >= 3 {
			break
		}
		if a.typ == o.typ && optionKey(a) != optionKey(o) && !containsOpt(others, a) {
			others = append(others, *a)
		}
	}
	if len(others) > 3 {
		others = others[:3]
	}
	if len(others) > 0 {
		b.WriteString("; alternatives considered: ")
		for i, a := range others {
			if i > 0 {
				b.WriteString("; ")
			}
			fmt.Fprintf(&b, "%s %.4g/s %.0f W value %.3g", m.describe(&a), a.T, a.P, a.value)
		}
	}
	fmt.Fprintf(&b, "; solver %s", solver)
	if stats.Fallback {
		fmt.Fprintf(&b, " (fallback: %s)", stats.FallbackReason)
	}
	return b.String()
}

func containsOpt(os []option, o *option) bool {
	k := optionKey(o)
	for i := range os {
		if optionKey(&os[i]) == k {
			return true
		}
	}
	return false
}
