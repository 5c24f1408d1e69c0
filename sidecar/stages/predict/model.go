package predict

import (
	"bytes"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"runtime"
	"sort"
	"strconv"
	"strings"

	"github.com/hetgpu/hetgpu/internal/parallel"
	"github.com/hetgpu/hetgpu/model/gpuspec"
)

// ModelSchema versions the model file; Load rejects any other.
const ModelSchema = "hetgpu-predict-model/1"

// Feature names, written into model files so a file trained on other inputs is rejected
// instead of silently misread.
var (
	queryFeatureNames = [dq]string{"log2_batch", "batch_known", "log2_gpus", "ln_fp32_tflops", "ln_fp16_tensor_tflops",
		"ln_mem_bw_gbps", "ln_memory_gib", "ln_tdp_w", "has_tensor_cores"}
	tokenFeatureNames = [dt]string{"y_minus_base", "same_family", "same_name", "dlog2_batch", "abs_dlog2_batch",
		"batches_known", "dlog2_gpus", "distance", "present"}
)

// Model is a trained predictor: the selected P1 network, P2's residual covariance and the
// datasheet exponent of the cold-start prior.
type Model struct {
	// Seed is the training seed: the same records and seed give the same model, bit for bit.
	Seed uint64
	// Arch is the P1 architecture kept; ValMAE the grouped cross-validation normalised MAE
	// of every architecture tried (the selection criterion).
	Arch   string
	ValMAE map[string]float64
	// Sigma is P1's validation RMSE of log-throughput.
	Sigma float64
	// Beta is the exponent on the datasheet speed ratio in the cold-start prior, fitted on
	// pairs of measured types: throughput_b / throughput_a ~ (datasheet ratio)^Beta.
	Beta float64
	// BetaVar is that fit's residual log-variance.
	BetaVar float64
	// P1Var is P1's validation log-variance by how close the nearest neighbour was (same
	// model, same family, unrelated; see p1Class). It scales P2's prior.
	P1Var     [3]float64
	TrainedOn TrainInfo
	errScale  [3]float64
	p1        *p1Net
	all       map[string]*p1Net
	p2        *p2Model
}

// TrainInfo identifies the training data.
type TrainInfo struct {
	Records   int `json:"records"`
	Workloads int `json:"workloads"`
	Examples  int `json:"examples"`
	// Digest is the SHA-256 of the training slots (workload, GPU type, count, value).
	Digest string `json:"digest"`
}

// TrainOptions configure Train. Zero values take the defaults.
type TrainOptions struct {
	Seed uint64
	// Folds is the number of workload-grouped cross-validation folds (default 4).
	Folds int
	// Archs are the P1 architectures to compare (default ffn, rnn, attention).
	Archs []string
	// MinSamples is the catalog's trust threshold (default 3).
	MinSamples int
	// RunNoise is the log-scale standard deviation of one measured run (default 0.05).
	RunNoise float64
	// Workers bounds parallel training runs (default GOMAXPROCS); results do not depend on it.
	Workers int
	// KeepAll keeps every architecture's final network (for evaluation; not saved).
	KeepAll bool
	cfg     trainConfig
}

func (o TrainOptions) withDefaults() TrainOptions {
	if o.Seed == 0 {
		o.Seed = 1
	}
	if o.Folds <= 0 {
		o.Folds = 4
	}
	if len(o.Archs) == 0 {
		o.Archs = archs[:]
	}
	if o.MinSamples <= 0 {
		o.MinSamples = 3
	}
	if o.RunNoise <= 0 {
		o.RunNoise = defaultRunNoise
	}
	if o.Workers <= 0 {
		o.Workers = runtime.GOMAXPROCS(0)
	}
	if o.cfg.K == 0 {
		o.cfg = defaultTrainConfig()
	}
	return o
}

func gpuFeatureMap(specs *gpuspec.Table) map[string]gpuFeatures {
	m := map[string]gpuFeatures{}
	for _, t := range specs.Types() {
		s, _ := specs.Lookup(t)
		m[t] = specFeatures(s)
	}
	return m
}

