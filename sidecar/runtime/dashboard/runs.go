package dashboard

import (
	"maps"
	"math"
	"slices"
	"sort"
	"time"

	"github.com/hetgpu/hetgpu/model/cluster"
	"github.com/hetgpu/hetgpu/model/history"
	"github.com/hetgpu/hetgpu/sidecar/runtime/store"
)

// Energy is GET /v1/energy: the energy of measured runs per GPU type and per namespace,
// in total and over time, and per unit of work.
type Energy struct {
	Runs    int     `json:"runs"`
	EnergyJ float64 `json:"energy_j"`
	// ByType and ByNamespace are sorted by key.
	ByType      []EnergyGroup `json:"by_gpu_type"`
	ByNamespace []EnergyGroup `json:"by_namespace"`
	// Buckets split the runs by end time (the backend's clock) into equal spans.
	BucketS float64        `json:"bucket_s"`
	Buckets []EnergyBucket `json:"buckets"`
}

// EnergyGroup sums the runs of one GPU type or namespace.
type EnergyGroup struct {
	Key        string  `json:"key"`
	Runs       int     `json:"runs"`
	EnergyJ    float64 `json:"energy_j"`
	GPUSeconds float64 `json:"gpu_seconds"`
	// Steps is the work done (steps/s × runtime); Samples where the batch size is known.
	Steps   float64 `json:"steps"`
	Samples float64 `json:"samples,omitempty"`
	// JPerStep = energy / steps over the runs that report throughput and energy;
	// KWhPerGPUHour = energy / GPU time.
	JPerStep       float64 `json:"j_per_step,omitempty"`
	JPerSample     float64 `json:"j_per_sample,omitempty"`
	KWhPerGPUHour  float64 `json:"kwh_per_gpu_hour,omitempty"`
	workJ, sampleJ float64
}

// EnergyBucket is the energy of the runs that ended in [Start, Start+bucket).
type EnergyBucket struct {
	Start       time.Time          `json:"start"`
	ByType      map[string]float64 `json:"by_gpu_type"`
	ByNamespace map[string]float64 `json:"by_namespace"`
}

// maxBuckets bounds the time series (bars stay readable).
const maxBuckets = 24

// BuildEnergy sums stored observations.
func BuildEnergy(obs []store.ObservationRecord) Energy {
	en := Energy{ByType: []EnergyGroup{}, ByNamespace: []EnergyGroup{}, Buckets: []EnergyBucket{}}
	byType, byNS := map[string]*EnergyGroup{}, map[string]*EnergyGroup{}
	var first, last time.Time
	for _, r := range obs {
		o := r.Obs
		en.Runs++
		en.EnergyJ += o.EnergyJ
		addEnergy(byType, o.GPUType, &o)
		addEnergy(byNS, o.Namespace, &o)
		if first.IsZero() || o.Time.Before(first) {
			first = o.Time
		}
		if o.Time.After(last) {
			last = o.Time
		}
	}
	en.ByType, en.ByNamespace = sortedGroups(byType), sortedGroups(byNS)
	if en.Runs == 0 {
		return en
	}
	en.BucketS = niceBucket(last.Sub(first).Seconds() / maxBuckets)
	start := first.Truncate(time.Duration(en.BucketS * float64(time.Second)))
	n := int(last.Sub(start).Seconds()/en.BucketS) + 1
	for i := 0; i < n; i++ {
		en.Buckets = append(en.Buckets, EnergyBucket{Start: start.Add(time.Duration(float64(i) * en.BucketS * float64(time.Second))),
			ByType: map[string]float64{}, ByNamespace: map[string]float64{}})
	}
	for _, r := range obs {
		i := min(n-1, int(r.Obs.Time.Sub(start).Seconds()/en.BucketS))
		en.Buckets[i].ByType[r.Obs.GPUType] += r.Obs.EnergyJ
		en.Buckets[i].ByNamespace[r.Obs.Namespace] += r.Obs.EnergyJ
	}
	return en
}

func addEnergy(m map[string]*EnergyGroup, key string, o *cluster.Observation) {
	g := m[key]
	if g == nil {
		g = &EnergyGroup{Key: key}
		m[key] = g
	}
	g.Runs++
	g.EnergyJ += o.EnergyJ
	g.GPUSeconds += float64(o.GPUs) * o.RuntimeS
	if o.Throughput > 0 && o.EnergyJ > 0 {
		steps := o.Throughput * o.RuntimeS
		g.Steps += steps
		g.workJ += o.EnergyJ
		if o.BatchSize > 0 {
			g.Samples += steps * float64(o.BatchSize)
			g.sampleJ += o.EnergyJ
		}
	}
}

