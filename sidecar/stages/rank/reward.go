package rank

import (
	"fmt"
	"math"
	"strings"
)

// BoundedSlowdownTau is the runtime floor of bounded slowdown (Feitelson's tau), so jobs of a
// few seconds do not dominate the mean.
const BoundedSlowdownTau = 10.0

// JobOutcome is one finished job of an episode.
type JobOutcome struct {
	SubmitS, StartS, FinishS float64
	// IdealS is the job's runtime alone on the best GPU type of the cluster; bounded slowdown
	// divides by it so a job is not "less slowed down" for having run on a slow GPU. 0 = use
	// the actual run time.
	IdealS float64
	GPUs   int
}

// Summary are the episode-level figures a reward can be computed from.
type Summary struct {
	Jobs    int
	AvgJCT  float64
	AvgWait float64
	AvgBSLD float64
	// Util is busy GPU time / GPU capacity over the episode.
	Util float64
	// EnergyPerWork is energy per unit of work (e.g. kWh per reference GPU-hour).
	EnergyPerWork float64
}

// Summarize computes JCT, wait and bounded slowdown averages from job outcomes; Util and
// EnergyPerWork are left for the caller, who knows the cluster.
func Summarize(jobs []JobOutcome) Summary {
	s := Summary{Jobs: len(jobs)}
	if len(jobs) == 0 {
		return s
	}
	for _, j := range jobs {
		jct := j.FinishS - j.SubmitS
		s.AvgJCT += jct
		s.AvgWait += math.Max(0, j.StartS-j.SubmitS)
		base := j.IdealS
		if base <= 0 {
			base = j.FinishS - j.StartS
		}
		s.AvgBSLD += math.Max(1, jct/math.Max(base, BoundedSlowdownTau))
	}
	n := float64(len(jobs))
	s.AvgJCT /= n
	s.AvgWait /= n
	s.AvgBSLD /= n
	return s
}

// ScoreKind selects what the reward optimises.
type ScoreKind string

const (
	ScoreBSLD ScoreKind = "bsld"
	ScoreJCT  ScoreKind = "jct"
	ScoreWait ScoreKind = "wait"
	ScoreUtil ScoreKind = "util"
	// ScoreEnergyMix weighs bounded slowdown and energy per unit of work (EnergyWeight).
	ScoreEnergyMix ScoreKind = "energy-mix"
	// ScoreJCTBSLD weighs average JCT and mean bounded slowdown equally: the two figures the
	// held-out verdict judges a learned order by.
	ScoreJCTBSLD ScoreKind = "jct-bsld"
)

// ScoreKinds lists the valid scores.
func ScoreKinds() []ScoreKind {
	return []ScoreKind{ScoreBSLD, ScoreJCT, ScoreWait, ScoreUtil, ScoreEnergyMix, ScoreJCTBSLD}
}

// ParseScore validates a score name.
func ParseScore(s string) (ScoreKind, error) {
	for _, k := range ScoreKinds() {
		if string(k) == s {
			return k, nil
		}
	}
	names := make([]string, 0, len(ScoreKinds()))
	for _, k := range ScoreKinds() {
		names = append(names, string(k))
	}
	return "", fmt.Errorf("score %q: expected one of %s", s, strings.Join(names, ", "))
}

// EnergyWeight is the energy share of ScoreEnergyMix.
const EnergyWeight = 0.3

// RewardClip bounds one episode's reward so a pathological baseline cannot dominate a batch.
const RewardClip = 2.0

// Reward is the relative improvement of the policy over the baseline on the same job sequence
// for the chosen score, as a log ratio: ln(baseline / policy) for lower-is-better scores,
// ln(policy / baseline) for utilisation; 0 means as good as the baseline, +0.1 about 10 %
// better. The log keeps gains and losses symmetric (halving and doubling a slowdown weigh the
// same), so a few disastrous explorations cannot drown every improvement. Clipped to
// +-RewardClip.
func Reward(kind ScoreKind, policy, baseline Summary) float64 {
	rel := func(pol, base float64, lowerBetter bool) float64 {
		if base <= 0 || pol <= 0 || math.IsNaN(base) || math.IsNaN(pol) {
			return 0
		}
		if lowerBetter {
			return math.Log(base / pol)
		}
		return math.Log(pol / base)
	}
	var r float64
	switch kind {
	case ScoreJCT:
		r = rel(policy.AvgJCT, baseline.AvgJCT, true)
	case ScoreWait:
		// Waits can be near zero on a quiet episode; then JCT is the meaningful scale.
		if baseline.AvgWait < 1e-3*baseline.AvgJCT || policy.AvgWait < 1e-3*policy.AvgJCT {
			r = rel(policy.AvgJCT, baseline.AvgJCT, true)
		} else {
			r = rel(policy.AvgWait, baseline.AvgWait, true)
		}
	case ScoreUtil:
		r = rel(policy.Util, baseline.Util, false)
	case ScoreJCTBSLD:
		r = (rel(policy.AvgJCT, baseline.AvgJCT, true) + rel(policy.AvgBSLD, baseline.AvgBSLD, true)) / 2
	case ScoreEnergyMix:
		r = (1-EnergyWeight)*rel(policy.AvgBSLD, baseline.AvgBSLD, true) +
			EnergyWeight*rel(policy.EnergyPerWork, baseline.EnergyPerWork, true)
	default:
		r = rel(policy.AvgBSLD, baseline.AvgBSLD, true)
	}
	return math.Max(-RewardClip, math.Min(RewardClip, r))
}
