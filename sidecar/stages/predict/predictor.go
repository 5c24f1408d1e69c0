// Package predict estimates how fast and at what power a training job runs on each GPU type
// (GOGH's P1 and P2), learns from the runs the task driver measures, and predicts the
// slowdown of two jobs sharing a GPU.
//
// Prediction order for a (job, GPU type, GPU count):
//  1. catalog: the workload (model name + batch size) has a trusted entry for exactly that
//     type and count - a bundled measurement, or at least MinSamples observed runs;
//  2. P1: a network over the job's features and its most similar catalog entries on that
//     type (feed-forward, recurrent or attention, whichever validated best), corrected by
//  3. P2: the workload's own runs on any type and count (untrusted and partial ones
//     included, a partial run at half weight), used three ways: a Gaussian posterior over
//     P1's residuals with a covariance across GPU types learnt from P1's cross-validation
//     residuals; the runs carried to the target slot (transfer.go: the log-ratios similar
//     workloads show between the two slots, the same model's ratios interpolated in log
//     batch size, double differences; condgauss.go: a conditional Gaussian over all
//     slots); and a low-rank completion of the workload x slot matrix (lowrank.go);
//     combined under validated variances and correlations (p2combine.go, "p1p2");
//  4. datasheet prior for a GPU type with no catalog entries at all: P1 on the nearest known
//     types scaled by the datasheet speed ratio to the power Model.Beta.
//
// Power is idle + (TDP - idle) x load per GPU from the datasheet, with the load fraction
// refined per GPU type and per workload by measured power. Energy per step is
// PowerW / Throughput.
package predict

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/go-hclog"

	"github.com/hetgpu/hetgpu/model/cluster"
	"github.com/hetgpu/hetgpu/model/gpuspec"
	"github.com/hetgpu/hetgpu/model/throughput"
	"github.com/hetgpu/hetgpu/sidecar/sched"
)

// Estimate sources, beyond sched's.
const (
	SrcCatalog   = "catalog"
	SrcP1        = "p1"
	SrcP1P2      = "p1p2"
	SrcDatasheet = "datasheet-prior"
	// SrcUnknown marks a GPU type without a datasheet or an empty catalog: Throughput is 0.
	SrcUnknown = "unknown"
)

// Power model defaults: with no measurement a training job is taken to run at
// gpuspec.BusyUtil (90 %) utilisation on gpuspec's curve (alpha 0.7), i.e. at 0.9^0.7 = 92.9 %
// of the way from idle to TDP, as the simulator charges it.
const (
	powerTypePseudo = 5.0 // pseudo-runs behind the per-type prior load
	powerJobPseudo  = 2.0 // pseudo-runs behind a workload's offset
)

// Options configure a Predictor. Zero values take the defaults.
type Options struct {
	// Model is the trained P1/P2 model (default: the embedded DefaultModel).
	Model *Model
	// Seeds are the records a new cluster starts from (default: every isolated measurement
	// of throughput.Bundled()). A non-nil empty slice starts blind.
	Seeds []Record
	// CatalogPath is the JSON-lines file that keeps observed runs across restarts; empty
	// keeps them in memory only.
	CatalogPath string
	Catalog     CatalogOptions
	// ClipFactor, when > 1, bounds what one observed run teaches (see the ClipFactor
	// constant, which the sidecar uses); 0 learns runs as reported (the simulator's runs are
	// its ground truth, and its results stay as published).
	ClipFactor float64
	// Pairs is the co-location table (default: throughput.Bundled()).
	Pairs  *throughput.Table
	Logger hclog.Logger
	// coloc replaces Pairs (evaluation builds many predictors and needs none).
	coloc *colocModel
	// lrSetting is the completion's setting already chosen on these seeds (evaluation
	// builds many predictors over the same seeds).
	lrSetting *lrSetting
}

// Predictor implements sched.Predictor and sched.Learner. Predict is safe for concurrent
// use and lock-free; Observe serialises updates and swaps in a rebuilt state.
type Predictor struct {
	log   hclog.Logger
	specs *gpuspec.Table
	gf    map[string]gpuFeatures
	model *Model
	coloc *colocModel
	// lrSet is the completion's setting, chosen on the seeds (chooseLowRank).
	lrSet *lrSetting

	mu    sync.Mutex // serialises Observe
	cat   *Catalog
	clipF float64
	// prior is the state built from the seeds alone: the fixed anchor of PriorBand.
	prior *state
	state atomic.Pointer[state]
	// stale is set when the catalog changed after state was built: the next prediction
	// rebuilds it, once for however many runs arrived (a simulated round can finish or
	// preempt dozens of jobs; a rebuild costs tens of milliseconds).
	stale atomic.Bool
	pool  sync.Pool
}

