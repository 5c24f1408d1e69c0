package rank

import (
	"math"
	"slices"
	"time"

	"github.com/hetgpu/hetgpu/model/annot"
	"github.com/hetgpu/hetgpu/model/cluster"
	"github.com/hetgpu/hetgpu/model/constraint"
	"github.com/hetgpu/hetgpu/model/gpuspec"
	"github.com/hetgpu/hetgpu/model/history"
	"github.com/hetgpu/hetgpu/sidecar/sched"
)

// DefaultHorizon is how far ahead "near-future availability" looks.
const DefaultHorizon = 30 * time.Minute

// maxTypes bounds the GPU types one snapshot may hold (candidate sets are bit masks).
const maxTypes = 64

// Extractor computes the feature rows of the current schema (see the F* constants; a version 1
// policy reads the first NumFeaturesV1 columns of each row) from a
// snapshot and a predictor. It keeps scratch buffers between calls, so steady-state extraction
// does not allocate, and it remembers the runtime it predicted for each job so that, once the job
// runs, near-future availability can tell when its GPUs free up. Not safe for concurrent use.
//
// The candidate pool of a job is the set of GPU types on ready nodes that match its device
// request ("gpu", "nvidia/gpu" or "nvidia/gpu/<model>") and on which the predictor expects a
// non-zero throughput. Constraints are left to the placement engine, which enforces them; the
// features are hints, not feasibility proofs.
type Extractor struct {
	// Horizon of near-future availability (DefaultHorizon when zero).
	Horizon time.Duration
	// RefGPU overrides gpuspec.ReferenceGPU, the type Annotations.EstRuntime refers to: the
	// runtime on another type is EstRuntime x throughput(ref) / throughput(type).
	RefGPU string

	types   []string
	typeIdx map[string]int
	supply  []float64
	free    []float64
	soon    []float64
	demand  []float64
	// per ready node and GPU type: free GPUs
	slots []slot
	// typeFree is, per pool, the free GPUs of its slots, most first.
	typeFree [][]int
	ns       map[string]float64
	// per window job: candidate mask, throughput and power per type, flat [job*maxTypes+type]
	cand []uint64
	thr  []float64
	pow  []float64
	// remembered runtime estimates of jobs (key -> seconds on gpuspec.ReferenceGPU and the per-type
	// throughput ratio base), for near-future availability once they run.
	known   map[memoKey]jobMemo
	rounds  int
	predMem map[predKey]sched.Estimate
	// groups are the distinct device groups (vendor, type, name) of each GPU type on ready
	// nodes, what a job's device request is matched against.
	groups [][]cluster.DeviceGroup
	// instPool is each instance's pool (index into types): running allocations count where
	// their instances are, so a slot's job counts in the slot pool of its GPU type.
	instPool map[string]int
}

// poolKey names a pool: the GPU type, and for GPU slot groups the type marked as slots, so that
// whole GPUs and slots of one model are counted apart (a job asks for one or the other).
func poolKey(typ, devType string) string {
	if devType == annot.SlotType {
		return typ + "/" + annot.SlotType
	}
	return typ
}

type slot struct {
	typ        int
	cap, free  int
	nvlinkNode bool
}

// memoKey identifies a job without building its "ns/id/group" string (no allocation).
type memoKey struct{ ns, id, group string }

type jobMemo struct {
	refS, refThr float64
	thr          map[string]float64
	lastSeen     int
}

type predKey struct {
	family, model string
	batch, gpus   int
	gpuType       string
}

// Globals returns the cluster-level inputs of the critic for the last Extract.
func (x *Extractor) globals(snap *cluster.Snapshot, out []float64) {
	sup, fr, dem := 0.0, 0.0, 0.0
	for t := range x.types {
		sup += x.supply[t]
		fr += x.free[t]
	}
	for i := range snap.Pending {
		dem += float64(snap.Pending[i].GPUs)
	}
	out[GPending] = math.Log1p(float64(len(snap.Pending)))
	out[GFree] = 0
	if sup > 0 {
		out[GFree] = fr / sup
	}
	out[GRunning] = math.Log1p(float64(len(snap.Running)))
	out[GLoad] = 0
	if sup > 0 {
		out[GLoad] = math.Log1p(dem / sup)
	}
}

