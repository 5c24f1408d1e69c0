package rank

import (
	"fmt"
	"math"
	"slices"
)

// SchemaVersion is the version of the default feature schema, the one training produces. Bump
// it whenever a feature is added, removed, reordered or its transform changes: a checkpoint
// trained on another version is refused rather than silently fed the wrong inputs. Version 2
// appends the estimate-free features to version 1's; a version 1 checkpoint (the bundled policy)
// still loads and is fed the first NumFeaturesV1 columns, exactly what it was trained on.
const SchemaVersion = 2

// SchemaVersion1 is the first schema: the FWait..FEstKnown features.
const SchemaVersion1 = 1

// Per-job features, in input order: schema version 1 is FWait..FEstKnown, version 2 adds
// FAttained..FSrcHistory. Each is a fixed transform of an observable quantity (see Extractor)
// before the learned normalisation.
const (
	// FWait: log1p(wait / 1 min).
	FWait = iota
	// FGPUs: log2(requested GPUs).
	FGPUs
	// FDemandSupply: log1p(GPUs requested by the window's jobs on the job's candidate GPU types /
	// healthy GPUs of those types).
	FDemandSupply
	// FNearAvail: min(4, (free + expected-free-within-horizon GPUs of the candidate types) /
	// requested GPUs) / 4.
	FNearAvail
	// FFrag: share of the candidate types' free GPUs that sit on nodes too full to host this
	// job's per-node share (0 = no fragmentation).
	FFrag
	// FWays: log1p(number of nodes that could host the job's per-node share now).
	FWays
	// FCanStart: 1 if enough free GPUs of one candidate type exist on at most MaxNodes nodes.
	FCanStart
	// FSpeedup: log2(best candidate type's predicted throughput / mean over candidate types).
	FSpeedup
	// FRuntime: log10(predicted runtime on the best type, seconds); 0 when unknown.
	FRuntime
	// FEnergy: log10(predicted energy on the best type, Wh); 0 when unknown.
	FEnergy
	// FNSShare: share of the running GPUs held by the job's namespace.
	FNSShare
	// FPriority: (Nomad priority - 50) / 50.
	FPriority
	// FEstKnown: 1 when the job carries a runtime estimate.
	FEstKnown
	// NumFeaturesV1 is the width of a schema version 1 row.
	NumFeaturesV1 = iota
)

// Features schema version 2 adds: what a scheduler sees of a job that says nothing about its
// runtime (the estimates step's reading, cluster.Annotations.Est).
const (
	// FAttained: log1p(attained service in GPU-minutes): the GPU time the job has run so far,
	// across preemptions (hetgpu.ran, AttainedGPUSeconds).
	FAttained = NumFeaturesV1 + iota
	// FQueued: log1p(time queued / 1 min): the wait since submission less the time run (per GPU).
	FQueued
	// FEstLeft: log10(expected time left, seconds on the reference type) of a history estimate
	// (Est.Left); 0 for other sources.
	FEstLeft
	// FEstRank: log10(what a history estimate ranks as, seconds: the reciprocal of its Gittins
	// index, EstRuntime); 0 for other sources.
	FEstRank
	// FEstConf: the share of a history estimate resting on finished runs (Est.Confidence); 1
	// for user and steps estimates, 0 without one.
	FEstConf
	// FEstRuns: log1p(finished runs behind a history estimate).
	FEstRuns
	// FEstLevel: how specific the history behind an estimate is, 0 (prior) to 1 (the same job).
	FEstLevel
	// FSrcUser, FSrcSteps, FSrcHistory: one-hot source of the estimate (none: all zero).
	FSrcUser
	FSrcSteps
	FSrcHistory
	// NumFeatures is the width of a feature row of the current schema (the Extractor's).
	NumFeatures
)

// Cluster-level inputs of the critic, after the pooled job features.
const (
	// GPending: log1p(pending jobs).
	GPending = iota
	// GFree: free share of healthy GPUs on ready nodes.
	GFree
	// GRunning: log1p(running allocations).
	GRunning
	// GLoad: log1p(GPUs requested by pending jobs / healthy GPUs).
	GLoad
	// NumGlobals is the number of cluster-level inputs.
	NumGlobals
)

// Schema names the inputs a policy was trained on.
type Schema struct {
	Version  int      `json:"version"`
	Features []string `json:"features"`
	Globals  []string `json:"globals"`
}

// DefaultSchema is the schema Extractor produces and training uses (version SchemaVersion).
func DefaultSchema() Schema {
	return Schema{
		Version: SchemaVersion,
		Features: append(v1Features(),
			"attained", "queued", "est_left", "est_rank", "est_conf", "est_runs", "est_level",
			"src_user", "src_steps", "src_history"),
		Globals: []string{"pending", "free", "running", "load"},
	}
}

// SchemaV1 is the first schema, a prefix of DefaultSchema: what the bundled policy of issue 20
// was trained on.
func SchemaV1() Schema {
	return Schema{Version: SchemaVersion1, Features: v1Features(), Globals: []string{"pending", "free", "running", "load"}}
}

