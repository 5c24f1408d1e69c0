package rltrain

import (
	"context"
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"

	"github.com/hetgpu/hetgpu/sidecar/backends/sim"
	"github.com/hetgpu/hetgpu/sidecar/policies"
)

// The ceiling report answers "how much could a learned order gain here, and how much of that
// does it gain" with the noise shown beside it. A learned order sees the user's runtime
// estimates and the cluster's state; hetgpu-oracle is the heuristic shown exact runtimes, what
// perfect runtime knowledge gives. Each seed draws new estimate errors and replays the same jobs
// under the three orders (common random numbers), so a ratio within one seed is a paired
// comparison and the seed-to-seed spread of the heuristic's own figures is the noise a single
// run carries. Where users write no estimates (a replay that hides some), a fourth order,
// hetgpu-hindsight, is the heuristic whose runtime history knows every group of similar jobs'
// runtimes from the start: what an order reading runtimes from the cluster's history could
// know at best, so the room between it and the heuristic is the room a learned order has from
// better history, and the room beyond it, to the oracle, needs each job's own runtime.

// CeilingPolicies are the three orders a ceiling report compares: the learned one, the fallback
// heuristic and the heuristic shown exact runtimes.
func CeilingPolicies() []string {
	return []string{"hetgpu", HeuristicVariant, policies.HetgpuOracle}
}

// CeilingPoliciesFor are the orders a ceiling report compares under replay r: CeilingPolicies,
// and hetgpu-hindsight when some jobs carry no estimate.
func CeilingPoliciesFor(r sim.EstimateReplay) []string {
	ps := CeilingPolicies()
	if r.NoEstimates || r.PartialEstimates > 0 {
		ps = append(ps, policies.HetgpuHindsight)
	}
	return ps
}

// CeilingRow is one (seed, cluster, metric): the three pooled figures, the learned and oracle
// orders' ratios to the heuristic, and the share of the heuristic-to-oracle gap the learned
// order closed (absent when the oracle is no better than the heuristic there).
type CeilingRow struct {
	Seed         uint64   `json:"seed"`
	Cluster      string   `json:"cluster"`
	Metric       string   `json:"metric"`
	Heuristic    float64  `json:"heuristic"`
	Learned      float64  `json:"learned"`
	Oracle       float64  `json:"oracle"`
	LearnedRatio float64  `json:"learned_ratio"`
	OracleRatio  float64  `json:"oracle_ratio"`
	GapCaptured  *float64 `json:"gap_captured,omitempty"`
	// Hindsight and HindsightRatio are hetgpu-hindsight's figure and its ratio to the
	// heuristic, when the evaluation ran it.
	Hindsight      *float64 `json:"hindsight,omitempty"`
	HindsightRatio *float64 `json:"hindsight_ratio,omitempty"`
}

// CeilingSummary is one (cluster, metric) over every seed.
type CeilingSummary struct {
	Cluster string `json:"cluster"`
	Metric  string `json:"metric"`
	// LearnedMean and LearnedWorst are the mean and largest learned/heuristic ratio over seeds;
	// OracleMean and OracleBest the mean and smallest oracle/heuristic ratio.
	LearnedMean  float64 `json:"learned_ratio_mean"`
	LearnedWorst float64 `json:"learned_ratio_worst"`
	OracleMean   float64 `json:"oracle_ratio_mean"`
	OracleBest   float64 `json:"oracle_ratio_best"`
	// HeuristicSpread is (max - min) / mean of the heuristic's own figure over seeds: how far
	// one run of the same order moves when only the estimate errors change.
	HeuristicSpread float64 `json:"heuristic_spread"`
	// GapCapturedMean is the mean of the seeds' GapCaptured (absent when no seed has one).
	GapCapturedMean *float64 `json:"gap_captured_mean,omitempty"`
	// HindsightMean and HindsightBest are the mean and smallest hindsight/heuristic ratio
	// (absent when no seed ran hetgpu-hindsight).
	HindsightMean *float64 `json:"hindsight_ratio_mean,omitempty"`
	HindsightBest *float64 `json:"hindsight_ratio_best,omitempty"`
}

