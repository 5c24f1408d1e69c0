// Package predicteval is the predictor's offline research evaluation: leave-one-job-out
// protocols on a throughput table and reference estimators that bound what any predictor can
// reach on it (limits.go). The sidecar never runs it; `hetgpu predict eval` does.
package predicteval

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"sort"
	"time"

	"github.com/hetgpu/hetgpu/internal/parallel"
	"github.com/hetgpu/hetgpu/model/throughput"
	"github.com/hetgpu/hetgpu/sidecar/stages/predict"
)

// Evaluation on a throughput table (Gavel's JSON format), two protocols, each repeated with
// every job type held out in turn (P1 and P2 are retrained without it every time):
//
//	(a) new job: every entry of the job type is unknown; P1 predicts them from the job's
//	    features and the other job types' entries.
//	(b) partly observed job: one (job type, GPU type) pair is held out at all its GPU
//	    counts; the job's entries on the other GPU types arrive as observed runs, one at a
//	    time (k = 1..MaxRuns, round-robin over those entries in a seeded random order), each
//	    the table value times exp(Noise x N(0,1)): multiplicative log-normal run-to-run
//	    noise with a median of the true value. P1+P2 predict the held-out entries after
//	    every run.
//	(b') partly observed job, per entry: one entry of Gavel's table, i.e. one (job type,
//	    GPU type, GPU count) cell, is held out while the job's other cells (the other GPU
//	    types and the other GPU counts on the same type) arrive as MaxRuns observed runs,
//	    round-robin in a seeded random order with the same noise; P1+P2 predict the held-out
//	    cell after them (and P1 alone before them).
//
// Errors are normalised: |predicted - true| / true.

// EvalOptions configure Evaluate.
type EvalOptions struct {
	// Seed drives training and the observed-run noise (default 1).
	Seed uint64
	// Noise is the log-scale standard deviation of one observed run (default 0.05).
	Noise float64
	// MaxRuns is the largest k of protocol (b) (default 10).
	MaxRuns int
	// Workers bounds parallel folds (default GOMAXPROCS).
	Workers int
	// Train tunes the per-fold training (Seed and KeepAll are set by Evaluate).
	Train predict.TrainOptions
	// Trace, when set, receives every estimator's prediction of every held-out cell under
	// (b) and (b'), from several goroutines at once (for analysis of the combination).
	Trace func(TraceEntry)
}

// TraceEntry is one held-out cell with what each estimator predicted for it.
type TraceEntry struct {
	// Protocol is "b" or "b_entry".
	Protocol   string                       `json:"protocol"`
	Job        string                       `json:"job"`
	GPU        string                       `json:"gpu"`
	GPUs       int                          `json:"gpus"`
	Throughput float64                      `json:"throughput"`
	Estimates  map[string]predict.Component `json:"estimates"`
}