var (
	_ sched.Predictor = (*Predictor)(nil)
	_ sched.Learner   = (*Predictor)(nil)
)

// predScratch is the per-call working memory, pooled so Predict does not allocate.
type predScratch struct {
	sc  scratch
	in  rawInputs
	buf [maxP2Obs]float64
}

// countVarPerDoubling is the log-variance the transfer adds per doubling of GPU count it
// carries with the table's scaling exponent and no linking workload (0.1 per doubling).
const countVarPerDoubling = 0.01

// maxP2Obs bounds the slots a workload's P2 posterior conditions on.
const maxP2Obs = 128

// New builds a predictor: loads the model, seeds and opens the catalog.
func New(opts Options) (*Predictor, error) {
	p := &Predictor{log: opts.Logger, specs: gpuspec.Default(), model: opts.Model, clipF: opts.ClipFactor}
	if p.log == nil {
		p.log = hclog.NewNullLogger()
	}
	p.gf = gpuFeatureMap(p.specs)
	p.pool.New = func() any { return new(predScratch) }
	var err error
	if p.model == nil {
		if p.model, err = DefaultModel(); err != nil {
			return nil, err
		}
	}
	seeds, pairs := opts.Seeds, opts.Pairs
	if seeds == nil || pairs == nil && opts.coloc == nil {
		tab, err := throughput.Bundled()
		if err != nil {
			return nil, fmt.Errorf("predictor seeds: %w", err)
		}
		if seeds == nil {
			seeds = SeedRecords(tab)
		}
		if pairs == nil {
			pairs = tab
		}
	}
	p.coloc, p.lrSet = opts.coloc, opts.lrSetting
	if p.coloc == nil {
		p.coloc = newColocModel(pairs)
	}
	if opts.CatalogPath != "" {
		if p.cat, err = OpenCatalog(opts.CatalogPath, seeds, opts.Catalog); err != nil {
			return nil, err
		}
	} else {
		p.cat = NewCatalog(seeds, opts.Catalog)
	}
	for _, n := range p.cat.Notes {
		p.log.Warn(n)
	}
	if p.lrSet == nil {
		ix := buildIndex(p.cat.seeds, p.cat.opts.MinSamples, p.specs)
		tc := transferConst{beta: p.model.Beta, betaVar: p.model.BetaVar, countVar: countVarPerDoubling}
		p.lrSet = chooseLowRank(newGrid(ix, p.specs), ix.wls, p.model.p2.runNoise, tc)
	}
	if p.clipF > 1 {
		p.prior = p.build(p.cat.seeds)
	}
	p.state.Store(p.build(p.cat.Records()))
	p.log.Debug("predictor ready", "arch", p.model.Arch, "seeds", len(seeds), "observed", len(p.cat.obs))
	return p, nil
}

// LearnsPartial says the predictor takes partial runs (service.PartialLearner): a run
// stopped before it finished still measured the workload's throughput; it counts as
// PartialWeight of a run in P2 and never makes a slot trusted on its own.
func (p *Predictor) LearnsPartial() bool { return true }

// Model returns the predictor's trained model.
func (p *Predictor) Model() *Model { return p.model }

// Catalog returns the observed records in the window, oldest first.
func (p *Predictor) Catalog() []Record {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cat.Observed()
}

// ClipFactor (Options.ClipFactor) bounds what one observed run teaches: its throughput is clipped to within this
// factor of what the predictor expected for it (its last built state) before it enters the
// catalog, the reported value kept as Record.Measured. A run that is really that different
// moves the prediction a factor of up to ClipFactor per run, so a few runs still get there;
// a broken or hostile reporter cannot move it further. MaxMoveFactor bounds how far one run
// moves any prediction (of its workload on any GPU type and count, or of another workload):
// P2 carries a run to the slots it did not run on, so the bound is wider than ClipFactor.
// It is checked, not proven: TestOneRunMovesPredictionsBoundedly feeds runs from 1e-6 to
// 1e300 steps/s (the largest move seen in 2,000 such runs over 9 seeds was x6.7).
const (
	ClipFactor    = 2.0
	MaxMoveFactor = 8.0
	// PriorBand bounds every learned run to within this factor of what the published
	// measurements and the trained model alone predict for it.
	PriorBand = 10.0
)