// Ceiling is a ceiling report.
type Ceiling struct {
	Clusters []string         `json:"clusters"`
	Traces   []string         `json:"traces"`
	Seeds    []uint64         `json:"seeds"`
	Rows     []CeilingRow     `json:"rows"`
	Summary  []CeilingSummary `json:"summary"`
}

// CeilingOptions configure RunCeiling; Policies is ignored (CeilingPolicies are run) and Seed
// is replaced by each of Seeds.
type CeilingOptions struct {
	EvalOptions
	Seeds []uint64
	// SeedProgress gets each seed before its evaluation.
	SeedProgress func(seed uint64)
}

// RunCeiling evaluates CeilingPolicies once per seed and reports the ratios.
func RunCeiling(ctx context.Context, o CeilingOptions) (*Ceiling, error) {
	if len(o.Seeds) == 0 {
		return nil, fmt.Errorf("ceiling: no seeds, expected at least one")
	}
	evals := make([]*Eval, len(o.Seeds))
	for i, s := range o.Seeds {
		if o.SeedProgress != nil {
			o.SeedProgress(s)
		}
		eo := o.EvalOptions
		eo.Policies, eo.Seed = CeilingPoliciesFor(o.EstimateReplay), s
		ev, err := Evaluate(ctx, eo)
		if err != nil {
			return nil, fmt.Errorf("seed %d: %w", s, err)
		}
		evals[i] = ev
	}
	return CeilingOf(o.Seeds, evals)
}

// CeilingOf builds the report from one evaluation of CeilingPolicies per seed (evals[i] ran
// with seeds[i]). It is deterministic given the evaluations.
func CeilingOf(seeds []uint64, evals []*Eval) (*Ceiling, error) {
	if len(seeds) != len(evals) || len(seeds) == 0 {
		return nil, fmt.Errorf("ceiling: %d seeds and %d evaluations, expected as many of each and at least one", len(seeds), len(evals))
	}
	out := &Ceiling{Seeds: seeds, Traces: evals[0].Traces}
	for _, c := range evals[0].Clusters {
		out.Clusters = append(out.Clusters, c.Cluster)
	}
	metrics := []struct {
		name string
		of   func(Pooled) float64
	}{
		{"jct", func(p Pooled) float64 { return p.AvgJCTS }},
		{"bsld", func(p Pooled) float64 { return p.BSLD }},
	}
	for i, ev := range evals {
		if len(ev.Clusters) != len(out.Clusters) {
			return nil, fmt.Errorf("ceiling: seed %d evaluated %d clusters, expected %d as the first seed", seeds[i], len(ev.Clusters), len(out.Clusters))
		}
		for ci, c := range ev.Clusters {
			if c.Cluster != out.Clusters[ci] {
				return nil, fmt.Errorf("ceiling: seed %d evaluated cluster %s at position %d, expected %s as the first seed", seeds[i], c.Cluster, ci, out.Clusters[ci])
			}
			got := map[string]Pooled{}
			for _, p := range c.Pooled {
				got[p.Policy] = p
			}
			for _, name := range CeilingPolicies() {
				if _, ok := got[name]; !ok {
					return nil, fmt.Errorf("ceiling: seed %d, cluster %s: the evaluation lacks %s, expected %s", seeds[i], c.Cluster, name, strings.Join(CeilingPolicies(), ", "))
				}
			}
			for _, m := range metrics {
				h, l, o := m.of(got[HeuristicVariant]), m.of(got["hetgpu"]), m.of(got[policies.HetgpuOracle])
				if !(h > 0) {
					return nil, fmt.Errorf("ceiling: seed %d, cluster %s: the heuristic's pooled %s is %v, expected > 0", seeds[i], c.Cluster, m.name, h)
				}
				row := CeilingRow{Seed: seeds[i], Cluster: c.Cluster, Metric: m.name, Heuristic: h, Learned: l, Oracle: o,
					LearnedRatio: l / h, OracleRatio: o / h}
				if h > o {
					g := (h - l) / (h - o)
					row.GapCaptured = &g
				}
				if hs, ok := got[policies.HetgpuHindsight]; ok {
					v := m.of(hs)
					r := v / h
					row.Hindsight, row.HindsightRatio = &v, &r
				}
				out.Rows = append(out.Rows, row)
			}
		}
	}
	for _, c := range out.Clusters {
		for _, m := range metrics {
			out.Summary = append(out.Summary, summarise(c, m.name, out.Rows))
		}
	}
	return out, nil
}

