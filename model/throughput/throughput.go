// Package throughput is the ground truth of how fast training jobs run on each GPU type: the
// measured tables the simulator replays and the predictor's catalog is seeded from.
//
// Sources, bundled under data/ with their licences:
//   - Gavel (Narayanan et al., OSDI 2020, MIT): steps/s of 26 job types on K80, P100 and V100 at
//     1/2/4/8 GPUs, consolidated on one server and unconsolidated (spread over servers), plus
//     every pair of jobs sharing one GPU.
//   - ElasticFlow (Gu et al., ASPLOS 2023, Apache-2.0): iterations/s on A100 and T4 by global
//     batch size and GPU count. ResNet-50 on A100 maps onto Gavel's ResNet-50 job types; the
//     other models become job types of their own ("BERT (batch size 32)").
//
// Units: a Gavel "step" processes one per-GPU batch, and steps/s is summed over the job's GPUs,
// so an ElasticFlow row with global batch b*n on n GPUs at i iterations/s is i*n steps/s of the
// job type with batch b.
//
// Fallbacks, reported through Source so nobody mistakes an estimate for a measurement:
//   - SourceScaledGPUs: the job was measured on that GPU type at other GPU counts; we take the
//     nearest count m and scale by (n/m)^ScalingExponent (0.85: about 1.8x per doubling, the
//     median of Gavel's own 1->2 GPU ratios is close to this).
//   - SourceDatasheetRatio: the job was never measured on that type; we scale its throughput
//     on its best-covered measured type by the datasheet ratio of the two types (dense FP16
//     tensor TFLOPS when both have tensor cores, else FP32, blended 50/50 with memory
//     bandwidth), times a per-type calibration learnt from ElasticFlow where a model was
//     measured on both sides (A100 against Gavel's V100 via ResNet-50; T4 against A100 via
//     BERT and DeepSpeech2). Types with no overlap use the mean calibration of those that have
//     one.
package throughput

import (
	"embed"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/hetgpu/hetgpu/model/gpuspec"
)

// Source says whether a figure was measured or derived.
type Source string

const (
	SourceMeasured       Source = "measured"
	SourceScaledGPUs     Source = "scaled-gpus"
	SourceDatasheetRatio Source = "datasheet-ratio"
)

// ScalingExponent is the GPU-count scaling exponent of the scaled-gpus fallback.
const ScalingExponent = 0.85

//go:embed data
var dataFS embed.FS

type key struct {
	job string
	gpu string
	n   int
}

type pairKey struct {
	gpu string
	a   string
	na  int
	b   string
	nb  int
}

// Table holds measured throughputs. It is read-only after construction and safe for
// concurrent use.
type Table struct {
	iso    map[key]float64
	uncons map[key]float64
	pairs  map[pairKey][2]float64
	// counts lists the measured GPU counts per (job, gpu), ascending.
	counts map[[2]string][]int
	jobs   []string
	gpus   []string
	specs  *gpuspec.Table
	calib  map[string]float64
}

func newTable() *Table {
	return &Table{
		iso:    map[key]float64{},
		uncons: map[key]float64{},
		pairs:  map[pairKey][2]float64{},
		counts: map[[2]string][]int{},
		specs:  gpuspec.Default(),
		calib:  map[string]float64{},
	}
}

// Bundled returns the embedded Gavel and ElasticFlow measurements with calibrated fallbacks.
func Bundled() (*Table, error) {
	f, err := dataFS.Open("data/gavel/simulation_throughputs.json")
	if err != nil {
		return nil, fmt.Errorf("open bundled gavel table: %w", err)
	}
	defer f.Close()
	t := newTable()
	if err := t.addGavelJSON(f, "bundled gavel/simulation_throughputs.json"); err != nil {
		return nil, err
	}
	for _, gpu := range []string{"A100", "T4"} {
		dir := "data/elasticflow/throughputs_" + gpu
		ents, err := dataFS.ReadDir(dir)
		if err != nil {
			return nil, fmt.Errorf("read bundled elasticflow %s: %w", gpu, err)
		}
		for _, e := range ents {
			data, err := dataFS.ReadFile(dir + "/" + e.Name())
			if err != nil {
				return nil, err
			}
			model := strings.TrimSuffix(e.Name(), ".csv")
			if err := t.addElasticFlowCSV(strings.NewReader(string(data)), gpuspec.Canonical(gpu), model, dir+"/"+e.Name()); err != nil {
				return nil, err
			}
		}
	}
	t.finish()
	return t, nil
}

