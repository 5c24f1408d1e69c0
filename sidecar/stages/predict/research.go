package predict

import (
	"math"

	"github.com/hetgpu/hetgpu/model/gpuspec"
	"github.com/hetgpu/hetgpu/model/throughput"
)

// Research hooks: the narrow view of the predictor's internals that the offline evaluation
// (sidecar/research/predicteval) needs, so that evaluation lives beside the runtime predictor
// rather than in it. Nothing on the sidecar's path calls these.

// DefaultRunNoise is the log-scale standard deviation of one observed run that P2 assumes.
const DefaultRunNoise = defaultRunNoise

// WithDefaults fills o's zero fields with Train's defaults.
func (o TrainOptions) WithDefaults() TrainOptions { return o.withDefaults() }

// WorkloadKey is the catalog's key of a job type (normalised model name and batch size).
func WorkloadKey(name string, batchSize int) string { return workloadKey(name, batchSize) }

// Identity is how the predictor's similarity sees one job type: its normalised model name and
// log2 of its batch size (0 when unknown).
func Identity(f Features) (name string, logBatch float64) {
	w := newWorkload(f)
	return w.name, w.lb
}

// Distances returns the predictor's similarity distance between every pair of job types,
// row-major: d[i*len(fs)+j] is the distance from fs[i] to fs[j].
func Distances(fs []Features) []float64 {
	wls := make([]workload, len(fs))
	for i, f := range fs {
		wls[i] = newWorkload(f)
	}
	d := make([]float64, len(fs)*len(fs))
	for i := range wls {
		for j := range wls {
			d[i*len(fs)+j] = distance(&wls[i], &wls[j])
		}
	}
	return d
}

// Measurement is one measured (GPU type, GPU count, throughput) cell of a job type.
type Measurement struct {
	GPU        string
	GPUs       int
	Throughput float64
}

// HeldOut is a model trained without one job type, with what evaluating that job needs: the
// training records' catalog index and the job's similarity identity.
type HeldOut struct {
	m          *Model
	train      []Record
	minSamples int
	ix         *index
	gf         map[string]gpuFeatures
	q          workload
	in         rawInputs
	sc         scratch
	// lrSet is the completion's setting chosen on the training records by the first
	// predictor, shared by the later ones (it is deterministic: sharing saves time only).
	lrSet *lrSetting
}

// NewHeldOut prepares the evaluation of the job type f with model m trained on train (which
// must not contain f); minSamples is the catalog's trust threshold used for training.
func NewHeldOut(m *Model, train []Record, f Features, minSamples int) *HeldOut {
	specs := gpuspec.Default()
	return &HeldOut{m: m, train: train, minSamples: minSamples, ix: buildIndex(train, minSamples, specs),
		gf: gpuFeatureMap(specs), q: newWorkload(f)}
}

// NewJob predicts the held-out job's throughput on gpus GPUs of type gpu from its features
// alone (P1): per architecture the model kept (with TrainOptions.KeepAll), the selected
// architecture, and the neighbour base P1 corrects. ok is false when the type has no trusted
// neighbours.
func (h *HeldOut) NewJob(gpu string, gpus int) (perArch map[string]float64, p1, base float64, ok bool) {
	if !buildInputs(h.ix, &h.q, -1, gpu, gpus, h.gf[gpu], h.m.p1.net.shape.K, &h.in) {
		return nil, 0, 0, false
	}
	n := float64(gpus)
	perArch = make(map[string]float64, len(h.m.all))
	for a, nt := range h.m.all {
		perArch[a] = n * math.Exp(nt.predict(&h.in, &h.sc))
	}
	return perArch, n * math.Exp(h.m.p1.predict(&h.in, &h.sc)), n * math.Exp(h.in.base), true
}

// RatioTransfer is a reference estimate of the held-out job on gpus GPUs of type gpu that
// sees its other measurements without noise: each observed value at the same count times the
// training jobs' ratio between the two types, kernel-weighted by similarity. ok is false when
// no training job relates the types at that count.
func (h *HeldOut) RatioTransfer(observed []Measurement, gpu string, gpus int) (float64, bool) {
	y, ok := ratioTransfer(h.ix, &h.q, observed, gpu, gpus)
	return float64(gpus) * math.Exp(y), ok
}

// NewPredictor returns a fresh predictor with the model, seeded with the training records and
// without co-location data (evaluation builds many and needs none).
func (h *HeldOut) NewPredictor() (*Predictor, error) {
	p, err := New(Options{Model: h.m, Seeds: h.train, coloc: &colocModel{byGPU: map[string][]int{}},
		Catalog: CatalogOptions{MinSamples: h.minSamples}, lrSetting: h.lrSet})
	if err != nil {
		return nil, err
	}
	if h.lrSet == nil {
		h.lrSet = p.lrSet
	}
	return p, nil
}

// Component names of PredictComponents, beside SrcP1 and SrcP1P2 (the combination).
const (
	// CompPosterior is P1 corrected by P2's residual posterior.
	CompPosterior = "posterior"
	// CompTransfer is the job's own runs carried over (pairwise transfer, conditional
	// Gaussian).
	CompTransfer = "transfer"
	// CompLowRank is the low-rank completion.
	CompLowRank = "lowrank"
	// CompRoofline is the roofline member: the similar workloads' cross-type ratios
	// corrected by the job's own slope on the datasheet speed ratio (roofline.go).
	CompRoofline = "roofline"
)

