package rank

import (
	"fmt"
	"math"
)

// Heuristic is the ranker's fallback when no policy is loaded: smallest estimated GPU-time
// first, with optional aging.
//
//	score = -log2(GPUs x T / 1 min) + wait / Aging
//
// T is the predicted runtime on the job's best candidate GPU type: the job's runtime estimate
// scaled by predicted throughput. The estimate is the user's hetgpu.runtime, else what the
// pipeline's estimates step read from hetgpu.steps or the history of similar jobs' runs (for
// those, what the job ranks as given the time it has run: sidecar/stages/estimate); DefaultRuntimeS
// only when a pipeline has no estimates step and the user gave none. Short,
// narrow jobs go first, which is what minimises mean JCT and slowdown (Smith's rule). Aging is
// off by default: in the simulator every aging rate we tried raised mean bounded slowdown on the
// bundled traces (on bundled:train-1, gavel-108: 107 without aging, 571 with a one-week aging
// and 610 with ten hours), because mean slowdown is dominated by short jobs and any aging lets
// long jobs overtake them. Set AgingMinutes where starvation of wide or long jobs matters more
// than mean slowdown: every AgingMinutes of waiting then counts as halving a job's GPU-time.
//
// Starvation guard: a job that has waited more than Starvation times its expected runtime T
// (its slowdown so far is above Starvation) gains one point, a halving of its GPU-time, per
// doubling of that excess, so that no job, however wide or long, waits without bound behind a
// stream of short ones. Without runtime estimates T is the history's expected runtime (the
// estimates step), which for a job that has waited long is no longer much shorter than its
// wait.
type Heuristic struct {
	// AgingMinutes enables aging when > 0.
	AgingMinutes float64
	// DefaultRuntimeS is assumed for jobs without an estimate (default 3600 s).
	DefaultRuntimeS float64
	// Starvation is the starvation guard's slowdown threshold (> 1; 0, the default, turns it
	// off: on the held-out windows without estimates thresholds of 10, 30 and 100 changed
	// hetgpu-heuristic's mean and p99 bounded slowdown by under 3 %, docs/results/estimate-free.md).
	Starvation float64
}

// DefaultStarvation is the starvation guard's default threshold (0: off; see Heuristic).
const DefaultStarvation = 0

// ValidStarvation checks a starvation guard threshold: 0 (off) or a slowdown above 1.
func ValidStarvation(k float64) error {
	if k == 0 || k > 1 && !math.IsInf(k, 0) {
		return nil
	}
	return fmt.Errorf("starvation = %v, expected 0 (off) or a finite slowdown above 1 (a job that waited that many times its expected runtime is boosted)", k)
}

// Score computes the heuristic score of one raw feature row of schema version 1.
func (h Heuristic) Score(row []float64) float64 {
	logT := h.logRuntime(row)
	gpuMinutesLog2 := row[FGPUs] + (logT-math.Log10(60))*math.Log2(10)
	score := -gpuMinutesLog2
	if h.AgingMinutes > 0 {
		score += math.Expm1(row[FWait]) / h.AgingMinutes
	}
	return score + h.boost(row, logT)
}

// Boost is the starvation guard's part of a row's score (0 when the guard is off or the job
// has not waited Starvation times its expected runtime): what a learned order gets on top of
// its own score, so that the guard holds whichever order ranks.
func (h Heuristic) Boost(row []float64) float64 {
	if h.Starvation <= 0 {
		return 0
	}
	return h.boost(row, h.logRuntime(row))
}

func (h Heuristic) boost(row []float64, logT float64) float64 {
	if h.Starvation <= 0 {
		return 0
	}
	waitS := math.Expm1(row[FWait]) * 60
	if x := waitS / (h.Starvation * math.Pow(10, logT)); x > 1 {
		return math.Log2(x)
	}
	return 0
}

// logRuntime is log10 of the row's expected runtime in seconds: its estimate, else the default.
func (h Heuristic) logRuntime(row []float64) float64 {
	if row[FEstKnown] > 0 {
		return row[FRuntime]
	}
	rt := h.DefaultRuntimeS
	if rt <= 0 {
		rt = 3600
	}
	return math.Log10(rt)
}
