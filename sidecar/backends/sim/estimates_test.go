package sim_test

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hetgpu/hetgpu/model/cluster"
	"github.com/hetgpu/hetgpu/model/estimates"
	"github.com/hetgpu/hetgpu/model/history"
	"github.com/hetgpu/hetgpu/model/trace"
	"github.com/hetgpu/hetgpu/sidecar/backends/sim"
	"github.com/hetgpu/hetgpu/sidecar/sched"
	"github.com/hetgpu/hetgpu/sidecar/stages/estimate"
	"github.com/hetgpu/hetgpu/sidecar/stages/place"
)

// estRecorder ranks in arrival order and records the runtime estimate of every job it ranks.
type estRecorder struct {
	place.FIFO
	at  []time.Time
	key []string
	est []time.Duration
}

func (r *estRecorder) Rank(ctx context.Context, snap *cluster.Snapshot, pred sched.Predictor) ([]sched.Ranked, error) {
	for _, j := range snap.Pending {
		r.at = append(r.at, snap.Now)
		r.key = append(r.key, j.Key())
		r.est = append(r.est, j.Hetgpu.EstRuntime)
	}
	return r.FIFO.Rank(ctx, snap, pred)
}

// TestLiveEstimates: by default a job's noisy estimate is its remaining runtime times its error
// factor; with LiveEstimates it is its whole runtime times the factor read after the time it has
// run as the Nomad backend reads hetgpu.runtime (cluster.EstimateModel with EstimateError). The
// job runs 1,000 s on the reference V100 and is preempted (and restarted) at 500 s.
func TestLiveEstimates(t *testing.T) {
	jt := "ResNet-50 (batch size 32)"
	thr, _ := table(t).Measured(jt, "v100", 1)
	tr := &trace.Trace{Name: "e", Jobs: []trace.Job{{ID: "x", JobType: jt, Model: "ResNet-50", BatchSize: 32, GPUs: 1, TotalSteps: 1000 * thr}}}
	s := oneClass(t, "Tesla V100-SXM2-16GB", 1, 1)
	est := sim.Estimates{Seed: 7}
	for _, c := range []struct {
		live  bool
		sigma float64
	}{{false, 0}, {true, 0}, {true, 0.5}} {
		live := c.live
		rec := &estRecorder{}
		p := &sim.PipelinePolicy{PolicyName: "est", Estimates: est,
			Stages: sched.Stages{Ranker: rec, Placer: place.FirstFit{}, Preemptor: &preemptOnce{}, Predictor: sim.TablePredictor{Table: table(t)}}}
		if _, err := sim.Simulate(context.Background(), sim.Setup{Spec: s, Throughput: table(t), Trace: tr, EstimateReplay: sim.EstimateReplay{LiveEstimates: live, EstimateError: c.sigma}}, p, nil); err != nil {
			t.Fatal(err)
		}
		if len(rec.at) < 2 {
			t.Fatalf("live %v: %d estimates recorded, want the arrival's and the preemption round's", live, len(rec.at))
		}
		f := est.Factor(rec.key[0])
		if math.Abs(f-1) < 0.05 {
			t.Fatalf("seed gives factor %v: too close to 1 to tell the models apart", f)
		}
		t0 := rec.at[0]
		checked := 0
		for i := range rec.at {
			ran := rec.at[i].Sub(t0).Seconds()
			want := (1000 - ran) * f
			if live {
				want = cluster.EstimateModel{Sigma: c.sigma}.Remaining(time.Duration(1000*f*1e9), time.Duration(ran*1e9)).Seconds()
			}
			if live && c.sigma == 0 && math.Abs(want-math.Max(1000*f-ran, 60)) > 1e-6 {
				t.Fatalf("the trusting model gives %v, want the estimate minus the time run", want)
			}
			if got := rec.est[i].Seconds(); math.Abs(got-want) > 1 {
				t.Errorf("live %v, after %v s: estimate %v s, want %v s (factor %.3f)", live, ran, got, want, f)
			}
			if ran > 0 {
				checked++
			}
		}
		if checked == 0 {
			t.Errorf("live %v: no estimate recorded after the job started", live)
		}
	}
}