// EvalReport is Evaluate's result.
type EvalReport struct {
	JobTypes int      `json:"job_types"`
	GPUTypes []string `json:"gpu_types"`
	Entries  int      `json:"entries"`
	// MAE is the normalised MAE per model: "ffn", "rnn", "attention", "p1" (the architecture
	// each fold selected by its own validation), "knn" (the neighbour kernel average P1
	// starts from) under protocol (a); "p1p2" (and "ratio") under protocol (b) and
	// "p1p2_entry" under protocol (b'), both after MaxRuns runs.
	MAE map[string]float64 `json:"mae"`
	// MAENewJob and MAEPartly hold protocol (a) and (b) separately; (b) has "p1" (k = 0),
	// "p1p2" (k = MaxRuns) and "ratio", a reference that sees the job's other entries
	// without noise: the held-out value is the job's value on another GPU type at the same
	// count times the similar jobs' ratio between the two types (kernel-weighted). It shows
	// how far a table's cross-type ratios are predictable at all.
	MAENewJob map[string]float64 `json:"mae_new_job"`
	MAEPartly map[string]float64 `json:"mae_partly_observed"`
	// MAEAfter[k] and Within10[k]: protocol (b) after k observed runs, k = 0..MaxRuns.
	MAEAfter        []float64 `json:"mae_after"`
	Within10        []float64 `json:"within10"`
	Within10After10 float64   `json:"within10_after10"`
	// MAEEntry and Within10Entry are protocol (b'), one (job type, GPU type, GPU count)
	// entry held out: "p1" before any run, "p1p2" after MaxRuns runs (the JSON name
	// within10_entry_after10 holds the share after MaxRuns, 10 by default).
	MAEEntry             map[string]float64 `json:"mae_entry"`
	Within10EntryAfter0  float64            `json:"within10_entry_after0"`
	Within10EntryAfter10 float64            `json:"within10_entry_after10"`
	EntryPredictions     int                `json:"entry_predictions"`
	// RatioWithin10 is the share within 10 % of the "ratio" reference of protocol (b).
	RatioWithin10 float64 `json:"ratio_within10"`
	// NewJobWithin10 is the share within 10 % under protocol (a) for the selected P1.
	NewJobWithin10 float64 `json:"new_job_within10"`
	// PartlyPredictions counts protocol (b)'s held-out predictions per k.
	PartlyPredictions int `json:"partly_predictions"`
	// Selected counts how often each architecture won a fold's validation.
	Selected map[string]int `json:"selected"`
	// Coloc is leave-one-pair-out co-location error (normalised MAE of each job's
	// colocated/isolated ratio) and the error of always predicting the mean ratio.
	ColocMAE         float64 `json:"coloc_mae"`
	ColocMAEBaseline float64 `json:"coloc_mae_baseline"`
	ColocPairs       int     `json:"coloc_pairs"`
	// ReferenceLimits are estimator families run over the held-out sets of protocols (b) and
	// (b') to show how far any predictor can go on the table. They are NOT the predictor:
	// they see the job's other entries without noise, and their headline figures use the
	// setting that did best on the evaluated predictions themselves (limits.go).
	ReferenceLimits *LimitReport `json:"reference_limits"`
	// Estimators breaks protocols (a), (b) after MaxRuns runs and (b') down by P2's
	// estimators, each alone on the predictions it covers, beside the combination on the
	// same predictions (keys "a", "b", "b_entry"; estimator names as in
	// predict.PredictComponents: "p1", "posterior", "transfer", "lowrank", "p1p2").
	Estimators map[string]map[string]EstimatorEval `json:"estimators"`
	// Roofline is the roofline member's validation on each fold's catalog (the hold-outs
	// that decide whether it joins the combination), per kind of hold-out.
	Roofline []RooflineFolds `json:"roofline_validation"`
	// PerJob breaks the errors down by held-out job type.
	PerJob  map[string]JobEval `json:"per_job"`
	Noise   float64            `json:"noise"`
	MaxRuns int                `json:"max_runs"`
	Seed    uint64             `json:"seed"`
	Seconds float64            `json:"seconds"`
}

// JobEval is one held-out job type's errors.
type JobEval struct {
	// NewJob is P1's normalised MAE under protocol (a); Partly P1+P2's under (b) after
	// MaxRuns runs (absent for a job measured on one GPU type only).
	NewJob float64  `json:"new_job"`
	Partly *float64 `json:"partly_observed,omitempty"`
}

// RooflineFolds summarises predict.RooflineValidation over the folds for one kind of
// hold-out (0: the job ran on the type; 1: it did not).
type RooflineFolds struct {
	Kind int `json:"kind"`
	// Folds counts the folds that validated it and Accepted those whose hold-outs let it
	// into the combination; the rest are means over the folds.
	Folds    int     `json:"folds"`
	Accepted int     `json:"accepted"`
	MAE      float64 `json:"mae"`
	MAEMix   float64 `json:"mae_mix"`
	Gain     float64 `json:"gain_t"`
	Weight   float64 `json:"weight"`
}