// Train fits P1 (every architecture in grouped cross-validation, keeping the best by
// validation MAE), P2's covariance from the kept architecture's out-of-fold residuals, and
// the cold-start exponent. It is deterministic for a given seed, whatever Workers is.
func Train(recs []Record, opts TrainOptions) (*Model, error) {
	opts = opts.withDefaults()
	for _, a := range opts.Archs {
		if archSalt(a) == 0 {
			return nil, fmt.Errorf("train: architecture %q, expected %s, %s or %s", a, ArchFFN, ArchRNN, ArchAttention)
		}
	}
	specs := gpuspec.Default()
	gf := gpuFeatureMap(specs)
	ix := buildIndex(recs, opts.MinSamples, specs)
	var ids []int
	for id := range ix.wls {
		for _, g := range ix.gpus {
			if len(ix.trusted[wgKey{id, g}]) > 0 {
				ids = append(ids, id)
				break
			}
		}
	}
	if len(ids) < 3 {
		return nil, fmt.Errorf("train: %d workloads with trusted measurements, need at least 3", len(ids))
	}
	folds := min(opts.Folds, len(ids))
	foldOf := map[int]int{}
	perm := rand.New(rand.NewPCG(opts.Seed, 0)).Perm(len(ids))
	for pos, pi := range perm {
		foldOf[ids[pi]] = pos % folds
	}

	type foldData struct{ train, val []example }
	fds := make([]foldData, folds)
	for f := range fds {
		var sub []Record
		for i := range recs {
			id := ix.byKey[workloadKey(recs[i].ModelName, recs[i].BatchSize)]
			if fo, ok := foldOf[id]; !ok || fo != f {
				sub = append(sub, recs[i])
			}
		}
		ixf := buildIndex(sub, opts.MinSamples, specs)
		fds[f].train = buildExamples(ixf, gf, opts.cfg.K, nil)
		for _, id := range ids {
			if foldOf[id] != f {
				continue
			}
			for _, g := range ix.gpus {
				for _, c := range ix.trusted[wgKey{id, g}] {
					var ex example
					if buildInputs(ixf, &ix.wls[id], -1, g, c.n, gf[g], opts.cfg.K, &ex.in) {
						ex.y, ex.wl, ex.gpu, ex.n = c.y, id, g, c.n
						fds[f].val = append(fds[f].val, ex)
					}
				}
			}
		}
	}

	// Cross-validation runs: every (fold, arch), in parallel, results by index.
	type cvOut struct {
		pred []float64
		err  error
	}
	outs := make([]cvOut, folds*len(opts.Archs))
	parallel.For(len(outs), opts.Workers, func(j int) {
		f, a := j/len(opts.Archs), opts.Archs[j%len(opts.Archs)]
		net, err := trainP1(fds[f].train, a, opts.cfg, opts.Seed+uint64(f+1)*1000)
		if err != nil {
			outs[j].err = fmt.Errorf("fold %d: %w", f, err)
			return
		}
		sc := new(scratch)
		outs[j].pred = make([]float64, len(fds[f].val))
		for i := range fds[f].val {
			outs[j].pred[i] = net.predict(&fds[f].val[i].in, sc)
		}
	})
	m := &Model{Seed: opts.Seed, ValMAE: map[string]float64{}}
	for ai, a := range opts.Archs {
		var sum, n float64
		for f := 0; f < folds; f++ {
			o := outs[f*len(opts.Archs)+ai]
			if o.err != nil {
				return nil, fmt.Errorf("train %s: %w", a, o.err)
			}
			for i, ex := range fds[f].val {
				sum += math.Abs(math.Exp(o.pred[i]-ex.y) - 1)
				n++
			}
		}
		if n == 0 {
			return nil, fmt.Errorf("train: no validation examples (no two workloads share a GPU type)")
		}
		m.ValMAE[a] = sum / n
		if m.Arch == "" || m.ValMAE[a] < m.ValMAE[m.Arch] {
			m.Arch = a
		}
	}

	// Out-of-fold residuals of the kept architecture feed the uncertainty and P2. P2 learns
	// from residuals divided by their class's error scale, so that its covariance times the
	// scales of two slots is a heteroscedastic prior.
	ai := archIndex(opts.Archs, m.Arch)
	var ss, sn float64
	var cs, cn [3]float64
	for f := 0; f < folds; f++ {
		o := outs[f*len(opts.Archs)+ai]
		for i, ex := range fds[f].val {
			r := ex.y - o.pred[i]
			ss += r * r
			sn++
			c := p1Class(ex.in.nearest)
			cs[c] += r * r
			cn[c]++
		}
	}
	m.Sigma = math.Sqrt(ss / sn)
	for c := range m.P1Var {
		// Shrunk towards the pooled variance by five pseudo-examples.
		m.P1Var[c] = (cs[c] + 5*ss/sn) / (cn[c] + 5)
	}
	m.setErrScale()
	bySet := map[int]map[slotKey][2]float64{}
	for f := 0; f < folds; f++ {
		o := outs[f*len(opts.Archs)+ai]
		for i, ex := range fds[f].val {
			r := (ex.y - o.pred[i]) / m.errScale[p1Class(ex.in.nearest)]
			if bySet[ex.wl] == nil {
				bySet[ex.wl] = map[slotKey][2]float64{}
			}
			k := slotKey{ex.gpu, bucketOf(ex.n)}
			acc := bySet[ex.wl][k]
			bySet[ex.wl][k] = [2]float64{acc[0] + r, acc[1] + 1}
		}
	}
	setIDs := make([]int, 0, len(bySet))
	for id := range bySet {
		setIDs = append(setIDs, id)
	}
	sort.Ints(setIDs)
	sets := make([]residualSet, 0, len(bySet))
	for _, id := range setIDs {
		rs := residualSet{}
		for k, acc := range bySet[id] {
			rs[k] = acc[0] / acc[1]
		}
		sets = append(sets, rs)
	}
	var err error
	if m.p2, err = learnP2(sets, opts.RunNoise); err != nil {
		return nil, fmt.Errorf("train: %w", err)
	}

	// Final networks on every workload.
	full := buildExamples(ix, gf, opts.cfg.K, nil)
	keep := []string{m.Arch}
	if opts.KeepAll {
		keep = opts.Archs
	}
	nets := make([]*p1Net, len(keep))
	errs := make([]error, len(keep))
	parallel.For(len(keep), opts.Workers, func(j int) {
		nets[j], errs[j] = trainP1(full, keep[j], opts.cfg, opts.Seed)
	})
	m.all = map[string]*p1Net{}
	for j, a := range keep {
		if errs[j] != nil {
			return nil, fmt.Errorf("train final %s: %w", a, errs[j])
		}
		m.all[a] = nets[j]
	}
	m.p1 = m.all[m.Arch]
	m.Beta, m.BetaVar = fitBeta(ix, specs)
	m.TrainedOn = TrainInfo{Records: len(recs), Workloads: len(ids), Examples: len(full), Digest: digest(ix)}
	return m, nil
}