// TestCalibratedEstimates: with CalibrateEstimates the live estimates' model is learned from the
// jobs that finish, as the live sidecar learns it from finished runs. Users here ask for twice
// what their jobs take (EstimateSkew 2); 40 jobs run one after another on one GPU in arrival
// order. The run's learned model is the calibrator's own answer for the finished jobs'
// (estimate, true runtime) pairs in finish order, and a job waiting at the end is read with it:
// shorter than its estimate, where the prior reads it as longer.
func TestCalibratedEstimates(t *testing.T) {
	tr, refS := queueTrace(t, "cal", 40)
	s := oneClass(t, "Tesla V100-SXM2-16GB", 1, 1)
	est := sim.Estimates{Seed: 3}
	rec := &estRecorder{}
	p := &sim.PipelinePolicy{PolicyName: "est", Estimates: est,
		Stages: sched.Stages{Ranker: rec, Placer: place.FirstFit{}, Predictor: sim.TablePredictor{Table: table(t)}}}
	replay := sim.EstimateReplay{LiveEstimates: true, EstimateError: 0.5, CalibrateEstimates: true, EstimateSkew: 2}
	res, err := sim.Simulate(context.Background(), sim.Setup{Spec: s, Throughput: table(t), Trace: tr, EstimateReplay: replay}, p, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.EstimateModel == nil || res.EstimateModel.Runs < 30 {
		t.Fatalf("learned model %+v, want one learned from most of the 40 jobs", res.EstimateModel)
	}
	idOf := func(key string) string { return strings.Split(key, "/")[1] }
	keyOf := map[string]string{}
	for _, k := range rec.key {
		keyOf[idOf(k)] = k
	}
	jobs := slices.Clone(res.JobResults)
	slices.SortStableFunc(jobs, func(a, b sim.JobResult) int { return int(a.FinishS - b.FinishS) })
	want, err := estimates.New(estimates.Config{Prior: cluster.EstimateModel{Sigma: 0.5}})
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs[:res.EstimateModel.Runs] {
		want.Observe(time.Duration(refS[j.ID]*2*est.Factor(keyOf[j.ID])*1e9), time.Duration(refS[j.ID]*1e9))
	}
	w := want.Model()
	if got := res.EstimateModel; math.Abs(got.Bias-w.Bias) > 1e-9 || math.Abs(got.Sigma-w.Sigma) > 1e-9 {
		t.Errorf("learned bias %.4f sigma %.4f, want %.4f and %.4f", got.Bias, got.Sigma, w.Bias, w.Sigma)
	}
	t.Logf("learned %+v", *res.EstimateModel)
	if !(w.Bias < -0.4) {
		t.Errorf("bias %.3f after %d runs of users asking for twice the time: want well below 0", w.Bias, res.EstimateModel.Runs)
	}
	// The last job waits to the end: first read with the prior, at last with the learned model.
	last := len(rec.key) - 1
	user := refS[idOf(rec.key[last])] * 2 * est.Factor(rec.key[last])
	if first := rec.est[slices.Index(rec.key, rec.key[last])].Seconds() / user; math.Abs(first-math.Exp(0.125)) > 1e-3 {
		t.Errorf("at arrival the estimate reads %.3f x the user's, want the prior's mean exp(0.5²/2)", first)
	}
	if end := rec.est[last].Seconds() / user; !(end < 0.8) {
		t.Errorf("after the others finished the estimate reads %.3f x the user's, want it shortened by the learned bias", end)
	}
}

// queueTrace is n one-GPU jobs arriving at once, of 600 to 1,900 s on the reference V100, in
// the namespaces given in turn (the default one when none); refS is each job's runtime by ID.
func queueTrace(t *testing.T, name string, n int, namespaces ...string) (tr *trace.Trace, refS map[string]float64) {
	jt := "ResNet-50 (batch size 32)"
	thr, _ := table(t).Measured(jt, "v100", 1)
	tr, refS = &trace.Trace{Name: name}, map[string]float64{}
	for i := range n {
		id := fmt.Sprintf("j%02d", i)
		refS[id] = float64(600 + 97*i%1300)
		j := trace.Job{ID: id, JobType: jt, Model: "ResNet-50", BatchSize: 32, GPUs: 1, TotalSteps: refS[id] * thr}
		if len(namespaces) > 0 {
			j.Namespace = namespaces[i%len(namespaces)]
		}
		tr.Jobs = append(tr.Jobs, j)
	}
	return tr, refS
}

// TestEstimateReplayValidate: a run refuses replay settings that mean nothing.
func TestEstimateReplayValidate(t *testing.T) {
	for _, c := range []struct {
		r    sim.EstimateReplay
		want string
	}{
		{sim.EstimateReplay{CalibrateEstimates: true}, "need live estimates"},
		{sim.EstimateReplay{LiveEstimates: true, EstimateError: 4}, "estimate error = 4"},
		{sim.EstimateReplay{EstimateSkew: 30}, "estimate skew = 30"},
		{sim.EstimateReplay{EstimateSkew: -1}, "estimate skew = -1"},
		{sim.EstimateReplay{EstimateSkewSpread: 5}, "estimate skew spread = 5"},
		{sim.EstimateReplay{PartialEstimates: 1}, "partial estimates = 1"},
		{sim.EstimateReplay{PartialEstimates: -0.2}, "partial estimates = -0.2"},
		{sim.EstimateReplay{NoEstimates: true, PartialEstimates: 0.5}, "no estimates and partial estimates (0.5) together"},
	} {
		_, err := sim.New(sim.Config{Spec: oneClass(t, "Tesla V100-SXM2-16GB", 1, 1), Throughput: table(t), EstimateReplay: c.r})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error naming %q", c.r, err, c.want)
		}
	}
}