// Extract writes the raw feature rows of the first n pending jobs (n <= MaxWindow) into rows
// (n x NumFeatures) and the critic's cluster inputs into globals (NumGlobals). pred may be nil.
func (x *Extractor) Extract(snap *cluster.Snapshot, pred sched.Predictor, n int, rows, globals []float64) {
	x.prepare(snap, pred, n)
	x.globals(snap, globals)
	now := snap.Now
	var runGPUs float64
	for _, v := range x.ns {
		runGPUs += v
	}
	for j := 0; j < n; j++ {
		job := &snap.Pending[j]
		r := rows[j*NumFeatures : (j+1)*NumFeatures]
		for i := range r {
			r[i] = 0
		}
		gpus := max(1, job.GPUs)
		wait := now.Sub(job.SubmitTime).Seconds()
		r[FWait] = math.Log1p(math.Max(0, wait) / 60)
		r[FGPUs] = math.Log2(float64(gpus))
		r[FPriority] = float64(job.Priority-50) / 50
		if runGPUs > 0 {
			r[FNSShare] = x.ns[job.Namespace] / runGPUs
		}
		mask := x.cand[j]
		var sup, dem, fr, soon float64
		bestThr, sumThr, nThr, bestPow := 0.0, 0.0, 0.0, 0.0
		for t := range x.types {
			if mask&(1<<t) == 0 {
				continue
			}
			sup += x.supply[t]
			dem += x.demand[t]
			fr += x.free[t]
			soon += x.soon[t]
			if v := x.thr[j*maxTypes+t]; v > 0 {
				sumThr += v
				nThr++
				if v > bestThr {
					bestThr, bestPow = v, x.pow[j*maxTypes+t]
				}
			}
		}
		if sup > 0 {
			r[FDemandSupply] = math.Log1p(dem / sup)
		}
		r[FNearAvail] = math.Min(4, (fr+soon)/float64(gpus)) / 4
		// Per-node share: a group with count > 1 needs GPUsPerNode on each node; a job limited
		// to one node needs all its GPUs there; a spanning job at least an even split.
		need := gpus
		if job.GPUsPerNode > 0 {
			need = job.GPUsPerNode
		} else if d := job.MaxNodes(); d > 1 {
			need = (gpus + d - 1) / d
		}
		var ways, fitFree float64
		canStart := false
		for t := range x.types {
			if mask&(1<<t) == 0 {
				continue
			}
			nodes := 0
			for _, s := range x.slots {
				if s.typ == t && s.free >= need {
					nodes++
					fitFree += float64(s.free)
				}
			}
			ways += float64(nodes)
			canStart = canStart || job.FitsFree(x.typeFree[t])
		}
		r[FWays] = math.Log1p(ways)
		if fr > 0 {
			r[FFrag] = 1 - fitFree/fr
		}
		if canStart {
			r[FCanStart] = 1
		}
		if nThr > 0 {
			r[FSpeedup] = math.Log2(bestThr / (sumThr / nThr))
		}
		if est := job.Hetgpu.EstRuntime; est > 0 {
			r[FEstKnown] = 1
			refThr := x.predict(pred, job, x.refGPU(), gpus).Throughput
			rt := gpuspec.RuntimeOn(est.Seconds(), refThr, bestThr)
			r[FRuntime] = math.Log10(math.Max(1, rt))
			if bestPow > 0 {
				r[FEnergy] = math.Log10(math.Max(1, bestPow*rt/3600))
			}
		}
		estimateFeatures(r, job, wait)
	}
}

// estimateFeatures writes schema version 2's features of one job: its attained service, its time
// queued and how its runtime estimate was read (the estimates step's cluster.EstimateInfo).
func estimateFeatures(r []float64, job *cluster.Job, waitS float64) {
	gpus := float64(max(1, job.GPUs))
	att := job.AttainedGPUSeconds
	if att <= 0 {
		att = job.Hetgpu.Ran.Seconds() * gpus
	}
	r[FAttained] = math.Log1p(math.Max(0, att) / 60)
	r[FQueued] = math.Log1p(math.Max(0, waitS-att/gpus) / 60)
	e := &job.Hetgpu.Est
	if job.Hetgpu.EstRuntime <= 0 {
		return
	}
	switch e.Source {
	case cluster.EstHistory:
		r[FSrcHistory] = 1
		r[FEstConf] = math.Max(0, math.Min(1, e.Confidence))
		r[FEstRuns] = math.Log1p(float64(max(0, e.Runs)))
		r[FEstLevel] = levelSpecificity(e.Level)
		r[FEstRank] = math.Log10(math.Max(1, job.Hetgpu.EstRuntime.Seconds()))
		if e.Left > 0 {
			r[FEstLeft] = math.Log10(math.Max(1, e.Left.Seconds()))
		}
	case cluster.EstSteps:
		r[FSrcSteps], r[FEstConf], r[FEstLevel] = 1, 1, 1
	default:
		// A user estimate (EstUser, or a backend's reading the estimates step has not marked).
		r[FSrcUser], r[FEstConf], r[FEstLevel] = 1, 1, 1
	}
}