// ParseGavelJSON reads a table in the format of Gavel's simulation_throughputs.json:
// {worker_type: {"('<job type>', <gpus>)": {"null": isolated, "('<other>', <gpus>)": [a, b]}}}.
// Worker types ending in "_unconsolidated" hold throughputs of jobs spread over servers.
func ParseGavelJSON(r io.Reader) (*Table, error) {
	t := newTable()
	if err := t.addGavelJSON(r, "gavel json"); err != nil {
		return nil, err
	}
	t.finish()
	return t, nil
}

var jobKeyRE = regexp.MustCompile(`^\('(.+)', (\d+)\)$`)

func parseJobKey(s string) (string, int, error) {
	m := jobKeyRE.FindStringSubmatch(s)
	if m == nil {
		return "", 0, fmt.Errorf("job key %q, expected \"('<job type>', <gpus>)\"", s)
	}
	n, err := strconv.Atoi(m[2])
	if err != nil || n < 1 {
		return "", 0, fmt.Errorf("job key %q: gpu count %q, expected a positive integer", s, m[2])
	}
	return m[1], n, nil
}

func (t *Table) addGavelJSON(r io.Reader, name string) error {
	var raw map[string]map[string]map[string]json.RawMessage
	if err := json.NewDecoder(r).Decode(&raw); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	if len(raw) == 0 {
		return fmt.Errorf("%s: no worker types", name)
	}
	for worker, jobs := range raw {
		base, uncons := strings.CutSuffix(worker, "_unconsolidated")
		gpu := gpuspec.Canonical(base)
		if gpu == "" {
			return fmt.Errorf("%s: worker type %q is not a known GPU type", name, worker)
		}
		for jk, entry := range jobs {
			job, n, err := parseJobKey(jk)
			if err != nil {
				return fmt.Errorf("%s: worker %s: %w", name, worker, err)
			}
			for other, v := range entry {
				if other == "null" {
					var x float64
					if err := json.Unmarshal(v, &x); err != nil || x < 0 || math.IsNaN(x) {
						return fmt.Errorf("%s: %s %s isolated throughput %s, expected a non-negative number", name, worker, jk, v)
					}
					if uncons {
						t.uncons[key{job, gpu, n}] = x
					} else {
						t.setIso(job, gpu, n, x)
					}
					continue
				}
				if uncons {
					continue
				}
				ob, on, err := parseJobKey(other)
				if err != nil {
					return fmt.Errorf("%s: worker %s job %s: co-runner: %w", name, worker, jk, err)
				}
				var ab [2]float64
				if err := json.Unmarshal(v, &ab); err != nil {
					return fmt.Errorf("%s: %s %s with %s: pair throughput %s, expected [a, b]", name, worker, jk, other, v)
				}
				t.pairs[pairKey{gpu, job, n, ob, on}] = ab
			}
		}
	}
	return nil
}

// efModels names ElasticFlow's models. ResNet-50 (A100) lands on Gavel's job types.
var efModels = map[string]string{
	"bert": "BERT", "deepspeech2": "DeepSpeech2", "gpt2": "GPT-2", "inception3": "Inception-v3",
	"resnet50": "ResNet-50", "resnet50_cifar10": "ResNet-50 CIFAR-10", "vgg16": "VGG-16",
	"cifar10": "CIFAR-10", "imagenet": "ImageNet", "ncf": "NCF", "yolov3": "YOLOv3",
}

func (t *Table) addElasticFlowCSV(r io.Reader, gpu, model, name string) error {
	rows, err := csv.NewReader(r).ReadAll()
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	if len(rows) < 2 || rows[0][0] != "global_batch_size" {
		return fmt.Errorf("%s: expected a header starting with global_batch_size", name)
	}
	display, ok := efModels[model]
	if !ok {
		display = model
	}
	counts := make([]int, len(rows[0])-1)
	for c := range counts {
		if counts[c], err = strconv.Atoi(rows[0][c+1]); err != nil {
			return fmt.Errorf("%s line 1: column %d = %q, expected a GPU count", name, c+2, rows[0][c+1])
		}
	}
	for i, row := range rows[1:] {
		global, err := strconv.Atoi(row[0])
		if err != nil {
			return fmt.Errorf("%s line %d: global_batch_size = %q, expected an integer", name, i+2, row[0])
		}
		for c, n := range counts {
			// Keep the GPU counts a node or two can hold, and only even splits of the batch.
			if n > 8 || global%n != 0 || row[c+1] == "nan" || row[c+1] == "" {
				continue
			}
			its, err := strconv.ParseFloat(row[c+1], 64)
			if err != nil {
				return fmt.Errorf("%s line %d: column %d = %q, expected iterations per second", name, i+2, c+2, row[c+1])
			}
			job := fmt.Sprintf("%s (batch size %d)", display, global/n)
			if _, dup := t.iso[key{job, gpu, n}]; !dup {
				t.setIso(job, gpu, n, its*float64(n))
			}
		}
	}
	return nil
}