func archIndex(list []string, a string) int {
	for i, x := range list {
		if x == a {
			return i
		}
	}
	return -1
}

// datasheetRatio is how much faster "to" should be than "from" by the datasheets: dense
// FP16 tensor TFLOPS when both have tensor cores, else FP32, blended 50/50 with memory
// bandwidth (the same rule as model/throughput's fallback).
func datasheetRatio(specs *gpuspec.Table, from, to string) float64 {
	a, okA := specs.Lookup(from)
	b, okB := specs.Lookup(to)
	if !okA || !okB || a.FP32TFLOPS <= 0 || a.MemBandwidthGBps <= 0 {
		return 0
	}
	fa, fb := a.FP32TFLOPS, b.FP32TFLOPS
	if a.FP16TensorTFLOPS > 0 && b.FP16TensorTFLOPS > 0 {
		fa, fb = a.FP16TensorTFLOPS, b.FP16TensorTFLOPS
	}
	return 0.5*fb/fa + 0.5*b.MemBandwidthGBps/a.MemBandwidthGBps
}

// fitBeta regresses measured log speed ratios between GPU types on datasheet log ratios,
// through the origin, over every workload measured on both types at the same count; it
// returns the exponent and the residual variance.
func fitBeta(ix *index, specs *gpuspec.Table) (beta, variance float64) {
	type pt struct{ x, z float64 }
	var pts []pt
	var sxz, sxx float64
	for id := range ix.wls {
		for ai, a := range ix.gpus {
			for _, b := range ix.gpus[ai+1:] {
				r := datasheetRatio(specs, a, b)
				if r <= 0 {
					continue
				}
				x := math.Log(r)
				for _, ca := range ix.trusted[wgKey{id, a}] {
					for _, cb := range ix.trusted[wgKey{id, b}] {
						if ca.n == cb.n {
							sxz += x * (cb.y - ca.y)
							sxx += x * x
							pts = append(pts, pt{x, cb.y - ca.y})
						}
					}
				}
			}
		}
	}
	// Without pairs: the plain datasheet ratio, trusted to within a factor of about 1.6.
	if len(pts) < 3 {
		return 1, defaultBetaVar
	}
	beta = math.Max(0.2, math.Min(1.5, sxz/sxx))
	for _, p := range pts {
		d := p.z - beta*p.x
		variance += d * d
	}
	return beta, math.Max(variance/float64(len(pts)), 0.01)
}

