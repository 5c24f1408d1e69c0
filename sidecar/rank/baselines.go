package rank

import (
	"cmp"
	"context"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/hetgpu/hetgpu/model/cluster"
	"github.com/hetgpu/hetgpu/sidecar/sched"
)

// F1 is the learned priority function F1 of Carastan-Santos and de Camargo ("Obtaining Dynamic
// Scheduling Policies with Simulation and Machine Learning", SC 2017), obtained by non-linear
// regression over simulated scheduling permutations:
//
//	score(j) = log10(r_j) x n_j + 870 x log10(s_j)      (smaller first)
//
// r_j is the job's requested (estimated) runtime in seconds, n_j its number of processors (here
// GPUs) and s_j its submit time in seconds since the start of the workload. Here s_j is
// measured from the earliest submission the ranker has seen (the trace start in the simulator),
// floored at 1 s so log10 is defined, and r_j is the job's runtime estimate
// (Annotations.EstRuntime; DefaultRuntimeS when absent), floored at 1 s. Ranked.Score is the
// negated F1 value so that higher scores go first, as sched.Ranked requires.
type F1 struct {
	DefaultRuntimeS float64

	mu     sync.Mutex
	origin time.Time
}

// Rank implements sched.Ranker.
func (f *F1) Rank(ctx context.Context, snap *cluster.Snapshot, _ sched.Predictor) ([]sched.Ranked, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	f.mu.Lock()
	for i := range snap.Pending {
		if st := snap.Pending[i].SubmitTime; f.origin.IsZero() || st.Before(f.origin) {
			f.origin = st
		}
	}
	origin := f.origin
	f.mu.Unlock()
	def := f.DefaultRuntimeS
	if def <= 0 {
		def = 3600
	}
	out := make([]sched.Ranked, len(snap.Pending))
	for i := range snap.Pending {
		j := &snap.Pending[i]
		r := def
		if j.Hetgpu.EstRuntime > 0 {
			r = j.Hetgpu.EstRuntime.Seconds()
		}
		s := math.Max(1, j.SubmitTime.Sub(origin).Seconds())
		n := float64(max(1, j.GPUs))
		v := math.Log10(math.Max(1, r))*n + 870*math.Log10(s)
		out[i] = sched.Ranked{Job: j, Score: -v, Features: map[string]float64{"f1": v, "runtime_s": r, "gpus": n, "submit_s": s}}
	}
	sortRanked(out)
	return out, nil
}

// Slurm is Slurm's multifactor priority plugin (priority/multifactor) restricted to the factors
// a GPU queue has:
//
//	priority = WeightAge x age + WeightFairshare x fairshare + WeightJobSize x size
//
// with each factor in [0, 1] as Slurm defines it:
//   - age = min(wait / MaxAge, 1) (PriorityMaxAge, Slurm's default 7 days);
//   - fairshare = 2^(-U/S), Slurm's classic fair-share formula: U is the namespace's share of
//     the cluster's recent usage (GPU-seconds, decayed with PriorityDecayHalfLife, Slurm's default
//     7 days), S its share of the shares (equal shares among the namespaces seen);
//   - size = 1 - GPUs / cluster GPUs (PriorityFavorSmall=YES: smaller jobs rank higher).
//
// Defaults are the weights commonly published in site configurations: PriorityWeightAge=1000,
// PriorityWeightFairshare=10000, PriorityWeightJobSize=1000 (partition and QOS weights are 0:
// there is one partition and no QOS here). See Slurm's priority_multifactor documentation.
type Slurm struct {
	WeightAge, WeightFairshare, WeightJobSize float64
	MaxAge, HalfLife                          time.Duration

	mu    sync.Mutex
	usage map[string]float64
	last  time.Time
}

func (s *Slurm) defaults() (wa, wf, ws float64, maxAge, half time.Duration) {
	wa, wf, ws = s.WeightAge, s.WeightFairshare, s.WeightJobSize
	if wa == 0 && wf == 0 && ws == 0 {
		wa, wf, ws = 1000, 10000, 1000
	}
	maxAge, half = s.MaxAge, s.HalfLife
	if maxAge <= 0 {
		maxAge = 7 * 24 * time.Hour
	}
	if half <= 0 {
		half = 7 * 24 * time.Hour
	}
	return
}

// Rank implements sched.Ranker.
func (s *Slurm) Rank(ctx context.Context, snap *cluster.Snapshot, _ sched.Predictor) ([]sched.Ranked, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	wa, wf, ws, maxAge, half := s.defaults()
	total := 0
	for i := range snap.Nodes {
		if !snap.Nodes[i].Ready() {
			continue
		}
		for _, g := range snap.Nodes[i].Devices {
			total += g.Healthy()
		}
	}
	s.mu.Lock()
	if s.usage == nil {
		s.usage = map[string]float64{}
	}
	// Decay past usage, then charge the running allocations for the time since the last round.
	if !s.last.IsZero() && snap.Now.After(s.last) {
		dt := snap.Now.Sub(s.last).Seconds()
		decay := math.Exp2(-dt / half.Seconds())
		for k := range s.usage {
			s.usage[k] *= decay
		}
		for i := range snap.Running {
			a := &snap.Running[i]
			s.usage[a.Namespace] += float64(len(a.DeviceIDs)) * dt
		}
	}
	s.last = snap.Now
	names := map[string]bool{}
	for k := range s.usage {
		names[k] = true
	}
	for i := range snap.Pending {
		names[snap.Pending[i].Namespace] = true
	}
	sum := 0.0
	for _, v := range s.usage {
		sum += v
	}
	fs := map[string]float64{}
	share := 1 / float64(max(1, len(names)))
	for k := range names {
		u := 0.0
		if sum > 0 {
			u = s.usage[k] / sum
		}
		fs[k] = math.Exp2(-u / share)
	}
	s.mu.Unlock()
	out := make([]sched.Ranked, len(snap.Pending))
	for i := range snap.Pending {
		j := &snap.Pending[i]
		age := math.Min(1, math.Max(0, snap.Now.Sub(j.SubmitTime).Seconds())/maxAge.Seconds())
		size := 0.0
		if total > 0 {
			size = math.Max(0, 1-float64(j.GPUs)/float64(total))
		}
		p := wa*age + wf*fs[j.Namespace] + ws*size
		out[i] = sched.Ranked{Job: j, Score: p, Features: map[string]float64{"age": age, "fairshare": fs[j.Namespace], "size": size}}
	}
	sortRanked(out)
	return out, nil
}

// sortRanked orders by descending score, keeping submission order among ties, and makes scores
// strictly decreasing.
func sortRanked(r []sched.Ranked) {
	slices.SortStableFunc(r, func(a, b sched.Ranked) int { return cmp.Compare(b.Score, a.Score) })
	for i := 1; i < len(r); i++ {
		if r[i].Score >= r[i-1].Score {
			r[i].Score = r[i-1].Score - 1e-9*math.Max(1, math.Abs(r[i-1].Score))
		}
	}
}
