package policies

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/hetgpu/hetgpu/model/history"
	"github.com/hetgpu/hetgpu/model/throughput"
	"github.com/hetgpu/hetgpu/model/throughput/throughputtest"
	"github.com/hetgpu/hetgpu/model/trace"
	"github.com/hetgpu/hetgpu/sidecar/backends/sim"
	"github.com/hetgpu/hetgpu/sidecar/backends/sim/simtest"
	"github.com/hetgpu/hetgpu/sidecar/sched"
	"github.com/hetgpu/hetgpu/sidecar/stages/place"
	"github.com/hetgpu/hetgpu/sidecar/stages/rank"
)

func TestParseList(t *testing.T) {
	got, err := ParseList("sjf, fifo,sjf")
	if err != nil || strings.Join(got, ",") != "sjf,fifo" {
		t.Fatalf("ParseList: %v %v", got, err)
	}
	all, err := ParseList("all")
	explicit := HetgpuHeuristic + "," + HetgpuOracle + "," + HetgpuHindsight
	if err != nil || strings.Join(all, ",")+","+explicit != strings.Join(Names(), ",") {
		t.Fatalf("all: %v %v; want every name but the explicit %s", all, err, explicit)
	}
	both, err := ParseList("all," + explicit)
	if err != nil || strings.Join(both, ",") != strings.Join(Names(), ",") {
		t.Fatalf("all,%s: %v %v", explicit, both, err)
	}
	for _, bad := range []string{"", "fifo,nope"} {
		if _, err := ParseList(bad); err == nil || !strings.Contains(err.Error(), "known: ") {
			t.Fatalf("ParseList(%q) error %v should list known policies", bad, err)
		}
	}
	for _, e := range Entries() {
		if e.Summary == "" || e.New == nil {
			t.Fatalf("policy %s lacks a summary or constructor", e.Name)
		}
	}
}