// EstimatorEval is one estimator's error on the predictions it made under a protocol.
type EstimatorEval struct {
	Predictions int     `json:"predictions"`
	MAE         float64 `json:"mae"`
	Within10    float64 `json:"within10"`
	// CombinedMAE is the combination's ("p1p2") MAE on the same predictions.
	CombinedMAE float64 `json:"combined_mae"`
}

// compErrs collects per-estimator errors with the combination's error on the same cell.
type compErrs map[string][][2]float64

func (c compErrs) add(comps map[string]predict.Component, truth float64) {
	comb, ok := comps[predict.SrcP1P2]
	if !ok {
		return
	}
	ce := relErr(comb.Throughput, truth)
	for k, v := range comps {
		c[k] = append(c[k], [2]float64{relErr(v.Throughput, truth), ce})
	}
}

func (c compErrs) merge(o compErrs) {
	for k, v := range o {
		c[k] = append(c[k], v...)
	}
}

func (c compErrs) report() map[string]EstimatorEval {
	out := map[string]EstimatorEval{}
	for k, v := range c {
		own, comb := make([]float64, len(v)), make([]float64, len(v))
		for i, e := range v {
			own[i], comb[i] = e[0], e[1]
		}
		out[k] = EstimatorEval{Predictions: len(v), MAE: mean(own), Within10: within(own, 0.1), CombinedMAE: mean(comb)}
	}
	return out
}

// entry is one measured cell of a job type.
type entry = predict.Measurement