func (t *Table) setIso(job, gpu string, n int, v float64) {
	k := key{job, gpu, n}
	if _, ok := t.iso[k]; !ok {
		ck := [2]string{job, gpu}
		t.counts[ck] = append(t.counts[ck], n)
	}
	t.iso[k] = v
}

func (t *Table) finish() {
	jobs, gpus := map[string]bool{}, map[string]bool{}
	for k := range t.iso {
		jobs[k.job], gpus[k.gpu] = true, true
	}
	t.jobs, t.gpus = slices.Sorted(maps.Keys(jobs)), slices.Sorted(maps.Keys(gpus))
	for _, c := range t.counts {
		sort.Ints(c)
	}
	t.calibrate()
}

// calibrate learns, per GPU type, how far the datasheet ratio is from measured ratios on jobs
// measured on both that type and an already calibrated one. Gavel's types anchor it at 1.
func (t *Table) calibrate() {
	for _, g := range t.gpus {
		if g == "k80" || g == "p100" || g == "v100" {
			t.calib[g] = 1
		}
	}
	if len(t.calib) == 0 && len(t.gpus) > 0 {
		t.calib[t.gpus[0]] = 1
	}
	for changed := true; changed; {
		changed = false
		for _, g := range t.gpus {
			if _, done := t.calib[g]; done {
				continue
			}
			// Sorted walks (jobs, counts, types), not map order: a float sum in random order
			// differs in its last bits from run to run, and so would every simulation.
			var sum float64
			var cnt int
			for _, job := range t.jobs {
				for _, n := range t.counts[[2]string{job, g}] {
					v := t.iso[key{job, g, n}]
					if v <= 0 {
						continue
					}
					for _, ref := range t.gpus {
						c, ok := t.calib[ref]
						if !ok {
							continue
						}
						w, ok := t.iso[key{job, ref, n}]
						if !ok || w <= 0 {
							continue
						}
						ds := t.datasheetRatio(ref, g)
						if ds <= 0 {
							continue
						}
						sum += math.Log(v / w / ds * c)
						cnt++
					}
				}
			}
			if cnt > 0 {
				t.calib[g] = math.Exp(sum / float64(cnt))
				changed = true
			}
		}
	}
}

// calibration returns the type's calibration factor, or the geometric mean of the
// non-anchor ones (datasheet-only types) when it has none.
func (t *Table) calibration(g string) float64 {
	if c, ok := t.calib[g]; ok {
		return c
	}
	var sum float64
	var cnt int
	for _, tg := range t.gpus { // sorted, for the same reason as in calibrate
		if c, ok := t.calib[tg]; ok && tg != "k80" && tg != "p100" && tg != "v100" {
			sum += math.Log(c)
			cnt++
		}
	}
	if cnt == 0 {
		return 1
	}
	return math.Exp(sum / float64(cnt))
}

// DatasheetRatio is the uncalibrated speed ratio to/from from datasheets (>1: "to" is faster).
func (t *Table) datasheetRatio(from, to string) float64 {
	a, okA := t.specs.Lookup(from)
	b, okB := t.specs.Lookup(to)
	if !okA || !okB {
		return 0
	}
	fa, fb := a.FP32TFLOPS, b.FP32TFLOPS
	if a.FP16TensorTFLOPS > 0 && b.FP16TensorTFLOPS > 0 {
		fa, fb = a.FP16TensorTFLOPS, b.FP16TensorTFLOPS
	}
	return 0.5*fb/fa + 0.5*b.MemBandwidthGBps/a.MemBandwidthGBps
}

// SpeedRatio is the calibrated factor by which a job runs faster on "to" than on "from".
func (t *Table) SpeedRatio(from, to string) float64 {
	ds := t.datasheetRatio(from, to)
	if ds == 0 {
		return 0
	}
	return ds * t.calibration(to) / t.calibration(from)
}

// JobTypes lists every job type with at least one measurement, sorted.
func (t *Table) JobTypes() []string { return append([]string(nil), t.jobs...) }

// GPUTypes lists the canonical GPU types with measurements, sorted.
func (t *Table) GPUTypes() []string { return append([]string(nil), t.gpus...) }

// Measured returns a measured isolated throughput (steps/s), without any fallback.
func (t *Table) Measured(jobType, gpuType string, gpus int) (float64, bool) {
	v, ok := t.iso[key{jobType, gpuspec.Canonical(gpuType), gpus}]
	return v, ok
}