func simulate(t *testing.T, s *sim.Spec, jobs []trace.Job, p *sim.PipelinePolicy) *sim.Result {
	t.Helper()
	r, err := sim.Simulate(context.Background(), sim.Setup{Spec: s, Throughput: throughputtest.Bundled(t), Trace: &trace.Trace{Name: "t", Jobs: jobs}}, p, nil)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func job(id, jt string, gpus int, arrival, seconds float64, onV100 *throughput.Table) trace.Job {
	thr, _, _ := onV100.Throughput(jt, "v100", gpus)
	m, b, _ := trace.SplitJobType(jt)
	return trace.Job{ID: id, JobType: jt, Model: m, BatchSize: b, GPUs: gpus, ArrivalS: arrival, TotalSteps: seconds * thr}
}

// vkSpec is one V100 node and one K80 node, one GPU each.
func vkSpec(t *testing.T) *sim.Spec {
	t.Helper()
	s, err := sim.ParseSpec([]byte(`name = "vk"
node_class "v" {
  gpu = "Tesla V100-SXM2-16GB"
  gpus_per_node = 1
  count = 1
}
node_class "k" {
  gpu = "Tesla K80"
  gpus_per_node = 1
  count = 1
}
`), "vk.hcl")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func v100s(t *testing.T, perNode, nodes int) *sim.Spec {
	s, err := sim.ParseSpec([]byte(`name = "v"
node_class "v" {
  gpu = "Tesla V100-SXM2-16GB"
  gpus_per_node = `+strconv.Itoa(perNode)+`
  count = `+strconv.Itoa(nodes)+`
}
`), "v.hcl")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// SJF runs the short job first when both wait; FIFO runs them in arrival order.
func TestSJFvsFIFO(t *testing.T) {
	tb := throughputtest.Bundled(t)
	jt := "ResNet-50 (batch size 32)"
	jobs := []trace.Job{job("blocker", jt, 1, 0, 100, tb), job("long", jt, 1, 1, 1000, tb), job("short", jt, 1, 2, 10, tb)}
	s := v100s(t, 1, 1)
	start := func(r *sim.Result) map[string]float64 {
		m := map[string]float64{}
		for _, j := range r.JobResults {
			m[j.ID] = j.StartS
		}
		return m
	}
	f, _ := New("fifo", Options{})
	sj, _ := New("sjf", Options{})
	fs, ss := start(simulate(t, s, jobs, f)), start(simulate(t, s, jobs, sj))
	if !(fs["long"] < fs["short"]) || !(ss["short"] < ss["long"]) {
		t.Fatalf("fifo starts %v, sjf starts %v", fs, ss)
	}
}

// Tiresias preempts a job that has used more than the first queue's threshold for a newcomer.
func TestTiresiasPreemptsForNewcomer(t *testing.T) {
	tb := throughputtest.Bundled(t)
	jt := "ResNet-50 (batch size 32)"
	jobs := []trace.Job{job("old", jt, 1, 0, 4*3600, tb), job("new", jt, 1, 2*3600, 600, tb)}
	p, _ := New("tiresias", Options{})
	r := simulate(t, v100s(t, 1, 1), jobs, p)
	fin := map[string]float64{}
	for _, j := range r.JobResults {
		fin[j.ID] = j.FinishS
	}
	if r.Preemptions == 0 || math.Abs(fin["new"]-(2*3600+600)) > 1e-6 {
		t.Fatalf("preemptions %d, new finished at %v, want %v", r.Preemptions, fin["new"], 2*3600+600)
	}
}

// Gavel puts the job that gains most from a V100 on it: with one V100 and one K80, the job with
// the larger V100/K80 speed-up gets the V100 more of the time.
func TestGavelHeterogeneityAware(t *testing.T) {
	tb := throughputtest.Bundled(t)
	s := vkSpec(t)
	ratio := func(jt string) float64 {
		v, _ := tb.Measured(jt, "v100", 1)
		k, _ := tb.Measured(jt, "k80", 1)
		return v / k
	}
	big, small := "ResNet-50 (batch size 64)", "A3C"
	if ratio(big) <= ratio(small) {
		t.Fatalf("fixture assumption: %s speeds up %.2fx, %s %.2fx", big, ratio(big), small, ratio(small))
	}
	jobs := []trace.Job{job("a", small, 1, 0, 20*3600, tb), job("b", big, 1, 0, 20*3600, tb)}
	p, _ := New("gavel", Options{})
	e, err := sim.New(sim.Config{Spec: s, Throughput: tb})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Submit(jobs...); err != nil {
		t.Fatal(err)
	}
	if err := e.Run(context.Background(), p, nil); err != nil {
		t.Fatal(err)
	}
	r := e.Result("gavel")
	if r.Jobs != 2 {
		t.Fatalf("%d jobs finished", r.Jobs)
	}
	// Compare with FIFO, which is heterogeneity-unaware: Gavel's makespan must not be worse.
	f, _ := New("fifo", Options{})
	rf := simulate(t, s, jobs, f)
	if r.MakespanS > rf.MakespanS*1.001 {
		t.Fatalf("gavel makespan %.0f s worse than fifo %.0f s", r.MakespanS, rf.MakespanS)
	}
}

// contended is a quarter of modern-mix and a synthetic trace of 40 jobs that keeps it busy.
func contended(t *testing.T) (*sim.Spec, *trace.Trace) {
	t.Helper()
	return simtest.Spec(t, "modern-mix:scale=0.25"), simtest.Trace(t, "synthetic:jobs=40,rate=6", 2)
}

// The production-pipeline baselines run through sched.Pipeline on the engine and finish a
// small contended trace, never violating capacity.
func TestPipelinePoliciesFinish(t *testing.T) {
	s, tr := contended(t)
	for _, name := range []string{"rltune", "gogh"} {
		t.Run(name, func(t *testing.T) {
			p, err := New(name, Options{Spec: s, Throughput: throughputtest.Bundled(t)})
			if err != nil {
				t.Fatal(err)
			}
			pp := p
			decisions := 0
			pp.OnRound = func(r *sched.Round) {
				decisions += len(r.Decisions)
				for _, pin := range r.Pins {
					if pin.Err != nil {
						t.Errorf("pin %s: %v", pin.JobKey, pin.Err)
					}
				}
			}
			r := simulate(t, s, tr.Jobs, p)
			if r.Jobs+r.Unschedulable != len(tr.Jobs) || r.Unfinished != 0 {
				t.Fatalf("finished %d, unschedulable %d, unfinished %d of %d", r.Jobs, r.Unschedulable, r.Unfinished, len(tr.Jobs))
			}
			if decisions < r.Jobs {
				t.Fatalf("%d decisions for %d jobs", decisions, r.Jobs)
			}
		})
	}
}

// hetgpu-heuristic is the hetgpu pipeline with the fallback order: it runs under its own name,
// and where a learned order differs from the heuristic's so does the schedule. (The bundled
// policy may order exactly as the heuristic, a residual policy with a zero correction, so the
// learned order here is a random policy's.)
func TestHetgpuHeuristicDiffers(t *testing.T) {
	s, tr := contended(t)
	starts := map[string]map[string]float64{}
	for _, name := range []string{"hetgpu", HetgpuHeuristic} {
		o := Options{Spec: s, Throughput: throughputtest.Bundled(t), Seed: 2}
		p, err := New(name, o)
		if name == "hetgpu" {
			pol, perr := rank.NewPolicy(rank.DefaultSchema(), []int{8}, rand.New(rand.NewPCG(3, 4)))
			if perr != nil {
				t.Fatal(perr)
			}
			pol.Actor.Init(rand.New(rand.NewPCG(5, 6)), 1)
			r, rerr := rank.New(pol, rank.WithExplain(false))
			if rerr != nil {
				t.Fatal(rerr)
			}
			p, err = HetgpuPipeline(o, r)
		}
		if err != nil {
			t.Fatal(err)
		}
		if p.Name() != name {
			t.Fatalf("policy %s runs as %q", name, p.Name())
		}
		r := simulate(t, s, tr.Jobs, p)
		if r.Jobs+r.Unschedulable != len(tr.Jobs) || r.Unfinished != 0 {
			t.Fatalf("%s: finished %d, unschedulable %d, unfinished %d of %d", name, r.Jobs, r.Unschedulable, r.Unfinished, len(tr.Jobs))
		}
		starts[name] = map[string]float64{}
		for _, j := range r.JobResults {
			starts[name][j.ID] = j.StartS
		}
	}
	// Both finish the same jobs; a job missing from one run is an error, not a difference.
	if len(starts["hetgpu"]) == 0 || len(starts["hetgpu"]) != len(starts[HetgpuHeuristic]) {
		t.Fatalf("hetgpu finished %d jobs, %s %d; want the same non-zero count", len(starts["hetgpu"]), HetgpuHeuristic, len(starts[HetgpuHeuristic]))
	}
	differ := 0
	for id, st := range starts["hetgpu"] {
		other, ok := starts[HetgpuHeuristic][id]
		if !ok {
			t.Fatalf("job %s finished under hetgpu but not under %s", id, HetgpuHeuristic)
		}
		if other != st {
			differ++
		}
	}
	if differ == 0 {
		t.Fatalf("hetgpu and %s started all %d jobs at the same times; the orders should differ on this trace", HetgpuHeuristic, len(starts["hetgpu"]))
	}
	t.Logf("%d of %d jobs started at different times", differ, len(starts["hetgpu"]))
}

// hetgpu-oracle is hetgpu-heuristic with exact runtimes: the same stages, the simulator shows
// it no estimate error, and on a contended trace the better estimates change the schedule.
func TestHetgpuOracleSeesExactRuntimes(t *testing.T) {
	s, _ := contended(t)
	// Five times the arrival rate of contended(): a queue on which the order matters, so that
	// the test does not rest on one job's start (it did, and a predictor change evened it).
	tr := simtest.Trace(t, "synthetic:jobs=40,rate=30", 2)
	o := Options{Spec: s, Throughput: throughputtest.Bundled(t), Seed: 2}
	oracle, err := Build(HetgpuOracle, o)
	if err != nil {
		t.Fatal(err)
	}
	heur, err := Build(HetgpuHeuristic, o)
	if err != nil {
		t.Fatal(err)
	}
	if oracle.Estimates.Off || oracle.Estimates.Factor("ns/any") != 1 {
		t.Fatalf("oracle estimates %+v: want exact (factor 1)", oracle.Estimates)
	}
	if heur.Estimates.Factor("ns/any") == 1 {
		t.Fatalf("heuristic estimates %+v: want the user error", heur.Estimates)
	}
	if fmt.Sprintf("%T %T", oracle.Stages.Ranker, oracle.Stages.Placer) != fmt.Sprintf("%T %T", heur.Stages.Ranker, heur.Stages.Placer) {
		t.Fatalf("oracle stages %T %T differ from the heuristic's %T %T", oracle.Stages.Ranker, oracle.Stages.Placer, heur.Stages.Ranker, heur.Stages.Placer)
	}
	ro, rh := simulate(t, s, tr.Jobs, oracle.Sim()), simulate(t, s, tr.Jobs, heur.Sim())
	if ro.Jobs != rh.Jobs || ro.Jobs == 0 {
		t.Fatalf("oracle finished %d jobs, heuristic %d", ro.Jobs, rh.Jobs)
	}
	differ := 0
	start := map[string]float64{}
	for _, j := range rh.JobResults {
		start[j.ID] = j.StartS
	}
	for _, j := range ro.JobResults {
		if start[j.ID] != j.StartS {
			differ++
		}
	}
	if differ == 0 {
		t.Fatalf("exact and noisy estimates started all %d jobs at the same times", ro.Jobs)
	}
	t.Logf("avg JCT oracle %.0f s, heuristic %.0f s; %d jobs started at other times", ro.AvgJCTS, rh.AvgJCTS, differ)
}

// hetgpu-hindsight's history holds every job's runtime before the first round, so without any
// estimate it runs a group of short jobs ahead of a group of long ones that queued first;
// hetgpu-heuristic, whose history starts empty, reads both groups alike at first.
func TestHetgpuHindsightKnowsGroupsFromTheStart(t *testing.T) {
	tb := throughputtest.Bundled(t)
	// A blocker of a third kind holds the one GPU while both groups queue behind it.
	jobs := []trace.Job{job("blocker", "ResNet-50 (batch size 64)", 1, 0, 3600, tb)}
	for i := range 4 {
		jobs = append(jobs, job(fmt.Sprintf("long-%d", i), "ResNet-50 (batch size 32)", 1, float64(1+i), 10*3600, tb))
	}
	for i := range 4 {
		jobs = append(jobs, job(fmt.Sprintf("short-%d", i), "ResNet-18 (batch size 64)", 1, float64(5+i), 600, tb))
	}
	s := v100s(t, 1, 1)
	run := func(name string) (*sim.Result, history.Stats) {
		hist, err := history.New(history.Config{})
		if err != nil {
			t.Fatal(err)
		}
		p, err := Build(name, Options{Spec: s, Throughput: tb, Seed: 1, History: hist})
		if err != nil {
			t.Fatal(err)
		}
		r, err := sim.Simulate(context.Background(), sim.Setup{Spec: s, Throughput: tb, Trace: &trace.Trace{Name: "t", Jobs: jobs},
			EstimateReplay: sim.EstimateReplay{NoEstimates: true}}, p.Sim(), nil)
		if err != nil {
			t.Fatal(err)
		}
		return r, hist.Stats()
	}
	hind, hs := run(HetgpuHindsight)
	heur, _ := run(HetgpuHeuristic)
	if hind.Jobs != len(jobs) || heur.Jobs != len(jobs) {
		t.Fatalf("finished %d (hindsight) and %d (heuristic) of %d jobs", hind.Jobs, heur.Jobs, len(jobs))
	}
	// Primed with all eight, each finished run then skipped as already known (the last one
	// finishes after the last round).
	if hs.Runs != len(jobs) || hs.Observed <= len(jobs) || hs.Skipped != hs.Observed-len(jobs) {
		t.Fatalf("hindsight history %+v: want %d runs, each finished one skipped", hs, len(jobs))
	}
	lastShort, firstLong := 0.0, math.Inf(1)
	for _, j := range hind.JobResults {
		switch {
		case strings.HasPrefix(j.ID, "short"):
			lastShort = math.Max(lastShort, j.ArrivalS+j.JCTS)
		case strings.HasPrefix(j.ID, "long"):
			firstLong = math.Min(firstLong, j.ArrivalS+j.JCTS)
		}
	}
	if !(lastShort < firstLong) {
		t.Fatalf("hindsight: last short job done at %.0f s, first long one at %.0f s; want every short one first", lastShort, firstLong)
	}
	if !(hind.AvgJCTS < heur.AvgJCTS) {
		t.Fatalf("avg JCT hindsight %.0f s, heuristic %.0f s: want hindsight shorter", hind.AvgJCTS, heur.AvgJCTS)
	}
	t.Logf("avg JCT hindsight %.0f s, heuristic %.0f s", hind.AvgJCTS, heur.AvgJCTS)
}

// hetgpu preempts a long job for a short newcomer (its ranker puts the smaller remaining work
// first), and the long job resumes where it stopped; with a job that runs far faster on the
// V100, a job started on the K80 while the V100 was busy moves there when it frees up.
func TestHetgpuPreempts(t *testing.T) {
	tb := throughputtest.Bundled(t)
	jt := "ResNet-50 (batch size 32)"
	heuristic, err := rank.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	p, err := HetgpuPipeline(Options{}, heuristic)
	if err != nil {
		t.Fatal(err)
	}
	// Exact estimates: the test is about the mechanism, not the estimate noise.
	p.Estimates = sim.Estimates{Sigma: -1}
	jobs := []trace.Job{job("old", jt, 1, 0, 8*3600, tb), job("new", jt, 1, 2*3600, 600, tb)}
	r := simulate(t, v100s(t, 1, 1), jobs, p)
	fin := map[string]float64{}
	for _, j := range r.JobResults {
		fin[j.ID] = j.FinishS
	}
	if r.Preemptions != 1 || math.Abs(fin["new"]-(2*3600+600)) > 1 || math.Abs(fin["old"]-(8*3600+600)) > 1 {
		t.Fatalf("preemptions %d, finish times %v; want 1, new at %v, old at %v", r.Preemptions, fin, 2*3600+600, 8*3600+600)
	}

	// Without the preemption stage the newcomer waits for the old job.
	p2, _ := HetgpuPipeline(Options{}, heuristic)
	p2.Preemptor = nil
	p2.Estimates = sim.Estimates{Sigma: -1}
	r2 := simulate(t, v100s(t, 1, 1), jobs, p2)
	if r2.Preemptions != 0 {
		t.Fatalf("pipeline without a preemptor preempted %d times", r2.Preemptions)
	}

	// Migration: "late" starts on the K80 while "first" holds the V100, and moves to the V100
	// (about 6x faster for this model) when "first" completes.
	vk := vkSpec(t)
	p3, _ := HetgpuPipeline(Options{}, heuristic)
	p3.Estimates = sim.Estimates{Sigma: -1}
	r3 := simulate(t, vk, []trace.Job{job("first", jt, 1, 0, 3600, tb), job("late", jt, 1, 10, 10*3600, tb)}, p3)
	late := false
	for _, j := range r3.JobResults {
		if j.ID != "late" {
			continue
		}
		late = true
		if j.Preemptions != 1 || j.GPUType != "v100" || j.StartS > 11 {
			t.Fatalf("late job: started %v, %d preemptions, ended on %s; want a start on the K80, one move, the V100", j.StartS, j.Preemptions, j.GPUType)
		}
	}
	if !late {
		t.Fatalf("job late did not finish: %+v", r3.JobResults)
	}
}

// The live sidecar keeps the presets' production limits and never co-locates on whole GPUs
// (Nomad gives a whole GPU to one allocation); the simulator's copies are made reproducible
// and co-locate on its slots.
func TestLivePlacementConfig(t *testing.T) {
	tab, err := throughput.Bundled()
	if err != nil {
		t.Fatal(err)
	}
	o := Options{Throughput: tab, Seed: 1}
	for _, name := range []string{"hetgpu-heuristic", "rltune", "gogh"} {
		live, err := Live(name, o)
		if err != nil {
			t.Fatalf("Live(%s): %v", name, err)
		}
		simp, err := Build(name, o)
		if err != nil {
			t.Fatalf("Build(%s): %v", name, err)
		}
		type configured interface{ Config() place.Config }
		lc, ok1 := live.Placer.(configured)
		sc, ok2 := simp.Stages.Placer.(configured)
		if !ok1 || !ok2 {
			t.Fatalf("%s: placer %T has no Config", name, live.Placer)
		}
		if lc.Config().PairIdleGPUs {
			t.Errorf("%s live: PairIdleGPUs on; Nomad cannot place two allocations on one whole GPU", name)
		}
		if lc.Config().RoundDeadline == 0 && lc.Config().PolishLimit == 0 {
			t.Errorf("%s live: no round deadline and no polish limit; a live round must end in time", name)
		}
		if got := sc.Config(); got.RoundDeadline != 0 || got.PolishLimit != 0 || got.Parallelism != 1 {
			t.Errorf("%s sim: deadline %v, polish %v, parallelism %d; want a reproducible solve", name, got.RoundDeadline, got.PolishLimit, got.Parallelism)
		}
	}
	if st, _ := Build("hetgpu-heuristic", o); !st.Stages.Placer.(interface{ Config() place.Config }).Config().PairIdleGPUs {
		t.Error("hetgpu-heuristic sim: PairIdleGPUs off; the simulator co-locates on its slots")
	}
}

// Every step of a simulated round (queues, preemption, placement, verification) reads a job's
// constraints from the round's state: under every registered policy each job is compiled at
// most once a round (sim.PipelinePolicy.OnCompile counts them; OnRound ends a round).
func TestSimulatedRoundsCompileOnce(t *testing.T) {
	s, tr := simtest.Spec(t, "modern-mix:scale=0.25"), simtest.Trace(t, "synthetic:jobs=16,rate=6", 2)
	for _, name := range Names() {
		t.Run(name, func(t *testing.T) {
			p, err := New(name, Options{Spec: s, Throughput: throughputtest.Bundled(t)})
			if err != nil {
				t.Fatal(err)
			}
			round, total, twice := map[string]int{}, 0, 0
			p.OnCompile = func(key string) {
				round[key]++
				total++
				if round[key] == 2 {
					twice++
					t.Errorf("job %s compiled twice in one round", key)
				}
			}
			p.OnRound = func(*sched.Round) { clear(round) }
			simulate(t, s, tr.Jobs, p)
			if total == 0 {
				t.Fatal("no job was compiled: the hook is not called")
			}
		})
	}
}