// defaultBetaVar is the datasheet ratio's log-variance when no pair of types was measured.
const defaultBetaVar = 0.5 * 0.5

// setErrScale derives P2's per-class error scale from P1Var.
func (m *Model) setErrScale() {
	pooled := m.Sigma * m.Sigma
	for c := range m.errScale {
		m.errScale[c] = 1
		if pooled > 0 && m.P1Var[c] > 0 {
			m.errScale[c] = math.Sqrt(m.P1Var[c] / pooled)
		}
	}
}

func digest(ix *index) string {
	var lines []string
	for _, sk := range ix.keys {
		if y, ok := ix.stats[sk].value(ix.minSamples); ok {
			lines = append(lines, ix.wls[sk.wl].key+"\t"+sk.gpu+"\t"+strconv.Itoa(sk.n)+"\t"+strconv.FormatFloat(y, 'g', -1, 64))
		}
	}
	sort.Strings(lines)
	h := sha256.Sum256([]byte(strings.Join(lines, "\n")))
	return hex.EncodeToString(h[:])
}

// modelFile is the on-disk form.
type modelFile struct {
	Schema        string             `json:"schema"`
	Seed          uint64             `json:"seed"`
	Arch          string             `json:"arch"`
	ValMAE        map[string]float64 `json:"val_mae"`
	Sigma         float64            `json:"sigma"`
	Beta          float64            `json:"beta"`
	BetaVar       float64            `json:"beta_var"`
	P1Var         []float64          `json:"p1_var"`
	TrainedOn     TrainInfo          `json:"trained_on"`
	QueryFeatures []string           `json:"query_features"`
	TokenFeatures []string           `json:"token_features"`
	P1            p1File             `json:"p1"`
	P2            p2File             `json:"p2"`
}

type p1File struct {
	Shape   netShape  `json:"shape"`
	QMean   []float64 `json:"q_mean"`
	QStd    []float64 `json:"q_std"`
	TMean   []float64 `json:"t_mean"`
	TStd    []float64 `json:"t_std"`
	YStd    float64   `json:"y_std"`
	Weights []float64 `json:"weights"`
}

type p2File struct {
	// Types and T: the GPU-type residual covariance, row-major.
	Types []string  `json:"types"`
	T     []float64 `json:"t"`
	// SC2 is shared by equal GPU counts, SE2 each slot's own.
	SC2      float64 `json:"sc2"`
	SE2      float64 `json:"se2"`
	RunNoise float64 `json:"run_noise"`
}

// Save writes the model as indented JSON (float64s round-trip exactly).
func (m *Model) Save(w io.Writer) error {
	f := modelFile{Schema: ModelSchema, Seed: m.Seed, Arch: m.Arch, ValMAE: m.ValMAE, Sigma: m.Sigma, Beta: m.Beta,
		BetaVar: m.BetaVar, P1Var: m.P1Var[:],
		TrainedOn: m.TrainedOn, QueryFeatures: queryFeatureNames[:], TokenFeatures: tokenFeatureNames[:],
		P1: p1File{Shape: m.p1.net.shape, QMean: m.p1.qMean[:], QStd: m.p1.qStd[:], TMean: m.p1.tMean[:], TStd: m.p1.tStd[:],
			YStd: m.p1.yStd, Weights: m.p1.net.w},
		P2: p2File{Types: m.p2.types, T: m.p2.t, SC2: m.p2.sc2, SE2: m.p2.se2, RunNoise: m.p2.runNoise}}
	enc := json.NewEncoder(w)
	enc.SetIndent("", " ")
	if err := enc.Encode(&f); err != nil {
		return fmt.Errorf("save model: %w", err)
	}
	return nil
}

