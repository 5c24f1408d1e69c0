package preempt

import (
	"slices"

	"github.com/hetgpu/hetgpu/model/cluster"
	"github.com/hetgpu/hetgpu/sidecar/sched"
)

// guard keeps the GPUs of guaranteed running jobs (cluster.Snapshot.Tenancy: preemptible jobs
// within their queue's guarantee) from jobs of other queues in the virtual packing: until such
// a job is visited, its GPUs count against every job of another queue (unit.res). Jobs of its
// own queue may take them (the queue's own ranking decides), and once visited it keeps them or
// moves as any job does. Borrowed jobs younger than MinRun are kept the same way from every
// job but those of queues owed their guarantee (reclaim does not wait for MinRun). Without
// tenancy the guard does nothing.
type guard struct {
	t *cluster.Tenancy
	// prot is, per unit, the GPUs of unvisited protected jobs by the queue that may take them
	// (youngKey: queues owed their guarantee); mine the spots of each protected job.
	prot map[int]map[string]int
	mine map[string][]spot
	keys map[string]string
}

// youngKey marks borrowed jobs younger than MinRun in guard.prot.
const youngKey = "\x00young"

// reclaimable reports whether a job under MinRun may still be reclaimed: it is borrowed and
// some queue is owed its guarantee.
func reclaimable(t *cluster.Tenancy, k string) bool {
	return t != nil && len(t.Owed) > 0 && !t.Guaranteed[k]
}

func newGuard(snap *cluster.Snapshot, held map[string][]spot, running, young map[string]bool) *guard {
	g := &guard{t: snap.Tenancy, prot: map[int]map[string]int{}, mine: map[string][]spot{}, keys: map[string]string{}}
	if g.t == nil {
		return g
	}
	for k, spots := range held {
		if !running[k] || !g.t.Guaranteed[k] && !young[k] {
			continue
		}
		q := g.t.QueueOf(nsOf(k))
		if young[k] {
			q = youngKey
		}
		g.mine[k], g.keys[k] = spots, q
		for _, s := range spots {
			if g.prot[s.unit] == nil {
				g.prot[s.unit] = map[string]int{}
			}
			g.prot[s.unit][q] += s.gpus
		}
	}
	return g
}

// visit releases job k's own protection and sets every unit's res for job j's queue.
func (g *guard) visit(st *state, j *cluster.Job, k string) {
	if g.t == nil {
		return
	}
	q := g.t.QueueOf(j.Namespace)
	if spots, ok := g.mine[k]; ok {
		for _, s := range spots {
			g.prot[s.unit][g.keys[k]] -= s.gpus
		}
		delete(g.mine, k)
	}
	owed := g.t.Owed[q] > 0
	for u, byQ := range g.prot {
		res := 0
		for oq, n := range byQ {
			if oq != q && (oq != youngKey || !owed) {
				res += n
			}
		}
		st.units[u].res = res
	}
}

// nsOf is the namespace of a job key "namespace/id/group".
func nsOf(key string) string {
	for i := 0; i < len(key); i++ {
		if key[i] == '/' {
			return key[:i]
		}
	}
	return key
}

// withinQueues sorts each queue's jobs by cmp (stable) in the positions its jobs hold, so the
// order across queues is kept.
func withinQueues(order []sched.Ranked, t *cluster.Tenancy, cmp func(a, b sched.Ranked) int) []sched.Ranked {
	pos := map[string][]int{}
	jobs := map[string][]sched.Ranked{}
	var queues []string
	for i, r := range order {
		q := t.QueueOf(r.Job.Namespace)
		if pos[q] == nil {
			queues = append(queues, q)
		}
		pos[q] = append(pos[q], i)
		jobs[q] = append(jobs[q], r)
	}
	out := make([]sched.Ranked, len(order))
	for _, q := range queues {
		js := jobs[q]
		slices.SortStableFunc(js, cmp)
		for k, i := range pos[q] {
			out[i] = js[k]
		}
	}
	return out
}