// levelSpecificity maps a history level (history.Level names) to 0 (prior) .. 1 (the same job).
func levelSpecificity(level string) float64 {
	switch level {
	case history.LevelJob.String():
		return 1
	case history.LevelModel.String():
		return 0.8
	case history.LevelGPUs.String():
		return 0.6
	case history.LevelNamespace.String():
		return 0.4
	case history.LevelCluster.String():
		return 0.2
	}
	return 0
}

func (x *Extractor) refGPU() string {
	if x.RefGPU != "" {
		return x.RefGPU
	}
	return gpuspec.ReferenceGPU
}

// predict caches estimates per (model, batch, GPUs, type) within one round.
func (x *Extractor) predict(pred sched.Predictor, job *cluster.Job, gpuType string, gpus int) sched.Estimate {
	if pred == nil {
		return sched.Estimate{}
	}
	k := predKey{job.Hetgpu.ModelFamily, job.Hetgpu.ModelName, job.Hetgpu.BatchSize, gpus, gpuType}
	if k.model == "" {
		// Without a model the predictor sees the job itself; do not share across jobs.
		return pred.Predict(job, gpuType, gpus)
	}
	if e, ok := x.predMem[k]; ok {
		return e
	}
	e := pred.Predict(job, gpuType, gpus)
	x.predMem[k] = e
	return e
}

