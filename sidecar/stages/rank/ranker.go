package rank

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"time"

	"github.com/hetgpu/hetgpu/model/cluster"
	"github.com/hetgpu/hetgpu/sidecar/sched"
)

// Ranker orders the pending queue with a learned policy, or with Heuristic when it has none.
// It implements sched.Ranker. The oldest MaxWindow jobs are scored (RLTune's window) and
// ordered by score; the jobs beyond the window follow in submission order. Safe for concurrent
// use.
type Ranker struct {
	mu sync.Mutex
	// policy is nil for the heuristic fallback.
	policy    *Policy
	heuristic Heuristic
	ext       Extractor
	decider   Decider
	// explain adds the named raw features to every Ranked (for the queue and explain APIs).
	explain bool
	raw     []float64
	// in is raw narrowed to the policy's width (a version 1 policy reads a prefix of each row).
	in      []float64
	globals []float64
	order   []int
	scores  []float64
	names   []string
}

// Option configures a Ranker.
type Option func(*Ranker)

// WithExplain controls whether Ranked.Features is filled (default true).
func WithExplain(on bool) Option { return func(r *Ranker) { r.explain = on } }

// WithHeuristic replaces the fallback heuristic's parameters; its starvation guard also holds
// over a learned policy's order.
func WithHeuristic(h Heuristic) Option { return func(r *Ranker) { r.heuristic = h } }

// WithExtractor sets the feature extractor's horizon and reference GPU type.
func WithExtractor(e Extractor) Option {
	return func(r *Ranker) { r.ext.Horizon, r.ext.RefGPU = e.Horizon, e.RefGPU }
}

// WithDecider makes the ranker act through d, for example a training rollout's agent that
// samples and records its decisions. The decider's policy replaces the ranker's.
func WithDecider(d Decider) Option { return func(r *Ranker) { r.decider = d; r.policy = d.Policy() } }

// New returns a ranker for policy p; nil selects the fallback heuristic. The policy must use
// a schema this build extracts (Schema.Supported: version 1 or the current one).
func New(p *Policy, opts ...Option) (*Ranker, error) {
	if p != nil && !p.Schema.Supported() {
		return nil, p.Schema.supportedError()
	}
	r := &Ranker{policy: p, explain: true,
		raw: make([]float64, MaxWindow*NumFeatures), in: make([]float64, MaxWindow*NumFeatures), globals: make([]float64, NumGlobals),
		order: make([]int, MaxWindow), scores: make([]float64, MaxWindow),
		names: DefaultSchema().Features}
	for _, o := range opts {
		o(r)
	}
	if r.policy != nil && r.decider == nil {
		r.decider = r.greedy(r.policy)
	}
	return r, nil
}

// Policy returns the ranker's policy (nil when it uses the heuristic).
func (r *Ranker) Policy() *Policy { return r.policy }

// Rank implements sched.Ranker.
func (r *Ranker) Rank(ctx context.Context, snap *cluster.Snapshot, pred sched.Predictor) ([]sched.Ranked, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	out := make([]sched.Ranked, len(snap.Pending))
	r.mu.Lock()
	defer r.mu.Unlock()
	// A queue longer than the window: the window holds the jobs with the least estimated
	// GPU-time (the fallback heuristic's key, no predictor needed), the rest follow in that
	// order. Taking the oldest jobs instead would leave a short job that arrives behind a
	// long queue unseen until the queue drains, and a preemption plan that ranks running
	// jobs after the pending ones would stop them all.
	src := snap
	var perm []int
	if len(snap.Pending) > MaxWindow {
		perm = r.byWork(snap.Pending)
		view := *snap
		view.Pending = make([]cluster.Job, len(perm))
		for i, j := range perm {
			view.Pending[i] = snap.Pending[j]
		}
		src = &view
	}
	job := func(i int) *cluster.Job {
		if perm != nil {
			return &snap.Pending[perm[i]]
		}
		return &snap.Pending[i]
	}
	n, err := r.rank(src, pred)
	if err != nil {
		return nil, err
	}
	low := 0.0
	for pos := 0; pos < n; pos++ {
		j := r.order[pos]
		out[pos] = sched.Ranked{Job: job(j), Score: r.scores[j]}
		if r.explain {
			fm := make(map[string]float64, NumFeatures+1)
			for i, name := range r.names {
				fm[name] = r.raw[j*NumFeatures+i]
			}
			out[pos].Features = fm
		}
		low = r.scores[j]
	}
	// Beyond the window: least estimated GPU-time first, below every windowed job.
	for j := n; j < len(snap.Pending); j++ {
		low -= 1
		out[j] = sched.Ranked{Job: job(j), Score: low}
	}
	return out, nil
}

