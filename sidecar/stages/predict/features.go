package predict

import (
	"math"
	"strconv"
	"strings"
	"unicode"

	"github.com/hetgpu/hetgpu/model/cluster"
	"github.com/hetgpu/hetgpu/model/gpuspec"
	"github.com/hetgpu/hetgpu/model/throughput"
)

// Features describe a workload: what the predictor knows about a job before it ran. Zero
// values mean unknown. Name and batch size identify a workload; the catalog pools the runs
// of all jobs with the same name and batch size, whatever their Nomad IDs.
type Features struct {
	Family    string
	Name      string
	BatchSize int
	// ParamCount, Framework and the three intensities only enter the similarity distance,
	// and only when both sides know them: no bundled measurement carries them, so a network
	// input for them would be untrained.
	ParamCount float64
	Framework  string
	// ComputeDensity (FLOPs per byte moved), MemoryIntensity and CommVolume (bytes per step
	// exchanged between GPUs), in any consistent units.
	ComputeDensity  float64
	MemoryIntensity float64
	CommVolume      float64
}

// JobFeatures reads a pending job's hetgpu annotations. A job without a model name falls
// back to its Nomad key, so its own runs still refine it.
func JobFeatures(j *cluster.Job) Features {
	f := Features{Family: j.Hetgpu.ModelFamily, Name: j.Hetgpu.ModelName, BatchSize: j.Hetgpu.BatchSize,
		ParamCount: j.Hetgpu.ParamCount, Framework: j.Hetgpu.Framework}
	if f.Name == "" {
		f.Name = j.Key()
	}
	return f
}

// ObservationFeatures reads the workload of a measured run.
func ObservationFeatures(o *cluster.Observation) Features {
	f := Features{Family: o.ModelFamily, Name: o.ModelName, BatchSize: o.BatchSize, ParamCount: o.ParamCount, Framework: o.Framework}
	if f.Name == "" {
		f.Name = o.Key()
	}
	return f
}

// JobTypeFeatures reads a Gavel job type such as "ResNet-50 (batch size 64)".
func JobTypeFeatures(jobType string) (Features, error) {
	model, batch, err := throughput.ParseJobType(jobType)
	if err != nil {
		return Features{}, err
	}
	return Features{Name: model, BatchSize: batch}, nil
}

// family returns the model family: the given one, else the leading letters of the name
// ("ResNet-50" -> "resnet", "DeepSpeech2" -> "deepspeech"), else the whole first word
// when that leaves under two letters ("A3C" -> "a3c").
func (f *Features) family() string {
	if f.Family != "" {
		return strings.ToLower(f.Family)
	}
	name := strings.ToLower(strings.TrimSpace(f.Name))
	first, _, _ := strings.Cut(name, " ")
	i := strings.IndexFunc(first, func(r rune) bool { return !unicode.IsLetter(r) })
	if i < 0 {
		return first
	}
	if i < 2 {
		return first
	}
	return first[:i]
}

// workloadKey identifies a workload in the catalog: lower-case name and batch size.
func workloadKey(name string, batch int) string {
	return normName(name) + "|" + strconv.Itoa(batch)
}

func normName(s string) string { return strings.ToLower(strings.TrimSpace(s)) }

// workload is a catalog workload with its derived features.
type workload struct {
	key    string
	name   string
	family string
	f      Features
	// lb is log2 of the batch size (0 when unknown).
	lb float64
}

// Input widths of P1's networks.
const (
	dq = 9 // query: log2 batch, batch known, log2 gpus, six GPU datasheet features
	dt = 9 // token: see tokenFeatures
)

// gpuFeatures are the datasheet inputs of a GPU type (logs of FP32, FP16 tensor, memory
// bandwidth, memory, TDP, and a tensor-core flag).
type gpuFeatures [6]float64

func specFeatures(s gpuspec.Spec) gpuFeatures {
	var g gpuFeatures
	g[0] = math.Log(math.Max(s.FP32TFLOPS, 0.1))
	if s.FP16TensorTFLOPS > 0 {
		g[1], g[5] = math.Log(s.FP16TensorTFLOPS), 1
	} else {
		g[1] = g[0]
	}
	g[2] = math.Log(math.Max(s.MemBandwidthGBps, 1))
	g[3] = math.Log(math.Max(s.MemoryGiB, 1))
	g[4] = math.Log(math.Max(s.TDPW, 1))
	return g
}

// distance is the fixed similarity metric that picks a query's neighbours: family and name
// mismatches dominate, then batch size (per doubling), then the optional features. It is
// not learnt: with a few dozen workloads a learnt metric would overfit, and the networks
// already weigh the neighbours they are given.
func distance(q, p *workload) float64 {
	d := 0.0
	if q.family == "" || q.family != p.family {
		d += 2
	}
	if q.name != p.name {
		d++
	}
	switch {
	case q.f.BatchSize > 0 && p.f.BatchSize > 0:
		d += 0.5 * math.Abs(q.lb-p.lb)
	case q.f.BatchSize > 0 || p.f.BatchSize > 0:
		d++
	}
	logGap := func(a, b float64) float64 {
		if a > 0 && b > 0 {
			return 0.5 * math.Abs(math.Log(a/b))
		}
		return 0
	}
	d += logGap(q.f.ParamCount, p.f.ParamCount) + logGap(q.f.ComputeDensity, p.f.ComputeDensity) +
		logGap(q.f.MemoryIntensity, p.f.MemoryIntensity) + logGap(q.f.CommVolume, p.f.CommVolume)
	if q.f.Framework != "" && p.f.Framework != "" && q.f.Framework != p.f.Framework && !strings.EqualFold(q.f.Framework, p.f.Framework) {
		d += 0.5
	}
	return d
}

// countPenalty is the distance added per doubling between the query's GPU count and the
// count a neighbour was measured at.
const countPenalty = 0.3

// kernelTau is the width of the kernel that averages neighbours into the base prediction.
const kernelTau = 0.5

func log2b(b int) float64 {
	if b <= 0 {
		return 0
	}
	return math.Log2(float64(b))
}

// queryFeatures fills the raw query vector.
func queryFeatures(x []float64, q *workload, gpus int, g gpuFeatures) {
	x[0] = q.lb
	x[1] = 0
	if q.f.BatchSize > 0 {
		x[1] = 1
	}
	x[2] = math.Log2(float64(gpus))
	copy(x[3:9], g[:])
}

// tokenFeatures fills one raw neighbour token: the neighbour's log-throughput relative to
// the base, its relation to the query, and its distance.
func tokenFeatures(t []float64, q, p *workload, y, base, dcount, dist float64) {
	t[0] = y - base
	t[1], t[2] = 0, 0
	if q.family != "" && q.family == p.family {
		t[1] = 1
	}
	if q.name == p.name {
		t[2] = 1
	}
	t[3], t[4], t[5] = 0, 0, 0
	if q.f.BatchSize > 0 && p.f.BatchSize > 0 {
		t[3] = q.lb - p.lb
		t[4] = math.Abs(t[3])
		t[5] = 1
	}
	t[6] = dcount
	t[7] = dist
	t[8] = 1
}