func sortedGroups(m map[string]*EnergyGroup) []EnergyGroup {
	out := make([]EnergyGroup, 0, len(m))
	for _, g := range m {
		if g.Steps > 0 {
			g.JPerStep = g.workJ / g.Steps
		}
		if g.Samples > 0 {
			g.JPerSample = g.sampleJ / g.Samples
		}
		if g.GPUSeconds > 0 {
			g.KWhPerGPUHour = g.EnergyJ / 3.6e6 / (g.GPUSeconds / 3600)
		}
		out = append(out, *g)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

// niceBucket rounds a bucket width up to a readable span (1 min … 1 week).
func niceBucket(s float64) float64 {
	for _, b := range []float64{60, 300, 600, 1800, 3600, 3 * 3600, 6 * 3600, 12 * 3600, 86400, 2 * 86400, 7 * 86400} {
		if s <= b {
			return b
		}
	}
	return math.Ceil(s/(7*86400)) * 7 * 86400
}

// Learning is GET /v1/learning: measured runs against what hetgpu predicted for them, the
// errors per GPU type and the ranking policy in use.
type Learning struct {
	// Policy is the ranking policy's reference ("bundled:default", a checkpoint path, "tuned:…")
	// and PolicyInfo its training record (nil for the heuristic or an unreadable checkpoint).
	Policy     string      `json:"policy"`
	PolicyInfo *PolicyInfo `json:"policy_info,omitempty"`
	// Tuning counts online tuning steps by result (adopted, kept, error).
	Tuning map[string]float64 `json:"tuning"`
	// Runs is how many stored runs were read; Points those with a prediction to compare.
	Runs   int          `json:"runs"`
	Points []LearnPoint `json:"points"`
	ByType []ErrorStats `json:"by_gpu_type"`
	// RuntimeHistory is the runtime history jobs without hetgpu.runtime are read by (the
	// finished runs of similar jobs; nil without one).
	RuntimeHistory *history.Stats `json:"runtime_history,omitempty"`
}

// LearnPoint is one measured run with the prediction of the decision that placed it.
type LearnPoint struct {
	Time           time.Time `json:"time"`
	JobKey         string    `json:"job_key"`
	GPUType        string    `json:"gpu_type"`
	GPUs           int       `json:"gpus"`
	Source         string    `json:"source"`
	PredThroughput float64   `json:"predicted_throughput"`
	Throughput     float64   `json:"measured_throughput"`
	PredPowerW     float64   `json:"predicted_power_w,omitempty"`
	PowerW         float64   `json:"measured_power_w,omitempty"`
	// ThrErr and PowerErr are |predicted − measured| / measured; -1 when either is missing.
	ThrErr   float64 `json:"throughput_error"`
	PowerErr float64 `json:"power_error"`
}

// ErrorStats summarises the relative errors of one GPU type.
type ErrorStats struct {
	GPUType string `json:"gpu_type"`
	Runs    int    `json:"runs"`
	// MeanThrErr and MeanPowerErr are mean relative errors; Within10 the share of runs whose
	// throughput was predicted within 10 %.
	MeanThrErr   float64 `json:"mean_throughput_error"`
	MeanPowerErr float64 `json:"mean_power_error"`
	Within10     float64 `json:"throughput_within_10pct"`
	powerN       int
}

// maxLearnPoints bounds the runs compared (the newest), so the page stays quick.
const maxLearnPoints = 2000

// PredictionLookup returns what was predicted for a run: the latest decision of the run's
// task group when it chose the run's GPU type and count.
type PredictionLookup func(o *cluster.Observation) (thr, powerW float64, ok bool)

// DecisionLookup is the PredictionLookup over the store's latest decisions.
func DecisionLookup(st *store.Store) PredictionLookup {
	return func(o *cluster.Observation) (float64, float64, bool) {
		r, ok := st.Latest(o.Key())
		if !ok || r.Decision == nil || r.Decision.GPUType != o.GPUType || r.Decision.GPUs() != o.GPUs || r.Decision.PredThroughput <= 0 {
			return 0, 0, false
		}
		return r.Decision.PredThroughput, r.Decision.PredPowerW, true
	}
}

// BuildLearning compares the newest runs with their predictions.
func BuildLearning(obs []store.ObservationRecord, lookup PredictionLookup, policy string, tuning map[string]float64) Learning {
	l := Learning{Policy: policy, Tuning: tuning, Runs: len(obs), Points: []LearnPoint{}, ByType: []ErrorStats{}}
	if l.Tuning == nil {
		l.Tuning = map[string]float64{}
	}
	if len(obs) > maxLearnPoints {
		obs = obs[len(obs)-maxLearnPoints:]
	}
	stats := map[string]*ErrorStats{}
	for _, r := range obs {
		o := r.Obs
		if o.Throughput <= 0 {
			continue
		}
		thr, pw, ok := lookup(&o)
		if !ok {
			continue
		}
		p := LearnPoint{Time: o.Time, JobKey: o.Key(), GPUType: o.GPUType, GPUs: o.GPUs,
			Source: r.Source, PredThroughput: thr, Throughput: o.Throughput, PredPowerW: pw, ThrErr: -1, PowerErr: -1}
		p.PowerW = o.AvgPowerW
		if p.PowerW == 0 && o.EnergyJ > 0 && o.RuntimeS > 0 {
			p.PowerW = o.EnergyJ / o.RuntimeS
		}
		p.ThrErr = math.Abs(thr-o.Throughput) / o.Throughput
		if pw > 0 && p.PowerW > 0 {
			p.PowerErr = math.Abs(pw-p.PowerW) / p.PowerW
		}
		l.Points = append(l.Points, p)
		s := stats[o.GPUType]
		if s == nil {
			s = &ErrorStats{GPUType: o.GPUType}
			stats[o.GPUType] = s
		}
		s.Runs++
		s.MeanThrErr += p.ThrErr
		if p.ThrErr <= 0.1 {
			s.Within10++
		}
		if p.PowerErr >= 0 {
			s.MeanPowerErr += p.PowerErr
			s.powerN++
		}
	}
	for _, k := range slices.Sorted(maps.Keys(stats)) {
		s := stats[k]
		s.MeanThrErr /= float64(s.Runs)
		s.Within10 /= float64(s.Runs)
		if s.powerN > 0 {
			s.MeanPowerErr /= float64(s.powerN)
		}
		l.ByType = append(l.ByType, *s)
	}
	return l
}