// Observe records a measured run and refreshes the catalog index, power fits and every
// workload's P2 posterior.
func (p *Predictor) Observe(ctx context.Context, obs cluster.Observation) error {
	return p.ObserveStored(ctx, nil, []cluster.Observation{obs})
}

// ObserveAll records several measured runs in one catalog write (sched.BatchLearner).
func (p *Predictor) ObserveAll(ctx context.Context, obs []cluster.Observation) error {
	return p.ObserveStored(ctx, nil, obs)
}

// ObserveStored records measured runs with their store sequence numbers (seqs may be nil),
// in one catalog write and fsync; the state is rebuilt at the next prediction.
func (p *Predictor) ObserveStored(ctx context.Context, seqs []uint64, obs []cluster.Observation) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	recs := make([]Record, 0, len(obs))
	for i := range obs {
		rec, err := RecordFromObservation(&obs[i])
		if err != nil {
			return err
		}
		if i < len(seqs) {
			rec.Seq = seqs[i]
		}
		recs = append(recs, rec)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	st := p.state.Load()
	for i := range recs {
		p.clip(st, &recs[i])
	}
	if err := p.cat.AddAll(recs); err != nil {
		return err
	}
	p.stale.Store(true)
	return nil
}

// clip bounds an isolated run's throughput to within PriorBand of what the seeds alone
// predict for it (a fixed anchor, so clipped runs cannot walk the predictions away run by
// run) and to within ClipFactor of what st predicts.
func (p *Predictor) clip(st *state, r *Record) {
	if p.clipF <= 1 || st == nil || r.Throughput <= 0 || r.CoRunner != "" {
		return
	}
	c := r.Throughput
	k := cacheKey{f: r.Features()}
	for _, b := range []struct {
		st *state
		f  float64
	}{{p.prior, PriorBand}, {st, p.clipF}} {
		e := p.estimateOn(b.st, k, r.GPUType, r.GPUs)
		if e.Throughput > 0 && !math.IsInf(e.Throughput, 0) {
			c = math.Min(math.Max(c, e.Throughput/b.f), e.Throughput*b.f)
		}
	}
	if c != r.Throughput {
		if r.EnergyPerStepJ > 0 {
			r.EnergyPerStepJ *= r.Throughput / c
		}
		r.Measured, r.Throughput = r.Throughput, c
	}
}

// LearnedSeqs returns the store sequence numbers of the runs in the window and the lowest
// of them (0 when none has one).
func (p *Predictor) LearnedSeqs() (map[uint64]bool, uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	set, low := map[uint64]bool{}, uint64(0)
	for i := range p.cat.obs {
		if sq := p.cat.obs[i].Seq; sq > 0 {
			set[sq] = true
			if low == 0 || sq < low {
				low = sq
			}
		}
	}
	return set, low
}

// Window is how many observed runs the catalog keeps.
func (p *Predictor) Window() int { return p.cat.opts.Window }

// Rebuild prepares the state for the runs learned since the last prediction now.
func (p *Predictor) Rebuild() { p.current() }

// LearnedThrough is the highest store sequence number learned (service.StoredLearner).
func (p *Predictor) LearnedThrough() (uint64, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cat.LearnedThrough()
}

// AddRecord adds an observed record (as Observe does, without the conversion).
func (p *Predictor) AddRecord(rec Record) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.cat.Add(rec); err != nil {
		return err
	}
	p.stale.Store(true)
	return nil
}

// current returns the prepared state, rebuilding it first when runs arrived since.
func (p *Predictor) current() *state {
	if p.stale.Load() {
		p.mu.Lock()
		if p.stale.Load() {
			p.state.Store(p.build(p.cat.Records()))
			p.stale.Store(false)
		}
		p.mu.Unlock()
	}
	return p.state.Load()
}