// Component is one estimator's throughput and log-scale uncertainty.
type Component struct {
	Throughput, Uncertainty float64
}

// PredictComponents returns every estimator P2 combines for a workload, alone, and the
// combination under SrcP1P2 ("p1" is P1 before any correction); an estimator without an
// estimate is absent. Catalog entries are not consulted: this is what the estimators say.
func (p *Predictor) PredictComponents(f Features, gpuType string, gpus int) map[string]Component {
	st := p.current()
	g := gpuspec.Canonical(gpuType)
	if _, ok := p.gf[g]; !ok {
		return nil
	}
	gpus = max(gpus, 1)
	r := st.resolve(cacheKey{f: f})
	ps := p.pool.Get().(*predScratch)
	defer p.pool.Put(ps)
	var pt p2Parts
	if _, ok := p.parts(st, &r.wl, r.id, g, gpus, ps, &pt); !ok {
		return nil
	}
	n := float64(gpus)
	out := map[string]Component{}
	put := func(k string, y, v float64) {
		if !math.IsInf(v, 1) {
			out[k] = Component{Throughput: n * math.Exp(y), Uncertainty: math.Sqrt(v)}
		}
	}
	put(SrcP1, pt.p1, pt.p1Var)
	put(CompPosterior, pt.post, pt.postVar)
	put(CompTransfer, pt.tr, pt.trVar)
	put(CompLowRank, pt.lr, pt.lrVar)
	put(CompRoofline, pt.rf, pt.rfVar)
	y, v := pt.combine()
	put(SrcP1P2, y, v)
	return out
}

// AddRecords adds several observed records and rebuilds the predictor's state once, where
// AddRecord defers the rebuild to the next prediction (evaluation replays many runs).
func (p *Predictor) AddRecords(recs []Record) error { return p.addRecords(recs) }

// ratioTransfer is HeldOut.RatioTransfer on log per-GPU throughput.
func ratioTransfer(ix *index, q *workload, observed []Measurement, g string, n int) (float64, bool) {
	at := func(id int, gpu string) (float64, bool) {
		for _, c := range ix.trusted[wgKey{id, gpu}] {
			if c.n == n {
				return c.y, true
			}
		}
		return 0, false
	}
	var sw, sy float64
	for _, o := range observed {
		if o.GPUs != n {
			continue
		}
		yo := math.Log(o.Throughput / float64(n))
		for id := range ix.wls {
			yg, ok1 := at(id, g)
			yh, ok2 := at(id, o.GPU)
			if !ok1 || !ok2 {
				continue
			}
			w := math.Exp(-distance(q, &ix.wls[id]) / kernelTau)
			sw += w
			sy += w * (yo + yg - yh)
		}
	}
	if sw == 0 {
		return 0, false
	}
	return sy / sw, true
}

// ColocLeaveOneOut predicts every co-located pair of t with that pair (both orders) hidden.
// For pair i, predicted[2i] and predicted[2i+1] are the two jobs' predicted colocated/isolated
// throughput ratios and measured[2i], measured[2i+1] the table's.
func ColocLeaveOneOut(t *throughput.Table) (predicted, measured []float64) {
	m := newColocModel(t)
	for i := range m.pairs {
		p := &m.pairs[i]
		ra, rb, _ := m.predict(&p.a, &p.b, p.gpu, func(j int) bool {
			q := &m.pairs[j]
			return q.gpu == p.gpu && (q.a.key == p.a.key && q.b.key == p.b.key || q.a.key == p.b.key && q.b.key == p.a.key)
		})
		predicted = append(predicted, ra, rb)
		measured = append(measured, p.ra, p.rb)
	}
	return predicted, measured
}

// RooflineValidation is what the catalog's hold-outs measured of the roofline member on one
// kind of hold-out (Kind 0: the job has runs on the queried GPU type; 1: it has none).
type RooflineValidation struct {
	Kind int `json:"kind"`
	// Cells is how many held-out cells the roofline had an estimate for; MAE its mean
	// absolute log error there, MAEMix the combination's without it on the same cells.
	Cells  int     `json:"cells"`
	MAE    float64 `json:"mae"`
	MAEMix float64 `json:"mae_mix"`
	// Gain is the t statistic of the mix with the roofline against without (negative:
	// better), Weight the roofline's weight used (0 unless Gain < -2), Calibration the
	// factor on its stated variance, Rho the correlation of its errors with the mix's.
	Gain        float64 `json:"gain_t"`
	Weight      float64 `json:"weight"`
	Calibration float64 `json:"calibration"`
	Rho         float64 `json:"rho"`
}

// RooflineValidation returns the roofline's validated statistics per kind of hold-out; nil
// when the catalog was too small to validate the combination.
func (p *Predictor) RooflineValidation() []RooflineValidation {
	st := p.current()
	if st.lr == nil {
		return nil
	}
	out := make([]RooflineValidation, 0, 2)
	for k, c := range st.lr.comb {
		out = append(out, RooflineValidation{Kind: k, Cells: c.nRf, MAE: c.maeRf, MAEMix: c.maeMixRf, Gain: c.gainRf,
			Weight: c.wRf, Calibration: c.calRf, Rho: c.rhoRf})
	}
	return out
}