func v1Features() []string {
	return []string{
		"wait", "gpus", "demand_supply", "near_avail", "frag", "ways", "can_start",
		"speedup", "runtime", "energy", "ns_share", "priority", "est_known",
	}
}

// Equal reports whether two schemas describe the same inputs.
func (s Schema) Equal(o Schema) bool {
	return s.Version == o.Version && slices.Equal(s.Features, o.Features) && slices.Equal(s.Globals, o.Globals)
}

// Supported reports whether this build extracts the schema's inputs: version 1 or 2 exactly as
// listed. A supported schema's features are a prefix of DefaultSchema's.
func (s Schema) Supported() bool { return s.Equal(DefaultSchema()) || s.Equal(SchemaV1()) }

// supportedError names the schemas this build reads.
func (s Schema) supportedError() error {
	return fmt.Errorf("rank: policy schema version %d %v is not one this build extracts: version %d %v or version %d %v",
		s.Version, s.Features, SchemaVersion1, SchemaV1().Features, SchemaVersion, DefaultSchema().Features)
}

// Validate checks a schema read from a file.
func (s Schema) Validate() error {
	if len(s.Features) == 0 {
		return fmt.Errorf("schema.features: empty, expected at least one feature name")
	}
	if s.Version <= 0 {
		return fmt.Errorf("schema.version: %d, expected > 0", s.Version)
	}
	return nil
}

// Normalizer standardises features with running means and variances (Welford), clipped to
// +-ClipZ so a rare extreme value cannot saturate the network. It is frozen inside a checkpoint.
type Normalizer struct {
	Count float64   `json:"count"`
	Mean  []float64 `json:"mean"`
	M2    []float64 `json:"m2"`
	// std is derived from M2 and cached for inference.
	std []float64
}

// ClipZ bounds normalised features.
const ClipZ = 5

// NewNormalizer starts an identity normaliser of width n.
func NewNormalizer(n int) *Normalizer {
	z := &Normalizer{Mean: make([]float64, n), M2: make([]float64, n)}
	z.refresh()
	return z
}

// Width is the number of features.
func (z *Normalizer) Width() int { return len(z.Mean) }

func (z *Normalizer) refresh() {
	if len(z.std) != len(z.Mean) {
		z.std = make([]float64, len(z.Mean))
	}
	for i := range z.Mean {
		s := 1.0
		if z.Count > 1 {
			s = math.Sqrt(z.M2[i] / (z.Count - 1))
		}
		// Constant features (a flag that never changed) must not blow up.
		if s < 1e-3 {
			s = 1e-3
		}
		if z.Count <= 1 {
			s = 1
		}
		z.std[i] = s
	}
}

// Update adds rows (row-major, Width columns) to the statistics.
func (z *Normalizer) Update(rows []float64) {
	w := len(z.Mean)
	for r := 0; r+w <= len(rows); r += w {
		z.Count++
		for i := 0; i < w; i++ {
			x := rows[r+i]
			d := x - z.Mean[i]
			z.Mean[i] += d / z.Count
			z.M2[i] += d * (x - z.Mean[i])
		}
	}
	z.refresh()
}

// Apply normalises rows in place.
func (z *Normalizer) Apply(rows []float64) {
	w := len(z.Mean)
	if len(z.std) != w {
		z.refresh()
	}
	for r := 0; r+w <= len(rows); r += w {
		for i := 0; i < w; i++ {
			v := (rows[r+i] - z.Mean[i]) / z.std[i]
			rows[r+i] = math.Max(-ClipZ, math.Min(ClipZ, v))
		}
	}
}

// Clone returns a deep copy.
func (z *Normalizer) Clone() *Normalizer {
	c := &Normalizer{Count: z.Count, Mean: slices.Clone(z.Mean), M2: slices.Clone(z.M2)}
	c.refresh()
	return c
}

func (z *Normalizer) validate(width int, field string) error {
	if len(z.Mean) != width || len(z.M2) != width {
		return fmt.Errorf("%s: %d means and %d m2 values, expected %d each", field, len(z.Mean), len(z.M2), width)
	}
	if z.Count < 0 || math.IsNaN(z.Count) {
		return fmt.Errorf("%s.count: %v, expected >= 0", field, z.Count)
	}
	for i := range z.Mean {
		if math.IsNaN(z.Mean[i]) || math.IsInf(z.Mean[i], 0) || z.M2[i] < 0 || math.IsNaN(z.M2[i]) {
			return fmt.Errorf("%s: feature %d has mean %v and m2 %v, expected finite values and m2 >= 0", field, i, z.Mean[i], z.M2[i])
		}
	}
	z.refresh()
	return nil
}

// Merge folds another normaliser's statistics into z (Chan et al.'s parallel update), so
// statistics gathered by parallel rollouts combine in a fixed order.
func (z *Normalizer) Merge(o *Normalizer) {
	if o.Count == 0 {
		return
	}
	n := z.Count + o.Count
	for i := range z.Mean {
		d := o.Mean[i] - z.Mean[i]
		z.Mean[i] += d * o.Count / n
		z.M2[i] += o.M2[i] + d*d*z.Count*o.Count/n
	}
	z.Count = n
	z.refresh()
}