// addRecords adds several observed records and rebuilds the state once (evaluation).
func (p *Predictor) addRecords(recs []Record) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, rec := range recs {
		if err := p.cat.Add(rec); err != nil {
			return err
		}
	}
	p.state.Store(p.build(p.cat.Records()))
	p.stale.Store(false)
	return nil
}

// state is an immutable view of the catalog prepared for prediction.
type state struct {
	ix   *index
	grid *grid
	p2   map[int]*p2State
	// lr is the low-rank completion fitted on the trusted grid (nil when the grid is too
	// small) and lrEst each workload's folded-in estimate per grid slot.
	lr    *lowRank
	lrEst map[int][]trEst
	// rfEst holds the roofline estimates (roofline.go) of the workloads with runs of
	// their own, per grid slot.
	rfEst map[int][]trEst
	// tr holds each workload's transferred estimates per grid slot; own and observed are
	// its inputs, kept so the next build can reuse what did not change.
	tr        map[int][]trEst
	own       map[int][]ownSlot
	observed  map[int]bool
	runNoise  float64
	powerType map[string]float64
	powerWl   map[int]float64
	// powerDirect holds a workload's measured load on a type once trusted.
	powerDirect map[wgKey]float64
	// pairs holds observed co-location ratios (coloc_observed.go), mig observed MIG slice
	// speed shares (mig.go).
	pairs map[pairKey]float64
	mig   map[pairKey]float64

	cacheMu sync.RWMutex
	cache   map[cacheKey]*resolved
}

type cacheKey struct {
	f             Features
	ns, id, group string
}

type resolved struct {
	wl workload
	id int
}