// TestEstimateSkewSpread: with EstimateSkewSpread each namespace's users have a habit of their
// own, the same for all their jobs; with calibration each namespace's model learns its habit.
func TestEstimateSkewSpread(t *testing.T) {
	tr, refS := queueTrace(t, "teams", 60, "team-a", "team-b")
	s := oneClass(t, "Tesla V100-SXM2-16GB", 1, 1)
	est := sim.Estimates{Seed: 11}
	habits := map[float64]map[string]float64{}
	for _, spread := range []float64{0, 1} {
		rec := &estRecorder{}
		p := &sim.PipelinePolicy{PolicyName: "est", Estimates: est,
			Stages: sched.Stages{Ranker: rec, Placer: place.FirstFit{}, Predictor: sim.TablePredictor{Table: table(t)}}}
		// EstimateError 0 and no calibration: a job's estimate at arrival is the user's.
		replay := sim.EstimateReplay{LiveEstimates: true, EstimateSkew: 2, EstimateSkewSpread: spread}
		if _, err := sim.Simulate(context.Background(), sim.Setup{Spec: s, Throughput: table(t), Trace: tr, EstimateReplay: replay}, p, nil); err != nil {
			t.Fatal(err)
		}
		habits[spread] = map[string]float64{}
		for i, key := range rec.key {
			parts := strings.Split(key, "/")
			ns, id := parts[0], parts[1]
			if _, seen := habits[spread][ns+"/"+id]; seen {
				continue
			}
			habits[spread][ns+"/"+id] = 1
			h := rec.est[i].Seconds() / (refS[id] * est.Factor(key))
			if prev, ok := habits[spread][ns]; ok && math.Abs(prev-h) > 1e-6*h {
				t.Fatalf("spread %v: namespace %s has habits %v and %v", spread, ns, prev, h)
			}
			habits[spread][ns] = h
		}
	}
	if a, b := habits[0]["team-a"], habits[0]["team-b"]; math.Abs(a-2) > 1e-6 || math.Abs(b-2) > 1e-6 {
		t.Errorf("without a spread both teams ask for twice the time: %v and %v", a, b)
	}
	a, b := habits[1]["team-a"], habits[1]["team-b"]
	if math.Abs(math.Log(a/b)) < 0.2 {
		t.Fatalf("with a spread of 1 the teams' habits %v and %v hardly differ (pick another seed)", a, b)
	}
	// Calibrated, each namespace's model learns its own habit: bias about -log(habit).
	p := &sim.PipelinePolicy{PolicyName: "est", Estimates: est,
		Stages: sched.Stages{Ranker: &estRecorder{}, Placer: place.FirstFit{}, Predictor: sim.TablePredictor{Table: table(t)}}}
	replay := sim.EstimateReplay{LiveEstimates: true, EstimateError: 0.5, CalibrateEstimates: true, EstimateSkew: 2, EstimateSkewSpread: 1}
	res, err := sim.Simulate(context.Background(), sim.Setup{Spec: s, Throughput: table(t), Trace: tr, EstimateReplay: replay}, p, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.EstimateModel == nil || len(res.EstimateModel.Namespaces) != 2 {
		t.Fatalf("learned %+v, want a model per team", res.EstimateModel)
	}
	for _, n := range res.EstimateModel.Namespaces {
		// About 30 runs each (noise sigma 0.5) against the cluster's model (both habits mixed)
		// weighted as 20 runs.
		own, all := -math.Log(habits[1][n.Namespace]), res.EstimateModel.Bias
		want := (20*all + float64(n.Runs)*own) / (20 + float64(n.Runs))
		if math.Abs(n.Bias-want) > 0.25 || n.Runs < 25 {
			t.Errorf("namespace %s: bias %.3f from %d runs, want near %.3f (own habit %.3f, cluster %.3f)", n.Namespace, n.Bias, n.Runs, want, own, all)
		}
	}
	if d := res.EstimateModel.Namespaces[0].Bias - res.EstimateModel.Namespaces[1].Bias; math.Signbit(d) != math.Signbit(math.Log(b/a)) {
		t.Errorf("the teams' learned biases are ordered against their habits %v and %v: %+v", a, b, res.EstimateModel.Namespaces)
	}
}

// sourceRecorder ranks in arrival order and records, per job key, the estimate source and
// declared steps of the last round it ranked the job in, and every estimate it saw.
type sourceRecorder struct {
	place.FIFO
	src   map[string]cluster.EstimateSource
	steps map[string]float64
	ests  map[string][]time.Duration
}

func (r *sourceRecorder) Rank(ctx context.Context, snap *cluster.Snapshot, pred sched.Predictor) ([]sched.Ranked, error) {
	if r.src == nil {
		r.src, r.steps, r.ests = map[string]cluster.EstimateSource{}, map[string]float64{}, map[string][]time.Duration{}
	}
	for _, j := range snap.Pending {
		r.src[j.Key()] = j.Hetgpu.Est.Source
		r.steps[j.Key()] = j.Hetgpu.Steps
		r.ests[j.Key()] = append(r.ests[j.Key()], j.Hetgpu.EstRuntime)
	}
	return r.FIFO.Rank(ctx, snap, pred)
}

// TestEstimateRegimes: what users tell (EstimateReplay) reaches the pipeline's estimates step
// the same way for every policy: none hides every estimate, partial:F a seeded share of the
// namespaces' (of jobs, with one namespace), and DeclareSteps gives every job its work. The
// history learns from the jobs that finish, so later jobs without an estimate are read from it.
func TestEstimateRegimes(t *testing.T) {
	s := oneClass(t, "Tesla V100-SXM2-16GB", 1, 1)
	run := func(tr *trace.Trace, replay sim.EstimateReplay) *sourceRecorder {
		t.Helper()
		h, err := history.New(history.Config{})
		if err != nil {
			t.Fatal(err)
		}
		rec := &sourceRecorder{}
		p := &sim.PipelinePolicy{PolicyName: "est", Estimates: sim.Estimates{Seed: 3},
			Stages: sched.Stages{Ranker: rec, Placer: place.FirstFit{}, Predictor: sim.TablePredictor{Table: table(t)}, Estimator: estimate.New(h)}}
		if _, err := sim.Simulate(context.Background(), sim.Setup{Spec: s, Throughput: table(t), Trace: tr, EstimateReplay: replay}, p, nil); err != nil {
			t.Fatal(err)
		}
		return rec
	}
	count := func(rec *sourceRecorder) map[cluster.EstimateSource]int {
		n := map[cluster.EstimateSource]int{}
		for _, src := range rec.src {
			n[src]++
		}
		return n
	}
	teams, _ := queueTrace(t, "teams", 80, "a", "b", "c", "d", "e", "f", "g", "h")
	one, _ := queueTrace(t, "one", 80)

	if n := count(run(teams, sim.EstimateReplay{})); n[cluster.EstUser] != 80 {
		t.Fatalf("with estimates: sources %v, want every job the user's", n)
	}
	none := run(teams, sim.EstimateReplay{NoEstimates: true})
	if n := count(none); n[cluster.EstHistory] != 80 {
		t.Fatalf("none: sources %v, want every job read from the history", n)
	}
	// The queue drains one job at a time: the last jobs' estimates rest on the first ones' runs,
	// about 600 to 1,900 s, not on the one-hour prior.
	last := none.ests["h/j79/"+sim.JobGroup]
	if got := last[len(last)-1]; got > 40*time.Minute {
		t.Fatalf("none: the last job is read as %v, want what the finished jobs took rather than the prior", got)
	}
	for _, c := range []struct {
		tr   *trace.Trace
		per  string
		want func(key string) string
	}{
		{teams, "namespace", func(k string) string { return strings.Split(k, "/")[0] }},
		{one, "job", func(k string) string { return k }},
	} {
		rec := run(c.tr, sim.EstimateReplay{PartialEstimates: 0.5})
		again := run(c.tr, sim.EstimateReplay{PartialEstimates: 0.5})
		told := map[string]bool{}
		for key, src := range rec.src {
			if again.src[key] != src {
				t.Fatalf("partial per %s: job %s is %v in one run and %v in another", c.per, key, src, again.src[key])
			}
			g := c.want(key)
			if prev, ok := told[g]; ok && prev != (src == cluster.EstUser) {
				t.Fatalf("partial per %s: %s both tells and does not", c.per, g)
			}
			told[g] = src == cluster.EstUser
		}
		n := 0
		for _, v := range told {
			if v {
				n++
			}
		}
		if n == 0 || n == len(told) {
			t.Fatalf("partial per %s: %d of %d tell their runtime, want some but not all", c.per, n, len(told))
		}
	}
	steps := run(teams, sim.EstimateReplay{NoEstimates: true, DeclareSteps: true})
	if n := count(steps); n[cluster.EstSteps] != 80 {
		t.Fatalf("steps: sources %v, want every job read from its steps", n)
	}
	for key, v := range steps.steps {
		if !(v > 0) {
			t.Fatalf("steps: job %s declares %v steps", key, v)
		}
	}
}
