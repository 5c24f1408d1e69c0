package rank

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/hetgpu/hetgpu/model/cluster"
	"github.com/hetgpu/hetgpu/sidecar/sched"
)

// Estimate regimes: what a cluster's users tell about their jobs' runtimes. A learned policy's
// held-out verdict is judged per regime (the simulator's --estimates: the default with
// estimates, partial:F, none), and the sidecar ranks with it only in a regime whose verdict
// beats the heuristic.
const (
	// RegimeEstimates: (nearly) every job carries hetgpu.runtime.
	RegimeEstimates = "estimates"
	// RegimePartial: some do.
	RegimePartial = "partial"
	// RegimeNone: (nearly) none does; jobs are read by hetgpu.steps or the runtime history.
	RegimeNone = "none"
)

// Regimes lists the regimes in the order reports show them.
func Regimes() []string { return []string{RegimeEstimates, RegimePartial, RegimeNone} }

// Thresholds of the live regime on the share of ranked jobs that carry a user estimate: at
// least RegimeEstimatesShare is RegimeEstimates, at most RegimeNoneShare RegimeNone, between
// them RegimePartial. The simulated regimes are 1, 0.3 (partial:0.3) and 0: the limits sit
// where a cluster is closer to one of them than to the others, a judgement, not a measurement.
const (
	RegimeEstimatesShare = 0.9
	RegimeNoneShare      = 0.1
)

// RegimeOf is the regime of a queue in which share of the jobs carry a user estimate.
func RegimeOf(share float64) string {
	switch {
	case share >= RegimeEstimatesShare:
		return RegimeEstimates
	case share <= RegimeNoneShare:
		return RegimeNone
	}
	return RegimePartial
}

// MetaTrainEstimates is the checkpoint meta key of the regime a policy was trained in, as
// --estimates spells it ("scaled", "none", "partial:0.3", ...).
const MetaTrainEstimates = "estimates"

// metaRegimePrefix is where the held-out verdict of a regime other than RegimeEstimates lives
// in checkpoint meta: "heldout_none_verdict", ... RegimeEstimates keeps the keys without a
// regime ("heldout_verdict", ...), which checkpoints written before regimes existed use.
func metaRegimeKey(regime, key string) string {
	if regime == RegimeEstimates || regime == "" {
		return key
	}
	return "heldout_" + regime + "_" + strings.TrimPrefix(key, "heldout_")
}

// MetaVerdictEstimates (suffix of a regime's keys) records the replay a regime's verdict was
// judged under, as --estimates spells it.
const MetaVerdictEstimates = "heldout_estimates"

func verdictKeys() []string {
	return []string{MetaVerdict, MetaVerdictRule, MetaVerdictPooled, MetaVerdictWindow, MetaVerdictRatios,
		MetaVerdictClusters, MetaVerdictTraces, MetaVerdictSeed, MetaVerdictEstimates}
}

func checkRegime(regime string) error {
	for _, r := range Regimes() {
		if r == regime {
			return nil
		}
	}
	return fmt.Errorf("estimate regime %q, expected one of %s", regime, strings.Join(Regimes(), ", "))
}

// SetMetaRegime writes the verdict into checkpoint meta as regime's verdict (creating the map
// when nil), replacing that regime's earlier one; the other regimes' verdicts stay.
func (v *Verdict) SetMetaRegime(meta map[string]string, regime string) (map[string]string, error) {
	if err := checkRegime(regime); err != nil {
		return meta, err
	}
	one := v.SetMeta(nil)
	if v.Estimates != "" {
		one[MetaVerdictEstimates] = v.Estimates
	}
	if meta == nil {
		meta = map[string]string{}
	}
	for _, k := range verdictKeys() {
		delete(meta, metaRegimeKey(regime, k))
	}
	for k, s := range one {
		meta[metaRegimeKey(regime, k)] = s
	}
	return meta, nil
}

// VerdictFromMetaRegime reads regime's held-out verdict from checkpoint meta: nil and no error
// when there is none.
func VerdictFromMetaRegime(meta map[string]string, regime string) (*Verdict, error) {
	if err := checkRegime(regime); err != nil {
		return nil, err
	}
	one := map[string]string{}
	for _, k := range verdictKeys() {
		if s, ok := meta[metaRegimeKey(regime, k)]; ok {
			one[k] = s
		}
	}
	v, err := VerdictFromMeta(one)
	if err != nil || v == nil {
		if err != nil {
			err = fmt.Errorf("regime %s: %w", regime, err)
		}
		return nil, err
	}
	v.Estimates = one[MetaVerdictEstimates]
	return v, nil
}

// Verdicts are a policy's held-out verdicts by regime (a regime without one is absent).
type Verdicts map[string]*Verdict

// VerdictsFromMeta reads every regime's verdict from checkpoint meta.
func VerdictsFromMeta(meta map[string]string) (Verdicts, error) {
	out := Verdicts{}
	for _, r := range Regimes() {
		v, err := VerdictFromMetaRegime(meta, r)
		if err != nil {
			return nil, err
		}
		if v != nil {
			out[r] = v
		}
	}
	return out, nil
}