func (p *Predictor) build(recs []Record) *state {
	minS := p.cat.opts.MinSamples
	st := &state{ix: buildIndex(recs, minS, p.specs), p2: map[int]*p2State{}, tr: map[int][]trEst{}, lrEst: map[int][]trEst{},
		rfEst:     map[int][]trEst{},
		cache:     map[cacheKey]*resolved{},
		powerType: map[string]float64{}, powerWl: map[int]float64{}, powerDirect: map[wgKey]float64{}}
	ix := st.ix
	st.grid = newGrid(ix, p.specs)
	// Run-to-run noise from repeated observed runs, shrunk towards the model's value.
	const pseudo = 10.0
	var m2, dof float64
	for _, sk := range ix.keys {
		if s := ix.stats[sk]; s.runs > 1 {
			m2 += s.m2
			dof += float64(s.runs - 1)
		}
	}
	st.runNoise = math.Sqrt((m2 + pseudo*p.model.p2.runNoise*p.model.p2.runNoise) / (dof + pseudo))

	// P2: every workload's own evidence, as residuals against P1 without itself (for the
	// posterior) and as values on the transfer grid.
	ps := p.pool.Get().(*predScratch)
	defer p.pool.Put(ps)
	type acc struct{ sum, runs float64 }
	perWl := map[int]map[pslot]acc{}
	own := map[int][]ownSlot{}
	observed := map[int]bool{}
	st.own, st.observed = own, observed
	// A workload's transfer depends only on the grid, the run noise, the kernel weights
	// (the workload set) and its own evidence. A run usually changes one workload's
	// evidence, so the previous build's results stand for all the others; recomputing
	// them was most of a rebuild's cost.
	prev := p.state.Load()
	reuse := prev != nil && prev.runNoise == st.runNoise && sameGrid(prev, st)
	tc := transferConst{beta: p.model.Beta, betaVar: p.model.BetaVar, countVar: countVarPerDoubling}
	// The completion is rebuilt only when the trusted grid changed (a slot reached
	// MinSamples runs, a workload appeared), with the setting chosen on the seeds.
	if prev != nil && prev.lr != nil && sameVals(prev.lr.vals, st.grid.vals) && slices.Equal(prev.ix.wls, ix.wls) {
		st.lr = prev.lr
	} else {
		var last *lowRank
		if prev != nil {
			last = prev.lr
		}
		st.lr = fitLowRank(st.grid, ix.wls, last, p.lrSet)
	}
	lrWS := newALSWork()
	var order []int
	for _, sk := range ix.keys {
		s := ix.stats[sk]
		var y, runs float64
		seeded := s.seed && !s.seedZero
		switch {
		case s.runs >= minS:
			y, runs = s.meanY, float64(s.runs)
		case s.runs+s.partials > 0 && !seeded:
			// Partial runs count as PartialWeight of a finished one.
			pw := PartialWeight * float64(s.partials)
			runs = float64(s.runs) + pw
			y = (float64(s.runs)*s.meanY + PartialWeight*s.partialSum) / runs
		case seeded:
			y, runs = s.seedY, seedRuns
		default:
			continue
		}
		if s.runs+s.partials > 0 {
			observed[sk.wl] = true
		}
		if _, seen := own[sk.wl]; !seen {
			order = append(order, sk.wl)
			own[sk.wl] = nil
		}
		if ti, ok := st.grid.tIdx[sk.gpu]; ok {
			if b, ok := exactBucket(sk.n); ok {
				own[sk.wl] = append(own[sk.wl], ownSlot{slot: ti*nBuckets + b, y: y, runs: runs})
			}
		}
		wl := &ix.wls[sk.wl]
		y1, u, ok := p.p1(st, wl, sk.wl, sk.gpu, sk.n, ps)
		if !ok {
			continue
		}
		if perWl[sk.wl] == nil {
			perWl[sk.wl] = map[pslot]acc{}
		}
		a := perWl[sk.wl][u]
		perWl[sk.wl][u] = acc{a.sum + runs*(y-y1), a.runs + runs}
	}
	w := make([]float64, len(ix.wls))
	for _, id := range order {
		if m := perWl[id]; len(m) > 0 && len(m) <= maxP2Obs {
			obs := make([]p2Obs, 0, len(m))
			for u, a := range m {
				obs = append(obs, p2Obs{s: u, r: a.sum / a.runs, runs: a.runs})
			}
			sortObs(obs)
			post, err := p.model.p2.posterior(obs, st.runNoise)
			if err != nil {
				p.log.Warn("P2 posterior skipped", "workload", ix.wls[id].key, "error", err)
			} else {
				st.p2[id] = post
			}
		}
		// The completion for workloads with runs of their own, as the conditional Gaussian:
		// a seeded workload's estimates add nothing to what the catalog knows.
		if st.lr != nil && len(own[id]) > 0 && observed[id] {
			pid, seen := -1, false
			if prev != nil && prev.lr == st.lr {
				pid, seen = prev.ix.byKey[ix.wls[id].key]
			}
			if seen && prev.lrEst[pid] != nil && slices.Equal(prev.own[pid], own[id]) {
				st.lrEst[id] = prev.lrEst[pid]
			} else {
				st.lrEst[id] = st.lr.estimates(&ix.wls[id], own[id], st.runNoise, st.grid.stride, lrWS)
			}
		}
		if len(own[id]) > 0 && reuse && prev.observed[id] == observed[id] && slices.Equal(prev.own[id], own[id]) {
			st.tr[id] = prev.tr[id]
			st.rfEst[id] = prev.rfEst[id]
		} else if len(own[id]) > 0 {
			kernelWeights(ix.wls, id, w)
			st.tr[id] = st.grid.carry(id, w, own[id], st.runNoise, tc, observed[id])
			if observed[id] {
				// Like the completion, only for workloads with runs of their own.
				st.rfEst[id] = st.grid.roofline(id, w, own[id], st.runNoise)
			}
		}
	}

	// Power: per-type load fraction, then each workload's offset from it.
	typeSum, typeN := map[string]float64{}, map[string]float64{}
	for _, wk := range ix.powerKeys {
		pw := ix.power[wk]
		typeSum[wk.gpu] += pw.sumFrac
		typeN[wk.gpu] += float64(pw.n)
	}
	f0 := math.Pow(gpuspec.BusyUtil, gpuspec.PowerAlpha)
	for _, g := range p.specs.Types() {
		st.powerType[g] = (typeSum[g] + powerTypePseudo*f0) / (typeN[g] + powerTypePseudo)
	}
	offSum, offN := map[int]float64{}, map[int]float64{}
	for _, wk := range ix.powerKeys {
		pw := ix.power[wk]
		offSum[wk.wl] += pw.sumFrac - float64(pw.n)*st.powerType[wk.gpu]
		offN[wk.wl] += float64(pw.n)
		if pw.n >= minS {
			st.powerDirect[wk] = pw.sumFrac / float64(pw.n)
		}
	}
	for id, s := range offSum {
		st.powerWl[id] = s / (offN[id] + powerJobPseudo)
	}
	st.pairs = p.observedPairs(st, recs)
	st.mig = p.observedMIG(st, recs)
	return st
}