// Evaluate runs both protocols on a table.
func Evaluate(ctx context.Context, t *throughput.Table, opts EvalOptions) (*EvalReport, error) {
	start := time.Now()
	if opts.Seed == 0 {
		opts.Seed = 1
	}
	if opts.Noise < 0 || math.IsNaN(opts.Noise) {
		return nil, fmt.Errorf("eval: noise = %v, expected >= 0", opts.Noise)
	}
	if opts.Noise == 0 {
		opts.Noise = predict.DefaultRunNoise
	}
	if opts.MaxRuns <= 0 {
		opts.MaxRuns = 10
	}
	if opts.Workers <= 0 {
		opts.Workers = runtime.GOMAXPROCS(0)
	}
	recs := predict.SeedRecords(t)
	byJob := map[string][]entry{}
	names := map[string]string{}
	feats := map[string]predict.Features{}
	var jobs []string
	for _, r := range recs {
		k := predict.WorkloadKey(r.ModelName, r.BatchSize)
		if _, ok := byJob[k]; !ok {
			jobs = append(jobs, k)
			byJob[k] = nil
			names[k] = throughput.JobType(r.ModelName, r.BatchSize)
			feats[k] = r.Features()
		}
		if r.Throughput > 0 {
			byJob[k] = append(byJob[k], entry{GPU: r.GPUType, GPUs: r.GPUs, Throughput: r.Throughput})
		}
	}
	sort.Strings(jobs)
	jobNames := make([]string, len(jobs))
	for i, k := range jobs {
		jobNames[i] = names[k]
	}
	if len(jobs) < 4 {
		return nil, fmt.Errorf("eval: %d job types with measurements, need at least 4", len(jobs))
	}
	rep := &EvalReport{JobTypes: len(jobs), GPUTypes: t.GPUTypes(), Entries: len(recs), MAE: map[string]float64{},
		MAENewJob: map[string]float64{}, MAEPartly: map[string]float64{}, MAEEntry: map[string]float64{}, Selected: map[string]int{},
		Noise: opts.Noise, MaxRuns: opts.MaxRuns, Seed: opts.Seed}

	type foldOut struct {
		arch string
		// newJob[model] holds protocol (a) errors; partly[k] protocol (b) errors after k runs.
		newJob map[string][]float64
		partly [][]float64
		ratio  []float64
		// entry0 and entry hold protocol (b') errors before and after MaxRuns runs.
		entry0, entry []float64
		// compA, compB and compE are the per-estimator errors of (a), (b) and (b').
		compA, compB, compE compErrs
		roof                []predict.RooflineValidation
		err                 error
	}
	outs := make([]foldOut, len(jobs))
	parallel.For(len(jobs), opts.Workers, func(fi int) {
		if ctx.Err() != nil {
			outs[fi].err = ctx.Err()
			return
		}
		held := jobs[fi]
		var train []predict.Record
		for _, r := range recs {
			if predict.WorkloadKey(r.ModelName, r.BatchSize) != held {
				train = append(train, r)
			}
		}
		to := opts.Train
		to.Seed, to.KeepAll, to.Workers = opts.Seed, true, 1
		to = to.WithDefaults()
		m, err := predict.Train(train, to)
		if err != nil {
			outs[fi].err = fmt.Errorf("fold %s: %w", held, err)
			return
		}
		o := &outs[fi]
		o.arch = m.Arch
		o.newJob = map[string][]float64{}
		o.partly = make([][]float64, opts.MaxRuns+1)
		var hf predict.Features
		for _, r := range recs {
			if predict.WorkloadKey(r.ModelName, r.BatchSize) == held {
				hf = r.Features()
				break
			}
		}
		h := predict.NewHeldOut(m, train, hf, to.MinSamples)
		o.compA, o.compB, o.compE = compErrs{}, compErrs{}, compErrs{}
		p0, err := h.NewPredictor()
		if err != nil {
			o.err = err
			return
		}
		o.roof = p0.RooflineValidation()
		for _, e := range byJob[held] {
			o.compA.add(p0.PredictComponents(hf, e.GPU, e.GPUs), e.Throughput)
		}
		for _, e := range byJob[held] {
			perArch, p1, base, ok := h.NewJob(e.GPU, e.GPUs)
			if !ok {
				continue
			}
			for a, v := range perArch {
				o.newJob[a] = append(o.newJob[a], relErr(v, e.Throughput))
			}
			o.newJob["p1"] = append(o.newJob["p1"], relErr(p1, e.Throughput))
			o.newJob["knn"] = append(o.newJob["knn"], relErr(base, e.Throughput))
		}

		// Protocol (b): hold out each GPU type of the job in turn.
		gpus := map[string]bool{}
		for _, e := range byJob[held] {
			gpus[e.GPU] = true
		}
		gl := make([]string, 0, len(gpus))
		for g := range gpus {
			gl = append(gl, g)
		}
		sort.Strings(gl)
		if len(gl) < 2 {
			return
		}
		for gi, g := range gl {
			var heldOut, observed []entry
			for _, e := range byJob[held] {
				if e.GPU == g {
					heldOut = append(heldOut, e)
				} else {
					observed = append(observed, e)
				}
			}
			rng := rand.New(rand.NewPCG(opts.Seed, uint64(fi)<<16|uint64(gi)))
			rng.Shuffle(len(observed), func(i, j int) { observed[i], observed[j] = observed[j], observed[i] })
			p, err := h.NewPredictor()
			if err != nil {
				o.err = err
				return
			}
			for k := 0; k <= opts.MaxRuns; k++ {
				if k > 0 {
					e := observed[(k-1)%len(observed)]
					v := e.Throughput * math.Exp(opts.Noise*rng.NormFloat64())
					rec := predict.Record{Schema: predict.RecordSchema, Source: predict.SourceObserved, ModelName: hf.Name, BatchSize: hf.BatchSize,
						GPUType: e.GPU, GPUs: e.GPUs, Throughput: v}
					if err := p.AddRecord(rec); err != nil {
						o.err = err
						return
					}
				}
				for _, e := range heldOut {
					est := p.PredictFeatures(hf, e.GPU, e.GPUs)
					o.partly[k] = append(o.partly[k], relErr(est.Throughput, e.Throughput))
					if k == opts.MaxRuns {
						cc := p.PredictComponents(hf, e.GPU, e.GPUs)
						o.compB.add(cc, e.Throughput)
						if opts.Trace != nil {
							opts.Trace(TraceEntry{Protocol: "b", Job: jobNames[fi], GPU: e.GPU, GPUs: e.GPUs, Throughput: e.Throughput, Estimates: cc})
						}
					}
				}
			}
			for _, e := range heldOut {
				if v, ok := h.RatioTransfer(observed, e.GPU, e.GPUs); ok {
					o.ratio = append(o.ratio, relErr(v, e.Throughput))
				}
			}
		}

		// Protocol (b'): hold out each entry of the job in turn.
		all := byJob[held]
		if len(all) < 2 {
			return
		}
		for ei, ho := range all {
			observed := make([]entry, 0, len(all)-1)
			for j, e := range all {
				if j != ei {
					observed = append(observed, e)
				}
			}
			rng := rand.New(rand.NewPCG(opts.Seed, 1<<40|uint64(fi)<<16|uint64(ei)))
			rng.Shuffle(len(observed), func(i, j int) { observed[i], observed[j] = observed[j], observed[i] })
			p, err := h.NewPredictor()
			if err != nil {
				o.err = err
				return
			}
			o.entry0 = append(o.entry0, relErr(p.PredictFeatures(hf, ho.GPU, ho.GPUs).Throughput, ho.Throughput))
			runs := make([]predict.Record, opts.MaxRuns)
			for k := range runs {
				e := observed[k%len(observed)]
				runs[k] = predict.Record{Schema: predict.RecordSchema, Source: predict.SourceObserved, ModelName: hf.Name, BatchSize: hf.BatchSize,
					GPUType: e.GPU, GPUs: e.GPUs, Throughput: e.Throughput * math.Exp(opts.Noise*rng.NormFloat64())}
			}
			if err := p.AddRecords(runs); err != nil {
				o.err = err
				return
			}
			o.entry = append(o.entry, relErr(p.PredictFeatures(hf, ho.GPU, ho.GPUs).Throughput, ho.Throughput))
			cc := p.PredictComponents(hf, ho.GPU, ho.GPUs)
			o.compE.add(cc, ho.Throughput)
			if opts.Trace != nil {
				opts.Trace(TraceEntry{Protocol: "b_entry", Job: jobNames[fi], GPU: ho.GPU, GPUs: ho.GPUs, Throughput: ho.Throughput, Estimates: cc})
			}
		}
	})
	newJob := map[string][]float64{}
	partly := make([][]float64, opts.MaxRuns+1)
	var ratio, entry0, entryK []float64
	rep.PerJob = map[string]JobEval{}
	compA, compB, compE := compErrs{}, compErrs{}, compErrs{}
	roof := map[int]*RooflineFolds{}
	for fi, o := range outs {
		if o.err != nil {
			return nil, fmt.Errorf("eval: %w", o.err)
		}
		for _, v := range o.roof {
			if v.Cells == 0 {
				continue
			}
			r := roof[v.Kind]
			if r == nil {
				r = &RooflineFolds{Kind: v.Kind}
				roof[v.Kind] = r
			}
			r.Folds++
			if v.Weight > 0 {
				r.Accepted++
			}
			r.MAE += v.MAE
			r.MAEMix += v.MAEMix
			r.Gain += v.Gain
			r.Weight += v.Weight
		}
		compA.merge(o.compA)
		compB.merge(o.compB)
		compE.merge(o.compE)
		je := JobEval{NewJob: mean(o.newJob["p1"])}
		if v := o.partly[opts.MaxRuns]; len(v) > 0 {
			x := mean(v)
			je.Partly = &x
		}
		rep.PerJob[jobNames[fi]] = je
		rep.Selected[o.arch]++
		for k, v := range o.newJob {
			newJob[k] = append(newJob[k], v...)
		}
		for k := range partly {
			partly[k] = append(partly[k], o.partly[k]...)
		}
		ratio = append(ratio, o.ratio...)
		entry0 = append(entry0, o.entry0...)
		entryK = append(entryK, o.entry...)
	}
	for k, v := range newJob {
		rep.MAENewJob[k] = mean(v)
		rep.MAE[k] = rep.MAENewJob[k]
	}
	rep.NewJobWithin10 = within(newJob["p1"], 0.1)
	rep.MAEAfter = make([]float64, opts.MaxRuns+1)
	rep.Within10 = make([]float64, opts.MaxRuns+1)
	for k, v := range partly {
		rep.MAEAfter[k] = mean(v)
		rep.Within10[k] = within(v, 0.1)
	}
	rep.PartlyPredictions = len(partly[opts.MaxRuns])
	if rep.PartlyPredictions > 0 {
		rep.MAEPartly["p1"] = rep.MAEAfter[0]
		rep.MAEPartly["p1p2"] = rep.MAEAfter[opts.MaxRuns]
		rep.MAE["p1p2"] = rep.MAEPartly["p1p2"]
		rep.MAEPartly["ratio"] = mean(ratio)
		rep.MAE["ratio"] = rep.MAEPartly["ratio"]
		rep.RatioWithin10 = within(ratio, 0.1)
		rep.Within10After10 = rep.Within10[min(10, opts.MaxRuns)]
	}
	if rep.EntryPredictions = len(entryK); rep.EntryPredictions > 0 {
		rep.MAEEntry["p1"] = mean(entry0)
		rep.MAEEntry["p1p2"] = mean(entryK)
		rep.MAE["p1p2_entry"] = rep.MAEEntry["p1p2"]
		rep.Within10EntryAfter0 = within(entry0, 0.1)
		rep.Within10EntryAfter10 = within(entryK, 0.1)
	}
	for k := 0; k < 2; k++ {
		if r := roof[k]; r != nil {
			n := float64(r.Folds)
			r.MAE, r.MAEMix, r.Gain, r.Weight = r.MAE/n, r.MAEMix/n, r.Gain/n, r.Weight/n
			rep.Roofline = append(rep.Roofline, *r)
		}
	}
	rep.Estimators = map[string]map[string]EstimatorEval{"a": compA.report(), "b": compB.report(), "b_entry": compE.report()}
	rep.ColocMAE, rep.ColocMAEBaseline, rep.ColocPairs = colocError(t)
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("eval: %w", err)
	}
	rep.ReferenceLimits = referenceLimits(jobs, feats, byJob, opts.Workers)
	rep.Seconds = time.Since(start).Seconds()
	return rep, nil
}

// colocError is the normalised MAE of every co-located pair's ratios predicted with the pair
// hidden, the error of always predicting the mean ratio, and the number of pairs.
func colocError(t *throughput.Table) (mae, baseline float64, pairs int) {
	pred, meas := predict.ColocLeaveOneOut(t)
	if len(meas) == 0 {
		return 0, 0, 0
	}
	logs := make([]float64, len(meas))
	for i, r := range meas {
		logs[i] = math.Log(r)
	}
	avg := math.Exp(mean(logs))
	var errs, base []float64
	for i := 0; i < len(meas); i += 2 {
		errs = append(errs, relErr(pred[i], meas[i]), relErr(pred[i+1], meas[i+1]))
		base = append(base, relErr(avg, meas[i]), relErr(avg, meas[i+1]))
	}
	return mean(errs), mean(base), len(meas) / 2
}

func relErr(pred, truth float64) float64 { return math.Abs(pred-truth) / truth }

func mean(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	var s float64
	for _, x := range v {
		s += x
	}
	return s / float64(len(v))
}

func within(v []float64, tol float64) float64 {
	if len(v) == 0 {
		return 0
	}
	n := 0
	for _, x := range v {
		if x <= tol {
			n++
		}
	}
	return float64(n) / float64(len(v))
}