// LoadModel reads a model file, checking its schema, feature names and sizes.
func LoadModel(r io.Reader) (*Model, error) {
	var f modelFile
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("load model: %w", err)
	}
	if f.Schema != ModelSchema {
		return nil, fmt.Errorf("load model: field schema = %q, expected %q", f.Schema, ModelSchema)
	}
	if strings.Join(f.QueryFeatures, ",") != strings.Join(queryFeatureNames[:], ",") {
		return nil, fmt.Errorf("load model: field query_features = %q, expected %q", f.QueryFeatures, queryFeatureNames)
	}
	if strings.Join(f.TokenFeatures, ",") != strings.Join(tokenFeatureNames[:], ",") {
		return nil, fmt.Errorf("load model: field token_features = %q, expected %q", f.TokenFeatures, tokenFeatureNames)
	}
	s := f.P1.Shape
	if err := s.validate(); err != nil {
		return nil, fmt.Errorf("load model: field p1.shape: %w", err)
	}
	if s.DQ != dq || s.DT != dt || s.Arch != f.Arch {
		return nil, fmt.Errorf("load model: field p1.shape = %+v, expected dq=%d dt=%d arch=%s", s, dq, dt, f.Arch)
	}
	if want := s.layout().n; len(f.P1.Weights) != want {
		return nil, fmt.Errorf("load model: field p1.weights has %d values, expected %d for %+v", len(f.P1.Weights), want, s)
	}
	if len(f.P1.QMean) != dq || len(f.P1.QStd) != dq || len(f.P1.TMean) != dt || len(f.P1.TStd) != dt {
		return nil, fmt.Errorf("load model: field p1 normalisation has %d/%d/%d/%d values, expected %d/%d/%d/%d",
			len(f.P1.QMean), len(f.P1.QStd), len(f.P1.TMean), len(f.P1.TStd), dq, dq, dt, dt)
	}
	if !(f.P1.YStd > 0) {
		return nil, fmt.Errorf("load model: field p1.y_std = %v, expected > 0", f.P1.YStd)
	}
	for i, v := range append(append([]float64{}, f.P1.QStd...), f.P1.TStd...) {
		if !(v > 0) {
			return nil, fmt.Errorf("load model: normalisation standard deviation %d = %v, expected > 0", i, v)
		}
	}
	n := len(f.P2.Types)
	if n == 0 || len(f.P2.T) != n*n {
		return nil, fmt.Errorf("load model: field p2.t has %d values for %d types, expected %d", len(f.P2.T), n, n*n)
	}
	if !(f.P2.SE2 > 0) || !(f.P2.SC2 >= 0) || !(f.P2.RunNoise > 0) {
		return nil, fmt.Errorf("load model: fields p2.se2 = %v, p2.sc2 = %v, p2.run_noise = %v, expected > 0, >= 0, > 0", f.P2.SE2, f.P2.SC2, f.P2.RunNoise)
	}
	if len(f.P1Var) != 3 || !(f.BetaVar > 0) || !(f.Sigma > 0) {
		return nil, fmt.Errorf("load model: fields p1_var (%d values), beta_var = %v, sigma = %v, expected 3 values and positive numbers", len(f.P1Var), f.BetaVar, f.Sigma)
	}
	m := &Model{Seed: f.Seed, Arch: f.Arch, ValMAE: f.ValMAE, Sigma: f.Sigma, Beta: f.Beta, BetaVar: f.BetaVar, TrainedOn: f.TrainedOn}
	copy(m.P1Var[:], f.P1Var)
	m.setErrScale()
	nt := &net{shape: s, lay: s.layout(), w: f.P1.Weights}
	m.p1 = &p1Net{net: nt, yStd: f.P1.YStd}
	copy(m.p1.qMean[:], f.P1.QMean)
	copy(m.p1.qStd[:], f.P1.QStd)
	copy(m.p1.tMean[:], f.P1.TMean)
	copy(m.p1.tStd[:], f.P1.TStd)
	m.all = map[string]*p1Net{m.Arch: m.p1}
	m.p2 = &p2Model{types: f.P2.Types, t: f.P2.T, sc2: f.P2.SC2, se2: f.P2.SE2, runNoise: f.P2.RunNoise}
	m.p2.index()
	m.p2.summarise()
	return m, nil
}

//go:embed model/default.json
var defaultModelJSON []byte

// DefaultModel returns the shipped model, trained on the bundled measurements with
// `hetgpu predict train --seed 1 --out sidecar/stages/predict/model/default.json`.
func DefaultModel() (*Model, error) {
	m, err := LoadModel(bytes.NewReader(defaultModelJSON))
	if err != nil {
		return nil, fmt.Errorf("embedded model/default.json: %w", err)
	}
	return m, nil
}