// sameVals reports whether two grids' values are equal bit for bit.
func sameVals(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i, v := range a {
		if math.Float64bits(v) != math.Float64bits(b[i]) {
			return false
		}
	}
	return true
}

// sameGrid reports whether two states have the same workloads (so the same kernel weights)
// and the same transfer grid, bit for bit.
func sameGrid(a, b *state) bool {
	if !slices.Equal(a.ix.wls, b.ix.wls) || len(a.grid.vals) != len(b.grid.vals) {
		return false
	}
	for i, v := range a.grid.vals {
		if math.Float64bits(v) != math.Float64bits(b.grid.vals[i]) {
			return false
		}
	}
	return true
}

func sortObs(obs []p2Obs) {
	// Deterministic order (map iteration is random): by GPU type, then count bucket.
	for i := 1; i < len(obs); i++ {
		for j := i; j > 0 && obsLess(obs[j], obs[j-1]); j-- {
			obs[j], obs[j-1] = obs[j-1], obs[j]
		}
	}
}

func obsLess(a, b p2Obs) bool {
	if a.s.gpu != b.s.gpu {
		return a.s.gpu < b.s.gpu
	}
	return a.s.bucket < b.s.bucket
}

// resolve finds (or creates and caches) the workload of a query.
func (st *state) resolve(k cacheKey) *resolved {
	st.cacheMu.RLock()
	r := st.cache[k]
	st.cacheMu.RUnlock()
	if r != nil {
		return r
	}
	f := k.f
	if f.Name == "" {
		f.Name = cluster.GroupKey(k.ns, k.id, k.group)
	}
	r = &resolved{wl: newWorkload(f), id: -1}
	if id, ok := st.ix.byKey[r.wl.key]; ok {
		r.id = id
		// The catalog's features fill what the job leaves out.
		cf := st.ix.wls[id].f
		if r.wl.f.ParamCount == 0 {
			r.wl.f.ParamCount = cf.ParamCount
		}
		if f.Family == "" && cf.Family != "" {
			r.wl.family = st.ix.wls[id].family
		}
	}
	st.cacheMu.Lock()
	st.cache[k] = r
	st.cacheMu.Unlock()
	return r
}

// Predict implements sched.Predictor. A GPU type without a datasheet yields Throughput 0
// and Source "unknown"; a measured zero (out of memory) yields Throughput 0 from the
// catalog. Callers treat 0 as infeasible.
func (p *Predictor) Predict(job *cluster.Job, gpuType string, gpus int) sched.Estimate {
	a := &job.Hetgpu
	k := cacheKey{f: Features{Family: a.ModelFamily, Name: a.ModelName, BatchSize: a.BatchSize, ParamCount: a.ParamCount, Framework: a.Framework}}
	if a.ModelName == "" {
		k.ns, k.id, k.group = job.Namespace, job.ID, job.Group
	}
	return p.predict(k, gpuType, gpus)
}

// PredictFeatures predicts for a workload described by its features.
func (p *Predictor) PredictFeatures(f Features, gpuType string, gpus int) sched.Estimate {
	return p.predict(cacheKey{f: f}, gpuType, gpus)
}

func (p *Predictor) predict(k cacheKey, gpuType string, gpus int) sched.Estimate {
	return p.estimateOn(p.current(), k, gpuType, gpus)
}

// PredictBuilt predicts from the last built state without rebuilding it for runs that
// arrived since: cheap enough for every posted run (plausibility and error metrics).
func (p *Predictor) PredictBuilt(job *cluster.Job, gpuType string, gpus int) sched.Estimate {
	a := &job.Hetgpu
	k := cacheKey{f: Features{Family: a.ModelFamily, Name: a.ModelName, BatchSize: a.BatchSize, ParamCount: a.ParamCount, Framework: a.Framework}}
	if a.ModelName == "" {
		k.ns, k.id, k.group = job.Namespace, job.ID, job.Group
	}
	return p.estimateOn(p.state.Load(), k, gpuType, gpus)
}