// MeasuredCounts lists the GPU counts at which a job was measured on a type, ascending.
func (t *Table) MeasuredCounts(jobType, gpuType string) []int {
	return append([]int(nil), t.counts[[2]string{jobType, gpuspec.Canonical(gpuType)}]...)
}

// Unconsolidated returns Gavel's measured throughput of a multi-GPU job spread over servers.
func (t *Table) Unconsolidated(jobType, gpuType string, gpus int) (float64, bool) {
	v, ok := t.uncons[key{jobType, gpuspec.Canonical(gpuType), gpus}]
	return v, ok
}

// Throughput returns the job's steps/s on gpus GPUs of a type, measured when possible, else
// through the documented fallbacks. ok is false for an unknown job type or GPU type. A
// measured 0 means the configuration does not run (Gavel records out-of-memory as 0); callers
// must treat it as infeasible. Fallbacks never start from such a zero.
func (t *Table) Throughput(jobType, gpuType string, gpus int) (float64, Source, bool) {
	g := gpuspec.Canonical(gpuType)
	if gpus < 1 || g == "" {
		return 0, "", false
	}
	if v, ok := t.iso[key{jobType, g, gpus}]; ok {
		return v, SourceMeasured, true
	}
	if v, ok := t.scaleCount(jobType, g, gpus); ok {
		return v, SourceScaledGPUs, true
	}
	// Reference: the measured type with the most counts (ties: the fastest datasheet).
	best, bestN := "", 0
	for _, ref := range t.gpus {
		n := len(t.counts[[2]string{jobType, ref}])
		if n > bestN || n == bestN && n > 0 && t.datasheetRatio(best, ref) > 1 {
			best, bestN = ref, n
		}
	}
	if bestN == 0 {
		return 0, "", false
	}
	v := t.iso[key{jobType, best, gpus}]
	if v <= 0 {
		v, _ = t.scaleCount(jobType, best, gpus)
	}
	r := t.SpeedRatio(best, g)
	if r == 0 || v == 0 {
		return 0, "", false
	}
	return v * r, SourceDatasheetRatio, true
}

func (t *Table) scaleCount(job, g string, n int) (float64, bool) {
	cs := t.counts[[2]string{job, g}]
	if len(cs) == 0 {
		return 0, false
	}
	m := 0
	for _, c := range cs {
		if t.iso[key{job, g, c}] <= 0 {
			continue
		}
		if m == 0 || math.Abs(math.Log2(float64(c)/float64(n))) < math.Abs(math.Log2(float64(m)/float64(n))) {
			m = c
		}
	}
	if m == 0 {
		return 0, false
	}
	return t.iso[key{job, g, m}] * math.Pow(float64(n)/float64(m), ScalingExponent), true
}

// Colocated returns the measured throughputs of jobs A and B sharing the GPUs of one type.
func (t *Table) Colocated(gpuType, jobA string, gpusA int, jobB string, gpusB int) (a, b float64, ok bool) {
	g := gpuspec.Canonical(gpuType)
	if v, ok := t.pairs[pairKey{g, jobA, gpusA, jobB, gpusB}]; ok {
		return v[0], v[1], true
	}
	if v, ok := t.pairs[pairKey{g, jobB, gpusB, jobA, gpusA}]; ok {
		return v[1], v[0], true
	}
	return 0, 0, false
}

var jobTypeRE = regexp.MustCompile(`^(.+?) \(batch size (\d+)\)$`)

// ParseJobType splits "ResNet-50 (batch size 64)" into ("ResNet-50", 64). Job types without a
// batch size ("A3C", "CycleGAN") return batch 0.
func ParseJobType(s string) (model string, batch int, err error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return "", 0, fmt.Errorf("job type is empty, expected e.g. \"ResNet-50 (batch size 64)\"")
	}
	if m := jobTypeRE.FindStringSubmatch(s); m != nil {
		b, err := strconv.Atoi(m[2])
		if err != nil || b < 1 {
			return "", 0, fmt.Errorf("job type %q: batch size %q, expected a positive integer", s, m[2])
		}
		return m[1], b, nil
	}
	if strings.ContainsAny(s, "()") {
		return "", 0, fmt.Errorf("job type %q, expected \"<model>\" or \"<model> (batch size <n>)\"", s)
	}
	return s, 0, nil
}

// JobType formats a model and batch size the way ParseJobType reads them.
func JobType(model string, batch int) string {
	if batch <= 0 {
		return model
	}
	return fmt.Sprintf("%s (batch size %d)", model, batch)
}