// Wins reports whether the policy's verdict in regime beats the heuristic, and says why in words.
func (vs Verdicts) Wins(regime string) (bool, string) {
	v := vs[regime]
	if v == nil {
		return false, fmt.Sprintf("the learned policy has no held-out verdict in the %s regime", regime)
	}
	if v.Beats() {
		return true, fmt.Sprintf("the learned policy beats the heuristic on held-out traces in the %s regime: %s", regime, v)
	}
	return false, fmt.Sprintf("the learned policy does not beat the heuristic on held-out traces in the %s regime: %s", regime, v)
}

// Summary is every regime's result in one line: "estimates: not-better; none: beats".
func (vs Verdicts) Summary() string {
	var parts []string
	keys := make([]string, 0, len(vs))
	for r := range vs {
		keys = append(keys, r)
	}
	order := map[string]int{}
	for i, r := range Regimes() {
		order[r] = i
	}
	sort.Slice(keys, func(a, b int) bool { return order[keys[a]] < order[keys[b]] })
	for _, r := range keys {
		parts = append(parts, r+": "+vs[r].Result)
	}
	if len(parts) == 0 {
		return "no held-out verdict"
	}
	return strings.Join(parts, "; ")
}

// UserEstimateShare is the share of the pending jobs that carry their user's runtime estimate
// (hetgpu.runtime; not one the estimates step read from hetgpu.steps or history), and how
// many pending jobs there are.
func UserEstimateShare(jobs []cluster.Job) (float64, int) {
	if len(jobs) == 0 {
		return 0, 0
	}
	n := 0
	for i := range jobs {
		h := &jobs[i].Hetgpu
		if h.EstRuntime > 0 && (h.Est.Source == cluster.EstUser || h.Est.Source == cluster.EstNone) {
			n++
		}
	}
	return float64(n) / float64(len(jobs)), len(jobs)
}

// RegimeSwitch ranks with a learned policy only in the estimate regimes whose held-out verdict
// beats the heuristic, and with the heuristic elsewhere: every round it reads the regime from
// the share of ranked jobs that carry a user estimate (RegimeOf) and swaps the ranker's policy
// when the choice changes. Safe for concurrent use.
type RegimeSwitch struct {
	// Ranker ranks; its policy is swapped.
	Ranker *Ranker
	// Learned is the policy the verdicts judge.
	Learned *Policy
	// Verdicts decide where Learned ranks.
	Verdicts Verdicts
	// OnChange is called, outside the switch's lock, after the regime or the choice changes,
	// with the new state (never for a pinned switch).
	OnChange func(RegimeState)

	mu      sync.Mutex
	state   RegimeState
	started bool
	pinned  bool
}

// RegimeState is what the switch decided last.
type RegimeState struct {
	// Regime is the live regime ("" before the first non-empty queue).
	Regime string
	// Share is the share of pending jobs with a user estimate, of Jobs pending jobs.
	Share float64
	Jobs  int
	// Learned: the learned policy ranks; Reason says why (or why not).
	Learned bool
	Reason  string
}

var _ sched.Ranker = (*RegimeSwitch)(nil)

// State is the switch's last decision.
func (s *RegimeSwitch) State() RegimeState {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state
}

// Pin stops the switch from swapping policies and makes the ranker rank with p from now on
// (nil: the heuristic), for reason: a policy online tuning adopted on its own evidence, or one
// the configuration forces. The switch still reads the live regime.
func (s *RegimeSwitch) Pin(p *Policy, reason string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pinned = true
	s.state.Learned, s.state.Reason = p != nil, reason
	return s.Ranker.SetPolicy(p)
}

// Decide applies the regime of a queue with share user estimates among n jobs and returns the
// state; an empty queue keeps the last regime. A pinned switch only records the regime.
func (s *RegimeSwitch) Decide(share float64, n int) (RegimeState, error) {
	s.mu.Lock()
	if n == 0 {
		st := s.state
		s.mu.Unlock()
		return st, nil
	}
	regime := RegimeOf(share)
	if s.pinned {
		s.state.Regime, s.state.Share, s.state.Jobs = regime, share, n
		st := s.state
		s.mu.Unlock()
		return st, nil
	}
	st := RegimeState{Regime: regime, Share: share, Jobs: n}
	st.Learned, st.Reason = s.Verdicts.Wins(regime)
	if st.Learned && s.Learned == nil {
		st.Learned, st.Reason = false, "no learned policy to rank with"
	}
	changed := !s.started || st.Regime != s.state.Regime || st.Learned != s.state.Learned
	if changed {
		var p *Policy
		if st.Learned {
			p = s.Learned
		}
		if err := s.Ranker.SetPolicy(p); err != nil {
			s.mu.Unlock()
			return st, err
		}
	}
	s.started = true
	s.state = st
	f := s.OnChange
	s.mu.Unlock()
	if changed && f != nil {
		f(st)
	}
	return st, nil
}

// Rank implements sched.Ranker.
func (s *RegimeSwitch) Rank(ctx context.Context, snap *cluster.Snapshot, pred sched.Predictor) ([]sched.Ranked, error) {
	share, n := UserEstimateShare(snap.Pending)
	if _, err := s.Decide(share, n); err != nil {
		return nil, err
	}
	return s.Ranker.Rank(ctx, snap, pred)
}
