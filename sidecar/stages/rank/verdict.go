package rank

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// The held-out verdict decides whether the sidecar ranks with a learned policy by default: the
// policy must beat the fallback heuristic in the same pipeline on windows no training run saw.
// Pooled ratios at or below VerdictPooledMax are a gain larger than the differences seeds and
// windows make on their own; no window may be worse than VerdictWindowMax, so a pooled gain
// cannot hide a regression on one workload. (Issue 20's target is stricter, 0.93 pooled.)
const (
	VerdictPooledMax = 0.97
	VerdictWindowMax = 1.03
)

// Verdict results.
const (
	VerdictBeats     = "beats"
	VerdictNotBetter = "not-better"
)

// Checkpoint meta keys of the held-out verdict.
const (
	MetaVerdict         = "heldout_verdict"
	MetaVerdictRule     = "heldout_rule"
	MetaVerdictPooled   = "heldout_worst_pooled"
	MetaVerdictWindow   = "heldout_worst_window"
	MetaVerdictRatios   = "heldout_ratios"
	MetaVerdictClusters = "heldout_clusters"
	MetaVerdictTraces   = "heldout_traces"
	MetaVerdictSeed     = "heldout_seed"
)

// VerdictRatio is one learned/heuristic ratio of a metric (lower is better for the learned
// policy): pooled over every window of a cluster (Trace empty) or on one window.
type VerdictRatio struct {
	Cluster string  `json:"cluster"`
	Trace   string  `json:"trace,omitempty"`
	Metric  string  `json:"metric"`
	Ratio   float64 `json:"ratio"`
}

func (r VerdictRatio) where() string {
	if r.Trace == "" {
		return r.Cluster + " pooled " + r.Metric
	}
	return r.Cluster + " " + r.Trace + " " + r.Metric
}

// Verdict is a learned policy's held-out comparison with the fallback heuristic, as stored in
// its checkpoint's meta and shown by the sidecar's health API.
type Verdict struct {
	// Result is VerdictBeats or VerdictNotBetter.
	Result string `json:"result"`
	// PooledMax and WindowMax are the thresholds the result was judged with.
	PooledMax float64 `json:"pooled_max"`
	WindowMax float64 `json:"window_max"`
	// WorstPooled is the highest pooled ratio, WorstWindow the highest per-window one.
	WorstPooled   float64 `json:"worst_pooled_ratio"`
	WorstPooledAt string  `json:"worst_pooled_at"`
	WorstWindow   float64 `json:"worst_window_ratio"`
	WorstWindowAt string  `json:"worst_window_at"`
	// Ratios lists every ratio, "cluster pooled|trace metric=ratio; ...".
	Ratios   string `json:"ratios,omitempty"`
	Clusters string `json:"clusters,omitempty"`
	Traces   string `json:"traces,omitempty"`
	Seed     string `json:"seed,omitempty"`
	// Estimates is the replay the verdict was judged under, as --estimates spells it
	// ("scaled", "none", "partial:0.3"); empty in checkpoints written before regimes.
	Estimates string `json:"estimates,omitempty"`
}

// Beats reports whether the learned policy beat the heuristic.
func (v *Verdict) Beats() bool { return v != nil && v.Result == VerdictBeats }

// JudgeVerdict computes the verdict from learned/heuristic ratios: VerdictBeats only when every
// pooled ratio is at most pooledMax and every window's at most windowMax. Ratios that are not
// finite and positive (a policy that finished nothing) count as infinitely worse.
func JudgeVerdict(ratios []VerdictRatio, pooledMax, windowMax float64) (*Verdict, error) {
	if !(pooledMax > 0) || !(windowMax > 0) {
		return nil, fmt.Errorf("verdict thresholds pooled %v, window %v: expected positive ratios", pooledMax, windowMax)
	}
	v := &Verdict{PooledMax: pooledMax, WindowMax: windowMax, WorstPooled: math.Inf(-1), WorstWindow: math.Inf(-1)}
	var parts []string
	pooled, windows := 0, 0
	for _, r := range ratios {
		x := r.Ratio
		if !(x > 0) || math.IsInf(x, 0) {
			x = math.Inf(1)
		}
		parts = append(parts, r.where()+"="+formatRatio(x))
		if r.Trace == "" {
			pooled++
			if x > v.WorstPooled {
				v.WorstPooled, v.WorstPooledAt = x, r.where()
			}
		} else {
			windows++
			if x > v.WorstWindow {
				v.WorstWindow, v.WorstWindowAt = x, r.where()
			}
		}
	}
	if pooled == 0 || windows == 0 {
		return nil, fmt.Errorf("verdict: %d pooled and %d per-window ratios, expected at least one of each", pooled, windows)
	}
	v.Ratios = strings.Join(parts, "; ")
	v.Result = VerdictNotBetter
	if v.WorstPooled <= pooledMax && v.WorstWindow <= windowMax {
		v.Result = VerdictBeats
	}
	return v, nil
}