func (p *Predictor) estimateOn(st *state, k cacheKey, gpuType string, gpus int) sched.Estimate {
	if mt, ok := gpuspec.MIGType(gpuType); ok {
		return p.estimateMIG(st, k, mt, gpus)
	}
	g := gpuType
	if _, ok := p.gf[g]; !ok {
		if g = gpuspec.Canonical(gpuType); g == "" {
			return sched.Estimate{Uncertainty: 1, Source: SrcUnknown}
		}
		if _, ok := p.gf[g]; !ok {
			return sched.Estimate{Uncertainty: 1, Source: SrcUnknown}
		}
	}
	gpus = max(gpus, 1)
	r := st.resolve(k)
	ps := p.pool.Get().(*predScratch)
	e := p.estimate(st, &r.wl, r.id, g, gpus, ps)
	p.pool.Put(ps)
	return e
}

func (p *Predictor) estimate(st *state, q *workload, id int, g string, n int, ps *predScratch) sched.Estimate {
	minS := p.cat.opts.MinSamples
	power := p.power(st, id, g, n)
	if id >= 0 {
		if s := st.ix.stats[statKey{id, g, n}]; s != nil {
			if s.infeasible(minS) {
				return sched.Estimate{PowerW: power, Uncertainty: 0, Source: SrcCatalog}
			}
			if y, ok := s.value(minS); ok {
				unc := 0.02 // a published mean: its run-to-run spread is not known
				if s.runs >= minS {
					unc = math.Sqrt(s.m2/float64(s.runs-1)/float64(s.runs) + 0.02*0.02)
				}
				return sched.Estimate{Throughput: float64(n) * math.Exp(y), PowerW: power, Uncertainty: unc, Source: SrcCatalog}
			}
		}
	}
	var pt p2Parts
	src, ok := p.parts(st, q, id, g, n, ps, &pt)
	if !ok {
		return sched.Estimate{PowerW: power, Uncertainty: 1, Source: SrcUnknown}
	}
	y, variance := pt.combine()
	return sched.Estimate{Throughput: float64(n) * math.Exp(y), PowerW: power, Uncertainty: math.Sqrt(variance), Source: src}
}

// p2Parts are the estimates P2 combines for one (workload, GPU type, count): per-GPU
// log-throughputs with their variances, +Inf where an estimator has none.
type p2Parts struct {
	// p1 is P1 alone with its prior variance; post P1 corrected by the residual posterior.
	p1, p1Var, post, postVar float64
	// tr is the job's own runs carried over (pairwise transfer and conditional Gaussian),
	// lr the low-rank completion.
	tr, trVar, lr, lrVar float64
	// rf is the roofline estimate (roofline.go), its variance calibrated; wRf its
	// validated weight against the mix of the transfer and the completion, rhoRf the
	// validated correlation of their errors.
	rf, rfVar, wRf, rhoRf float64
	// unrelated marks a P1 estimate without any related workload on the type (or a cold
	// type): a population level that the job's own runs make obsolete.
	unrelated bool
	// rho is the validated correlation of the transfer's and the completion's errors and
	// wTr the transfer's validated weight in their mix; onSlot marks a job with runs of its
	// own on the queried slot.
	rho, wTr float64
	onSlot   bool
}