func summarise(cluster, metric string, rows []CeilingRow) CeilingSummary {
	s := CeilingSummary{Cluster: cluster, Metric: metric, LearnedWorst: math.Inf(-1), OracleBest: math.Inf(1)}
	n, gaps, hinds := 0, 0, 0
	var gapSum, hMin, hMax, hSum, hindSum float64
	hindBest := math.Inf(1)
	for _, r := range rows {
		if r.Cluster != cluster || r.Metric != metric {
			continue
		}
		if n == 0 || r.Heuristic < hMin {
			hMin = r.Heuristic
		}
		if n == 0 || r.Heuristic > hMax {
			hMax = r.Heuristic
		}
		n++
		hSum += r.Heuristic
		s.LearnedMean += r.LearnedRatio
		s.OracleMean += r.OracleRatio
		s.LearnedWorst = math.Max(s.LearnedWorst, r.LearnedRatio)
		s.OracleBest = math.Min(s.OracleBest, r.OracleRatio)
		if r.GapCaptured != nil {
			gaps++
			gapSum += *r.GapCaptured
		}
		if r.HindsightRatio != nil {
			hinds++
			hindSum += *r.HindsightRatio
			hindBest = math.Min(hindBest, *r.HindsightRatio)
		}
	}
	if hinds > 0 {
		m := hindSum / float64(hinds)
		s.HindsightMean, s.HindsightBest = &m, &hindBest
	}
	if n > 0 {
		s.LearnedMean /= float64(n)
		s.OracleMean /= float64(n)
		s.HeuristicSpread = (hMax - hMin) / (hSum / float64(n))
	}
	if gaps > 0 {
		g := gapSum / float64(gaps)
		s.GapCapturedMean = &g
	}
	return s
}

// WriteTable prints the per-seed rows and the summary.
func (c *Ceiling) WriteTable(w io.Writer) error {
	fmt.Fprintf(w, "learned (hetgpu) and oracle (%s) orders against the heuristic (%s), pooled over %s\n\n",
		policies.HetgpuOracle, HeuristicVariant, strings.Join(c.Traces, ", "))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "cluster\tmetric\tseed\theuristic\tlearned/heur\toracle/heur\tgap captured\thindsight/heur\t")
	for _, r := range c.Rows {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%.4f\t%.4f\t%s\t%s\t\n", r.Cluster, r.Metric, r.Seed, figure(r.Metric, r.Heuristic),
			r.LearnedRatio, r.OracleRatio, share(r.GapCaptured), ratio(r.HindsightRatio))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "cluster\tmetric\tlearned/heur mean\tworst\toracle/heur mean\tbest\theuristic spread over %d seeds\tgap captured mean\thindsight/heur mean\tbest\t\n", len(c.Seeds))
	for _, s := range c.Summary {
		fmt.Fprintf(tw, "%s\t%s\t%.4f\t%.4f\t%.4f\t%.4f\t%.1f %%\t%s\t%s\t%s\t\n", s.Cluster, s.Metric, s.LearnedMean, s.LearnedWorst,
			s.OracleMean, s.OracleBest, 100*s.HeuristicSpread, share(s.GapCapturedMean), ratio(s.HindsightMean), ratio(s.HindsightBest))
	}
	return tw.Flush()
}

func figure(metric string, v float64) string {
	if metric == "jct" {
		return fmt.Sprintf("%.2f h", v/3600)
	}
	return fmt.Sprintf("%.3f", v)
}

func ratio(r *float64) string {
	if r == nil {
		return "-"
	}
	return fmt.Sprintf("%.4f", *r)
}

func share(g *float64) string {
	if g == nil {
		return "-"
	}
	return fmt.Sprintf("%.0f %%", 100**g)
}