// byWork orders jobs by estimated GPU-time (GPUs x the runtime estimate, the heuristic's
// default runtime without one), ties in submission order.
func (r *Ranker) byWork(jobs []cluster.Job) []int {
	def := time.Duration(r.heuristic.DefaultRuntimeS * float64(time.Second))
	if def <= 0 {
		def = time.Hour
	}
	work := func(j *cluster.Job) float64 {
		rt := j.Hetgpu.EstRuntime
		if rt <= 0 {
			rt = def
		}
		return float64(max(j.GPUs, 1)) * rt.Seconds()
	}
	perm := make([]int, len(jobs))
	for i := range perm {
		perm[i] = i
	}
	slices.SortStableFunc(perm, func(a, b int) int { return cmp.Compare(work(&jobs[a]), work(&jobs[b])) })
	return perm
}

// rank computes the order and scores of the window into r.order and r.scores and returns the
// window size. Callers hold r.mu.
func (r *Ranker) rank(snap *cluster.Snapshot, pred sched.Predictor) (int, error) {
	n := min(len(snap.Pending), MaxWindow)
	if n == 0 {
		return 0, nil
	}
	r.ext.Extract(snap, pred, n, r.raw, r.globals)
	if r.policy == nil {
		for j := 0; j < n; j++ {
			r.scores[j] = r.heuristic.Score(r.raw[j*NumFeatures : (j+1)*NumFeatures])
			r.order[j] = j
		}
		slices.SortStableFunc(r.order[:n], func(a, b int) int { return cmp.Compare(r.scores[b], r.scores[a]) })
		strictlyDecreasing(r.order[:n], r.scores)
		return n, nil
	}
	// The policy ranks the whole window (jobs that cannot start now keep their place: the
	// placement engine's window and look-ahead use them); a decision is explored and learnt
	// from only when some job can start, since otherwise the order changes nothing.
	canStart := 0
	for j := 0; j < n; j++ {
		if r.raw[j*NumFeatures+FCanStart] > 0 {
			canStart++
		}
	}
	k := 0
	if canStart > 0 {
		k = n
	}
	in := r.raw
	if f := r.policy.NumFeatures(); f < NumFeatures {
		// An older schema's features are a prefix of the current row.
		for j := 0; j < n; j++ {
			copy(r.in[j*f:(j+1)*f], r.raw[j*NumFeatures:j*NumFeatures+f])
		}
		in = r.in
	}
	if err := r.decider.Act(in, n, r.globals, nil, k, r.order, r.scores); err != nil {
		return 0, err
	}
	return n, nil
}

// SetPolicy swaps the ranker's policy (nil selects the heuristic); rounds in flight finish with
// the old one.
func (r *Ranker) SetPolicy(p *Policy) error {
	if p != nil && !p.Schema.Supported() {
		return p.Schema.supportedError()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.policy = p
	r.decider = nil
	if p != nil {
		r.decider = r.greedy(p)
	}
	return nil
}

// greedy is p's greedy decider, with the heuristic's starvation guard on top of its scores.
func (r *Ranker) greedy(p *Policy) *Greedy {
	g := NewGreedy(p)
	g.Starvation = r.heuristic.Starvation
	return g
}
