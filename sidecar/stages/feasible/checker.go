package feasible

import (
	"hash/fnv"
	"maps"
	"slices"
	"sync"

	"github.com/hetgpu/hetgpu/model/cluster"
	"github.com/hetgpu/hetgpu/model/constraint"
	"github.com/hetgpu/hetgpu/sidecar/sched"
)

// maxCached bounds the cache: beyond it the cache starts afresh (a queue of that many
// distinct requests is rare, and a miss only costs one pass over the nodes).
const maxCached = 4096

// Checker runs Check for every pending group of a round. The Ever view's answer is cached per
// (request, cluster shape): it is computed again only when a node joins, leaves or changes
// (status, attributes, devices, health) or a new kind of request arrives; a drain or an
// eligibility change does not count, the Ever view ignores both. T_min is judged afresh each
// time, the predictor learns. Safe for concurrent use.
type Checker struct {
	opts Options

	mu    sync.Mutex
	shape uint64
	cache map[string]cached
	// misses counts capacity computations (tests check the cache with it).
	misses int
}

type cached struct {
	req *request
	err error
	cap *capacity
}

// NewChecker returns a Checker following opts.
func NewChecker(opts Options) *Checker { return &Checker{opts: opts, cache: map[string]cached{}} }

// Triage checks every pending job of snap in the Ever view; verdicts are in snap.Pending's
// order. rs is the round's state (compiled constraints; nil compiles afresh), as for Types
// and Now.
func (c *Checker) Triage(rs *sched.RoundState, snap *cluster.Snapshot, pred sched.Predictor) []Verdict {
	shape := Shape(snap)
	c.mu.Lock()
	if shape != c.shape || len(c.cache) > maxCached {
		c.shape, c.cache = shape, map[string]cached{}
	}
	c.mu.Unlock()
	out := make([]Verdict, len(snap.Pending))
	for i := range snap.Pending {
		j := &snap.Pending[i]
		e := c.ever(rs, snap, shape, j)
		if e.err != nil {
			out[i] = Verdict{Invalid: true, Reason: e.err.Error()}
			continue
		}
		out[i] = e.req.judge(e.cap, j, Ever, pred, c.opts)
	}
	return out
}

// ever is job's request and its Ever-view capacity on snap (of the given Shape), from the
// cache or computed and cached.
func (c *Checker) ever(rs *sched.RoundState, snap *cluster.Snapshot, shape uint64, j *cluster.Job) cached {
	sig := signature(j)
	c.mu.Lock()
	e, ok := c.cache[sig]
	c.mu.Unlock()
	if ok {
		return e
	}
	e.req, e.err = compile(rs, j)
	if e.err == nil {
		e.cap = capacityOf(snap, e.req, Ever)
	}
	c.mu.Lock()
	if c.shape == shape {
		c.cache[sig] = e
	}
	c.misses++
	c.mu.Unlock()
	return e
}

// Types are, for each job, the GPU types it can ever run on in snap (the Ever view: the
// type alone holds its request with every healthy GPU free, and meets its T_min where the
// options ask), sorted; nil for a job that fits none or cannot be evaluated. It shares
// Triage's cache, so after a round's Triage it costs a lookup and the T_min predictions.
func (c *Checker) Types(rs *sched.RoundState, snap *cluster.Snapshot, jobs []*cluster.Job, pred sched.Predictor) [][]string {
	shape := Shape(snap)
	c.mu.Lock()
	if shape != c.shape || len(c.cache) > maxCached {
		c.shape, c.cache = shape, map[string]cached{}
	}
	c.mu.Unlock()
	out := make([][]string, len(jobs))
	for i, j := range jobs {
		if e := c.ever(rs, snap, shape, j); e.err == nil {
			out[i] = e.req.types(e.cap, j, pred, c.opts)
		}
	}
	return out
}

// Now checks jobs against what is free in snap now: nodes open to new work, healthy GPUs no
// running allocation holds. Jobs with the same request share the work.
func (c *Checker) Now(rs *sched.RoundState, snap *cluster.Snapshot, jobs []*cluster.Job, pred sched.Predictor) []Verdict {
	memo := map[string]cached{}
	out := make([]Verdict, len(jobs))
	for i, j := range jobs {
		sig := signature(j)
		e, ok := memo[sig]
		if !ok {
			e.req, e.err = compile(rs, j)
			if e.err == nil {
				e.cap = capacityOf(snap, e.req, Now)
			}
			memo[sig] = e
		}
		if e.err != nil {
			out[i] = Verdict{Invalid: true, Reason: e.err.Error()}
			continue
		}
		out[i] = e.req.judge(e.cap, j, Now, pred, c.opts)
	}
	return out
}

// Shape hashes what the Ever view depends on: every node's identity, readiness, attributes,
// meta, device groups and instance health. Drain and eligibility are left out on purpose.
func Shape(snap *cluster.Snapshot) uint64 {
	var sum uint64
	h := fnv.New64a()
	w := func(s string) {
		_, _ = h.Write([]byte(s))
		_, _ = h.Write([]byte{0})
	}
	sorted := func(m map[string]string) {
		for _, k := range slices.Sorted(maps.Keys(m)) {
			w(k)
			w(m[k])
		}
	}
	for i := range snap.Nodes {
		n := &snap.Nodes[i]
		h.Reset()
		w(n.ID)
		w(n.Name)
		w(n.Datacenter)
		w(n.Pool)
		w(n.Class)
		if n.Status == "ready" {
			w("ready")
		}
		w("attr")
		sorted(n.Attributes)
		w("meta")
		sorted(n.Meta)
		for gi := range n.Devices {
			g := &n.Devices[gi]
			w("dev")
			w(g.ID())
			w(g.GPUType)
			attrs := make(map[string]string, len(g.Attributes))
			for k, a := range g.Attributes {
				attrs[k] = constraint.String(a) + a.Unit
			}
			sorted(attrs)
			for _, in := range g.Instances {
				w(in.ID)
				if in.Healthy {
					w("ok")
				}
			}
		}
		// Order-independent: node order in a snapshot carries no meaning.
		sum += h.Sum64()
	}
	return sum
}
