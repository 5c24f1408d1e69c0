package preempt

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/hetgpu/hetgpu/model/cluster"
	"github.com/hetgpu/hetgpu/sidecar/sched"
)

// Relocation. A queue's guarantee is a number of GPUs, not particular GPUs, but the guard keeps
// its guaranteed jobs where they run. Scattered over the nodes, they leave no node with room for
// a wide job of another queue (on modern-mix an 8-GPU job waited ~400 h for a whole A100 or
// H100 node that the same trace without queues gave it in minutes). So when a waiting job fits
// nowhere, other queues' guaranteed jobs on one unit may move: each must fit elsewhere now (in
// the virtual packing, beside every job that keeps its GPUs), is stopped and waits again, and
// its queue, below its guarantee for the moment, places it first in the same round (the queue
// stage's order and reserve), so that no round ends with the queue short. The waiting job takes
// the GPUs they leave. Only jobs the plan may stop at all move (MinRun is the hysteresis: a
// job moved once runs MinRun before it can move again); gangs never move (stopping one member
// stops all of it).

// move is a guaranteed job relocated to make room: its spot now and the one it moves to.
type move struct {
	key      string
	from, to spot
}

// relocation finds, for waiting job j that fits nowhere, the units to clear that need the
// fewest GPUs of other queues' guaranteed jobs moved (one unit, or up to j's distribution
// degree of one GPU type for a job that may spread), and the moves; ok is false when none
// works. jobs finds the running jobs by key; rate breaks ties by j's predicted rate per type.
func (g *guard) relocation(st *state, j *cluster.Job, feas []bool, jobs map[string]*cluster.Job, multi map[string]bool, rate func(t string) float64) ([]move, bool) {
	if g.t == nil || len(g.mine) == 0 {
		return nil, false
	}
	q := g.t.QueueOf(j.Namespace)
	// Movable: single-unit guaranteed jobs of other queues that are not below their guarantee
	// (their own waiting jobs come first there), not of a multi-group gang.
	byUnit := map[int][]string{}
	for k, spots := range g.mine {
		if g.keys[k] == youngKey || g.keys[k] == q || len(spots) != 1 || g.t.Owed[g.keys[k]] > 0 {
			continue
		}
		if x := jobs[k]; x == nil || multi[sched.GangKey(x)] {
			continue
		}
		byUnit[spots[0].unit] = append(byUnit[spots[0].unit], k)
	}
	if len(byUnit) == 0 {
		return nil, false
	}
	var best []move
	bestGPUs, bestRate := 0, 0.0
	try := func(units []int, need int, t string) {
		var keys []string
		for _, u := range units {
			keys = append(keys, byUnit[u]...)
		}
		if need <= 0 || len(keys) == 0 {
			return
		}
		moves, moved := g.clear(st, units, need, keys, jobs)
		if moves == nil {
			return
		}
		if r := rate(t); best == nil || moved < bestGPUs || moved == bestGPUs && r > bestRate {
			best, bestGPUs, bestRate = moves, moved, r
		}
	}
	spread := j.MaxNodes() > 1 && j.GPUsPerNode == 0
	for _, t := range st.types {
		var cands []int
		for u := range st.units {
			if un := &st.units[u]; feas[u] && un.gpuType == t && un.virt > 0 {
				cands = append(cands, u)
			}
		}
		one := false
		for _, u := range cands {
			if un := &st.units[u]; un.virt >= j.GPUs {
				one = true
				try([]int{u}, j.GPUs-(un.virt-un.res), t)
			}
		}
		if one || !spread {
			continue
		}
		// The emptiest units up to the distribution degree, as fit spreads a job.
		slices.SortStableFunc(cands, func(a, b int) int { return cmp.Compare(st.units[b].virt, st.units[a].virt) })
		cands = cands[:min(len(cands), j.MaxNodes())]
		free, room := 0, 0
		for _, u := range cands {
			free += st.units[u].virt
			room += st.units[u].virt - st.units[u].res
		}
		if free >= j.GPUs {
			try(cands, j.GPUs-room, t)
		}
	}
	return best, best != nil
}

// clear moves guaranteed jobs (keys, all on the given units) off those units until need GPUs
// are free there: the largest first (fewest restarts), each to the best-fitting other unit it
// may use that has room beside everything reserved so far. It returns nil when they cannot
// make room.
func (g *guard) clear(st *state, units []int, need int, keys []string, jobs map[string]*cluster.Job) ([]move, int) {
	slices.SortFunc(keys, func(a, b string) int {
		if c := cmp.Compare(g.mine[b][0].gpus, g.mine[a][0].gpus); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	})
	taken := map[int]int{} // GPUs the moves so far reserve per unit
	var out []move
	moved := 0
	for _, k := range keys {
		if need <= 0 {
			break
		}
		from := g.mine[k][0]
		feas := st.feasible(jobs[k])
		to, toScore := -1, 0
		for d := range st.units {
			du := &st.units[d]
			room := du.virt - du.res - taken[d]
			if slices.Contains(units, d) || !feas[d] || room < from.gpus {
				continue
			}
			// Best fit, GPUs free now first (the move then stops no one else).
			score := room - from.gpus
			if du.now-taken[d] < from.gpus {
				score += 1 << 20
			}
			if to < 0 || score < toScore {
				to, toScore = d, score
			}
		}
		if to < 0 {
			continue
		}
		taken[to] += from.gpus
		out = append(out, move{key: k, from: from, to: spot{to, from.gpus}})
		need -= from.gpus
		moved += from.gpus
	}
	if need > 0 {
		return nil, 0
	}
	return out, moved
}

// apply books the moves: each job claims its new spot and no longer protects its old one.
func (g *guard) apply(st *state, moves []move) {
	for _, m := range moves {
		st.claim([]spot{m.to}, true)
		g.prot[m.from.unit][g.keys[m.key]] -= m.from.gpus
		delete(g.mine, m.key)
	}
}

// multiGroupGangs are the gangs ("namespace/id") with several groups running or waiting.
func multiGroupGangs(snap *cluster.Snapshot) map[string]bool {
	groups := map[string]map[string]bool{}
	add := func(ns, id, group string) {
		k := cluster.JobKey(ns, id)
		if groups[k] == nil {
			groups[k] = map[string]bool{}
		}
		groups[k][group] = true
	}
	for _, a := range snap.Running {
		add(a.Namespace, a.JobID, a.Group)
	}
	for _, j := range snap.Pending {
		add(j.Namespace, j.ID, j.Group)
	}
	out := map[string]bool{}
	for k, gs := range groups {
		if len(gs) > 1 {
			out[k] = true
		}
	}
	return out
}

// relocateReason is the preemption reason of a moved job.
func relocateReason(m move, st *state, j *cluster.Job) string {
	return fmt.Sprintf("moving within its queue's guarantee to %s to make room for %s/%s", st.units[m.to.unit].nodeID, j.Namespace, j.ID)
}