// Rule describes the thresholds.
func (v *Verdict) Rule() string {
	return fmt.Sprintf(verdictRule, v.PooledMax, v.WindowMax)
}

// String is the verdict in one line, with its numbers.
func (v *Verdict) String() string {
	if v == nil {
		return "no held-out verdict"
	}
	return fmt.Sprintf("%s: worst pooled learned/heuristic ratio %s (%s, limit %s), worst window %s (%s, limit %s)",
		v.Result, formatRatio(v.WorstPooled), v.WorstPooledAt, formatRatio(v.PooledMax),
		formatRatio(v.WorstWindow), v.WorstWindowAt, formatRatio(v.WindowMax))
}

// SetMeta writes the verdict into checkpoint meta (creating the map when nil) as the verdict
// with estimates (RegimeEstimates), replacing an earlier one; the encoding is deterministic.
// SetMetaRegime writes another regime's.
func (v *Verdict) SetMeta(meta map[string]string) map[string]string {
	if meta == nil {
		meta = map[string]string{}
	}
	for _, k := range verdictKeys() {
		delete(meta, k)
	}
	meta[MetaVerdict] = v.Result
	meta[MetaVerdictRule] = v.Rule()
	meta[MetaVerdictPooled] = formatRatio(v.WorstPooled) + " " + v.WorstPooledAt
	meta[MetaVerdictWindow] = formatRatio(v.WorstWindow) + " " + v.WorstWindowAt
	meta[MetaVerdictRatios] = v.Ratios
	for k, s := range map[string]string{MetaVerdictClusters: v.Clusters, MetaVerdictTraces: v.Traces, MetaVerdictSeed: v.Seed} {
		if s != "" {
			meta[k] = s
		}
	}
	return meta
}

// ClearVerdict removes every regime's held-out verdict from checkpoint meta: a policy changed
// after its evaluation (online tuning) no longer has one.
func ClearVerdict(meta map[string]string) {
	for _, r := range Regimes() {
		for _, k := range verdictKeys() {
			delete(meta, metaRegimeKey(r, k))
		}
	}
}

// VerdictFromMeta reads a held-out verdict from checkpoint meta: nil and no error when there
// is none, an error naming the key when one is malformed. The result is the stored one, judged
// with the stored thresholds when the policy was evaluated, not re-judged with this build's.
func VerdictFromMeta(meta map[string]string) (*Verdict, error) {
	res, ok := meta[MetaVerdict]
	if !ok {
		return nil, nil
	}
	if res != VerdictBeats && res != VerdictNotBetter {
		return nil, fmt.Errorf("meta %s = %q, expected %q or %q", MetaVerdict, res, VerdictBeats, VerdictNotBetter)
	}
	v := &Verdict{Result: res, Ratios: meta[MetaVerdictRatios], Clusters: meta[MetaVerdictClusters],
		Traces: meta[MetaVerdictTraces], Seed: meta[MetaVerdictSeed]}
	var err error
	if v.WorstPooled, v.WorstPooledAt, err = parseWorst(meta, MetaVerdictPooled); err != nil {
		return nil, err
	}
	if v.WorstWindow, v.WorstWindowAt, err = parseWorst(meta, MetaVerdictWindow); err != nil {
		return nil, err
	}
	if _, err := fmt.Sscanf(meta[MetaVerdictRule], verdictRule,
		&v.PooledMax, &v.WindowMax); err != nil {
		return nil, fmt.Errorf("meta %s = %q: %w, expected the rule with both thresholds", MetaVerdictRule, meta[MetaVerdictRule], err)
	}
	return v, nil
}

func parseWorst(meta map[string]string, key string) (float64, string, error) {
	s := meta[key]
	num, at, _ := strings.Cut(s, " ")
	x, err := strconv.ParseFloat(num, 64)
	if err != nil || at == "" {
		return 0, "", fmt.Errorf("meta %s = %q, expected \"RATIO WHERE\"", key, s)
	}
	return x, at, nil
}

// verdictRule avoids < and >, which JSON encodes as escapes in the checkpoint file.
const verdictRule = "beats when every pooled learned/heuristic ratio (avg JCT, bounded slowdown) is at most %g and no window's exceeds %g"

func formatRatio(x float64) string { return strconv.FormatFloat(x, 'f', 4, 64) }