// prepare computes the per-type pools, free blocks and per-job candidate sets.
func (x *Extractor) prepare(snap *cluster.Snapshot, pred sched.Predictor, n int) {
	if x.typeIdx == nil {
		x.typeIdx = map[string]int{}
		x.ns = map[string]float64{}
		x.known = map[memoKey]jobMemo{}
		x.predMem = map[predKey]sched.Estimate{}
	}
	x.rounds++
	clear(x.typeIdx)
	if x.instPool == nil {
		x.instPool = map[string]int{}
	}
	clear(x.instPool)
	clear(x.ns)
	clear(x.predMem)
	x.types = x.types[:0]
	x.groups = x.groups[:0]
	x.slots = x.slots[:0]
	for _, fg := range snap.Free().Groups() {
		nd, g := fg.Node, fg.Group
		if g.Type != "gpu" && g.Type != annot.SlotType && g.Type != "" {
			continue
		}
		typ := fg.Type
		key := poolKey(typ, g.Type)
		t, ok := x.typeIdx[key]
		if !ok {
			if len(x.types) == maxTypes {
				continue
			}
			t = len(x.types)
			x.typeIdx[key] = t
			x.types = append(x.types, typ)
			if t < cap(x.groups) {
				x.groups = x.groups[:t+1]
				x.groups[t] = x.groups[t][:0]
			} else {
				x.groups = append(x.groups, nil)
			}
		}
		if !slices.ContainsFunc(x.groups[t], func(o cluster.DeviceGroup) bool {
			return o.Vendor == g.Vendor && o.Type == g.Type && o.Name == g.Name
		}) {
			x.groups[t] = append(x.groups[t], cluster.DeviceGroup{Vendor: g.Vendor, Type: g.Type, Name: g.Name})
		}
		s := slot{typ: t, nvlinkNode: nd.Interconnect == "nvlink", cap: g.Healthy(), free: len(fg.IDs)}
		for ii := range g.Instances {
			x.instPool[g.Instances[ii].ID] = t
		}
		x.slots = append(x.slots, s)
	}
	T := len(x.types)
	// Per pool, its slots' free GPUs, most first: what Job.FitsFree reads.
	for len(x.typeFree) < T {
		x.typeFree = append(x.typeFree, nil)
	}
	x.typeFree = x.typeFree[:T]
	for t := range x.typeFree {
		x.typeFree[t] = x.typeFree[t][:0]
	}
	for _, s := range x.slots {
		if s.free > 0 {
			x.typeFree[s.typ] = append(x.typeFree[s.typ], s.free)
		}
	}
	for _, f := range x.typeFree {
		slices.SortFunc(f, func(a, b int) int { return b - a })
	}
	x.supply = resize(x.supply, T)
	x.free = resize(x.free, T)
	x.soon = resize(x.soon, T)
	x.demand = resize(x.demand, T)
	for _, s := range x.slots {
		x.supply[s.typ] += float64(s.cap)
		x.free[s.typ] += float64(s.free)
	}
	// Running allocations: namespace shares and GPUs expected back within the horizon.
	h := x.Horizon
	if h <= 0 {
		h = DefaultHorizon
	}
	for i := range snap.Running {
		a := &snap.Running[i]
		g := float64(len(a.DeviceIDs))
		x.ns[a.Namespace] += g
		t, ok := -1, false
		for _, id := range a.DeviceIDs {
			if t, ok = x.instPool[id]; ok {
				break
			}
		}
		if !ok {
			continue
		}
		ran := snap.Now.Sub(a.StartTime)
		elapsed := ran.Seconds()
		remaining := cluster.Unestimated(ran).Seconds()
		if m, ok := x.known[memoKey{a.Namespace, a.JobID, a.Group}]; ok && m.refS > 0 {
			remaining = gpuspec.RuntimeOn(m.refS, m.refThr, m.thr[a.GPUType]) - elapsed
		}
		if remaining <= h.Seconds() {
			x.soon[t] += g
		}
	}
	// Candidate pools of the window's jobs and the demand on each type.
	x.cand = resize(x.cand, n)
	x.thr = resize(x.thr, n*maxTypes)
	x.pow = resize(x.pow, n*maxTypes)
	for j := 0; j < n; j++ {
		job := &snap.Pending[j]
		gpus := max(1, job.GPUs)
		var mask uint64
		for t, typ := range x.types {
			if !x.deviceMatches(job.DeviceName, t) {
				continue
			}
			if pred != nil {
				e := x.predict(pred, job, typ, gpus)
				if e.Throughput <= 0 {
					continue
				}
				x.thr[j*maxTypes+t], x.pow[j*maxTypes+t] = e.Throughput, e.PowerW
			}
			mask |= 1 << t
		}
		x.cand[j] = mask
		for t := range x.types {
			if mask&(1<<t) != 0 {
				x.demand[t] += float64(gpus)
			}
		}
		x.remember(pred, job, j, gpus)
	}
	// Forget jobs not seen for a while (finished or gone).
	if x.rounds%256 == 0 {
		for k, m := range x.known {
			if x.rounds-m.lastSeen > 4096 {
				delete(x.known, k)
			}
		}
	}
}

// remember keeps a pending job's runtime estimate for when it runs.
func (x *Extractor) remember(pred sched.Predictor, job *cluster.Job, row, gpus int) {
	if job.Hetgpu.EstRuntime <= 0 {
		return
	}
	key := memoKey{job.Namespace, job.ID, job.Group}
	m, ok := x.known[key]
	if !ok {
		m = jobMemo{refS: job.Hetgpu.EstRuntime.Seconds(), thr: map[string]float64{}}
		if pred != nil {
			m.refThr = x.predict(pred, job, x.refGPU(), gpus).Throughput
		}
		for t, typ := range x.types {
			if v := x.thr[row*maxTypes+t]; v > 0 {
				m.thr[typ] = v
			}
		}
	}
	m.lastSeen = x.rounds
	x.known[key] = m
}

// deviceMatches reports whether a Nomad device request ("gpu", "nvidia/gpu",
// "nvidia/gpu/<model name>") can be served by GPU type t: whether a device group of that type
// matches it with Nomad's semantics (constraint.MatchesRequest; an empty request matches
// nothing, the vendor counts, a model name must be the group's name).
func (x *Extractor) deviceMatches(req string, t int) bool {
	for i := range x.groups[t] {
		if constraint.MatchesRequest(req, &x.groups[t][i]) {
			return true
		}
	}
	return false
}

// resize returns s with length n, every element zero, reusing its array when it is large enough.
func resize[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	s = s[:n]
	clear(s)
	return s
}