// parts fills pt for q on (g, n) and returns the source; ok is false when not even P1 has
// an estimate. It does not allocate.
func (p *Predictor) parts(st *state, q *workload, id int, g string, n int, ps *predScratch, pt *p2Parts) (string, bool) {
	y1, u, ok := p.p1(st, q, id, g, n, ps)
	if !ok {
		return SrcUnknown, false
	}
	var post *p2State
	var tr, lr, rf []trEst
	if id >= 0 {
		post, tr, lr, rf = st.p2[id], st.tr[id], st.lrEst[id], st.rfEst[id]
	}
	mean, variance := p.model.p2.query(post, u, ps.buf[:])
	*pt = p2Parts{p1: y1, p1Var: p.model.p2.k(u, u), post: y1 + mean, postVar: variance, trVar: math.Inf(1), lrVar: math.Inf(1),
		rfVar: math.Inf(1), unrelated: u.unrelated}
	src := SrcP1
	switch {
	case post != nil || tr != nil || lr != nil:
		src = SrcP1P2
	case u.cold:
		src = SrcDatasheet
	}
	dc := defaultComb()
	pt.rho, pt.wTr = dc.rho, dc.wTr
	ti, okT := st.grid.tIdx[g]
	if !okT || id < 0 {
		return src, true
	}
	// The kind of hold-out this query is: has the job run on the type at all?
	b := min(max(bucketOf(n), 0), maxBucket)
	kind := 1
	for _, o := range st.own[id] {
		if o.slot/nBuckets == ti {
			kind = 0
		}
		if o.slot == ti*nBuckets+b {
			pt.onSlot = true
		}
	}
	cs := dc
	if st.lr != nil {
		cs = st.lr.comb[kind]
	}
	pt.rho, pt.wTr = cs.rho, cs.wTr
	pt.wRf, pt.rhoRf = cs.wRf, cs.rhoRf
	// Grid slots are power-of-two counts: a count between them is carried from its bucket
	// with the table's scaling exponent.
	shift := (throughput.ScalingExponent - 1) * (math.Log(float64(n)) - float64(b)*math.Ln2)
	if tr != nil {
		if e := tr[ti*nBuckets+b]; !math.IsInf(e.v, 1) {
			pt.tr, pt.trVar = e.y+shift, cs.calTr*e.v
		}
	}
	if lr != nil {
		if e := lr[ti*nBuckets+b]; !math.IsInf(e.v, 1) {
			pt.lr, pt.lrVar = e.y+shift, e.v
		}
	}
	if rf != nil {
		if e := rf[ti*nBuckets+b]; !math.IsInf(e.v, 1) {
			pt.rf, pt.rfVar = e.y+shift, cs.calRf*e.v
		}
	}
	return src, true
}

// p1Class buckets P1's nearest-neighbour distance: the same model at another batch size,
// the same family, or unrelated workloads.
func p1Class(nearest float64) int {
	switch {
	case nearest < 1.25:
		return 0
	case nearest < 3:
		return 1
	}
	return 2
}

// p1 returns P1's per-GPU log-throughput of q on (g, n), excluding workload self from the
// neighbours, and the slot as P2 sees it (with P1's error scale). For a type without
// catalog entries it is the datasheet prior (cold).
func (p *Predictor) p1(st *state, q *workload, self int, g string, n int, ps *predScratch) (y float64, u pslot, ok bool) {
	m := p.model
	u = pslot{gpu: g, bucket: bucketOf(n)}
	if buildInputs(st.ix, q, self, g, n, p.gf[g], m.p1.net.shape.K, &ps.in) {
		c := p1Class(ps.in.nearest)
		u.f, u.unrelated = m.errScale[c], c == 2
		return m.p1.predict(&ps.in, &ps.sc), u, true
	}
	// Cold start: the two measured types closest by datasheet, weighted by closeness.
	u.cold, u.unrelated = true, true
	gi, ok := st.grid.tIdx[g]
	if !ok {
		return 0, u, false
	}
	nt := len(st.grid.types)
	var sw, sy float64
	var used [2]string
	for range used {
		best, bd, bl := "", math.Inf(1), 0.0
		for _, h := range st.ix.gpus {
			hi, ok := st.grid.tIdx[h]
			if h == g || h == used[0] || !ok {
				continue
			}
			if l := st.grid.lnDS[hi*nt+gi]; math.Abs(l) < bd {
				best, bd, bl = h, math.Abs(l), l
			}
		}
		if best == "" || !buildInputs(st.ix, q, self, best, n, p.gf[best], m.p1.net.shape.K, &ps.in) {
			break
		}
		yh := m.p1.predict(&ps.in, &ps.sc) + m.Beta*bl
		w := 1 / (0.05 + bd)
		sw += w
		sy += w * yh
		u.f = math.Max(u.f, m.errScale[p1Class(ps.in.nearest)])
		if used[0] == "" {
			used[0] = best
		} else {
			used[1] = best
		}
	}
	if sw == 0 {
		return 0, u, false
	}
	return sy / sw, u, true
}

// power is the predicted average power of all n GPUs in watts.
func (p *Predictor) power(st *state, id int, g string, n int) float64 {
	s, ok := p.specs.Lookup(g)
	if !ok {
		return 0
	}
	frac, direct := st.powerDirect[wgKey{id, g}]
	if !direct {
		frac = st.powerType[g]
		if id >= 0 {
			frac += st.powerWl[id]
		}
	}
	frac = math.Max(0.05, math.Min(1, frac))
	return float64(n) * s.PowerAt(frac)
}
