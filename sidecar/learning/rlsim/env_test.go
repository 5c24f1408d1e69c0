package rlsim

import (
	"context"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/hetgpu/hetgpu/model/cluster"
	"github.com/hetgpu/hetgpu/model/throughput"
	"github.com/hetgpu/hetgpu/model/trace"
	"github.com/hetgpu/hetgpu/sidecar/backends/sim"
	"github.com/hetgpu/hetgpu/sidecar/learning/ppo"
	"github.com/hetgpu/hetgpu/sidecar/sched"
	"github.com/hetgpu/hetgpu/sidecar/stages/place"
	"github.com/hetgpu/hetgpu/sidecar/stages/rank"
)

// rankedFirstFit starts jobs in the ranker's order where Nomad's bin-packing would, every job
// that fits, on noisy runtime estimates (the slurm and f1 baselines' shape).
func rankedFirstFit(name string, r sched.Ranker, tab *throughput.Table) *sim.PipelinePolicy {
	return &sim.PipelinePolicy{PolicyName: name, Estimates: sim.Estimates{Seed: 1}, Stages: sched.Stages{Ranker: r,
		Predictor: sim.TablePredictor{Table: tab}, Placer: place.FirstFit{Backfill: true}}}
}

func testEnv(t testing.TB, jobs int) *Env {
	t.Helper()
	tab, err := throughput.Bundled()
	if err != nil {
		t.Fatal(err)
	}
	spec, err := sim.LoadSpec("gavel-108")
	if err != nil {
		t.Fatal(err)
	}
	tr, err := trace.Load("bundled:train-0", sim.TraceOptions(tab, 1))
	if err != nil {
		t.Fatal(err)
	}
	tr.Jobs = tr.Jobs[:min(len(tr.Jobs), 3*jobs)]
	env, err := NewEnv(EnvConfig{Spec: spec, Throughput: tab, Trace: tr, EpisodeJobs: jobs,
		Policy: func(r sched.Ranker) (*sim.PipelinePolicy, error) {
			return rankedFirstFit("learned", r, tab), nil
		},
		Baseline: func() (*sim.PipelinePolicy, error) {
			h, err := rank.New(nil)
			return rankedFirstFit("heuristic", h, tab), err
		}})
	if err != nil {
		t.Fatal(err)
	}
	return env
}

func TestEnvPlays(t *testing.T) {
	env := testEnv(t, 60)
	if env.Episodes() != 3 {
		t.Fatalf("%d episodes, want 3", env.Episodes())
	}
	tr, err := ppo.NewTrainer(ppo.Config{Seed: 1, RolloutsPerEpoch: 2, Workers: 2}, rank.DefaultSchema())
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := tr.Train(context.Background(), env, 1, []int{2}, nil); err != nil {
		t.Fatal(err)
	}
	st := tr.Curve[0]
	t.Logf("epoch: %+v in %v", st, time.Since(start))
	if st.Steps == 0 {
		t.Fatal("no decisions recorded")
	}
	if !st.Evaluated {
		t.Fatal("no evaluation")
	}
}

type collector struct {
	mu  sync.Mutex
	obs []cluster.Observation
}

func (c *collector) Observe(_ context.Context, o cluster.Observation) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.obs = append(c.obs, o)
	return nil
}

// TestOnlineTuningFromSimulatedRuns: runs measured in a simulation become the episodes of a
// guarded fine-tuning step, and the tuner swaps the ranker's policy only when adopted.
func TestOnlineTuningFromSimulatedRuns(t *testing.T) {
	env := testEnv(t, 40)
	col := &collector{}
	h, _ := rank.New(nil)
	p := rankedFirstFit("live", h, env.cfg.Throughput)
	p.Learner = col
	if _, err := sim.Simulate(context.Background(), env.setup(0), p, nil); err != nil {
		t.Fatal(err)
	}
	if len(col.obs) < 30 {
		t.Fatalf("only %d observations", len(col.obs))
	}
	tr, err := TraceFromObservations("live", col.obs, env.cfg.Throughput)
	if err != nil {
		t.Fatal(err)
	}
	if len(tr.Jobs) != len(col.obs) || tr.Jobs[0].ArrivalS != 0 {
		t.Fatalf("trace of %d jobs from %d single-run observations, first arrival %v", len(tr.Jobs), len(col.obs), tr.Jobs[0].ArrivalS)
	}
	trainer, _ := ppo.NewTrainer(ppo.Config{Seed: 2, RolloutsPerEpoch: 2, Workers: 2}, rank.DefaultSchema())
	ft, err := ppo.NewFineTuner(trainer.Checkpoint())
	if err != nil {
		t.Fatal(err)
	}
	ft.Epochs = 1
	cfg := env.cfg
	cfg.EpisodeJobs = 15
	ranker, _ := rank.New(nil)
	adopts := 0
	ot := &ppo.OnlineTuner{Ranker: ranker, Tuner: ft, Build: LiveBuilder(cfg), Every: len(col.obs),
		OnAdopt: func(c *rank.Checkpoint, _ ppo.StepResult) {
			if c != ft.Good() {
				t.Error("OnAdopt got another checkpoint than the adopted one")
			}
			adopts++
		}}
	for _, o := range col.obs[:len(col.obs)-1] {
		ot.Observe(context.Background(), o)
	}
	if ran, _, err := ot.Tune(context.Background()); ran || err != nil {
		t.Fatalf("tuned before enough observations: ran %v, err %v", ran, err)
	}
	ot.Observe(context.Background(), col.obs[len(col.obs)-1])
	ran, res, err := ot.Tune(context.Background())
	if err != nil || !ran {
		t.Fatalf("tuning step: ran %v, err %v", ran, err)
	}
	t.Logf("online step: %+v", res)
	if res.Accepted != (ranker.Policy() != nil) || res.Accepted != (adopts == 1) {
		t.Fatalf("adopted %v but ranker policy set %v, OnAdopt called %d times", res.Accepted, ranker.Policy() != nil, adopts)
	}
}

func TestKeepContended(t *testing.T) {
	env := testEnv(t, 40)
	n := env.Episodes()
	kept, err := env.KeepContended(context.Background(), 1.2, 2)
	if err != nil {
		t.Fatal(err)
	}
	if kept != env.Episodes() || kept > n {
		t.Fatalf("kept %d of %d, Episodes() %d", kept, n, env.Episodes())
	}
	for i := 0; i < kept; i++ {
		b, _ := env.Baseline(context.Background(), i)
		if b.BoundedSlowdown < 1.2 {
			t.Fatalf("episode %d kept with baseline bounded slowdown %v", i, b.BoundedSlowdown)
		}
	}
	if _, err := env.KeepContended(context.Background(), 1e12, 2); err == nil {
		t.Fatal("an impossible threshold kept episodes")
	}
}

// A snapshot's layout becomes a simulator spec with the same GPUs per type; unready, ineligible
// and draining nodes and unhealthy GPUs are left out.
func TestSpecFromSnapshot(t *testing.T) {
	for _, name := range []string{"gavel-108", "modern-mix"} {
		spec, err := sim.LoadSpec(name)
		if err != nil {
			t.Fatal(err)
		}
		tab, _ := throughput.Bundled()
		e, err := sim.New(sim.Config{Spec: spec, Throughput: tab})
		if err != nil {
			t.Fatal(err)
		}
		snap, _ := e.Snapshot(context.Background())
		got, err := SpecFromSnapshot("live", snap)
		if err != nil {
			t.Fatal(err)
		}
		if w, g := gpusByType(spec), gpusByType(got); fmt.Sprint(w) != fmt.Sprint(g) {
			t.Fatalf("%s: GPUs per type %v, want %v", name, g, w)
		}
		// Take one node out and one GPU of another.
		snap.Nodes[0].Eligible = false
		snap.Nodes[1].Devices[0].Instances[0].Healthy = false
		got, err = SpecFromSnapshot("live", snap)
		if err != nil {
			t.Fatal(err)
		}
		want := gpusByType(spec)
		want[snap.Nodes[0].Devices[0].GPUType] -= len(snap.Nodes[0].Devices[0].Instances)
		want[snap.Nodes[1].Devices[0].GPUType]--
		if g := gpusByType(got); fmt.Sprint(want) != fmt.Sprint(g) {
			t.Fatalf("%s without a node and a GPU: %v, want %v", name, g, want)
		}
	}
	if _, err := SpecFromSnapshot("live", &cluster.Snapshot{}); err == nil {
		t.Fatal("an empty snapshot gave a spec")
	}
}

func gpusByType(s *sim.Spec) map[string]int {
	m := map[string]int{}
	for _, c := range s.Classes {
		m[c.GPUType] += c.GPUsPerNode * c.Count
	}
	return m
}

// LiveTuner does nothing until enough runs arrived, and reports a layout it cannot replay.
func TestLiveTuner(t *testing.T) {
	trainer, _ := ppo.NewTrainer(ppo.Config{Seed: 2, RolloutsPerEpoch: 2, Workers: 1}, rank.DefaultSchema())
	ft, err := ppo.NewFineTuner(trainer.Checkpoint())
	if err != nil {
		t.Fatal(err)
	}
	lt := &LiveTuner{Online: &ppo.OnlineTuner{Tuner: ft, Every: 5}, Env: testEnv(t, 10).cfg}
	spec, _ := sim.LoadSpec("gavel-108")
	tab, _ := throughput.Bundled()
	e, _ := sim.New(sim.Config{Spec: spec, Throughput: tab})
	snap, _ := e.Snapshot(context.Background())
	if err := lt.Observe(context.Background(), cluster.Observation{JobID: "j", GPUType: "v100", GPUs: 1, Throughput: 5}); err != nil {
		t.Fatal(err)
	}
	if ran, adopted, err := lt.Tune(context.Background(), snap); ran || adopted || err != nil {
		t.Fatalf("tuned after one run: ran %v adopted %v err %v", ran, adopted, err)
	}
	if _, _, err := lt.Tune(context.Background(), &cluster.Snapshot{}); err == nil {
		t.Fatal("a snapshot without nodes was accepted")
	}
}

// The energy term compares the two runs over one window: a policy that ends 10 h before the
// baseline pays idle power for those hours, and the baseline's shared result is left as is.
func TestRewardEnergyOneWindow(t *testing.T) {
	base := &sim.Result{Jobs: 2, BoundedSlowdown: 2, EnergyKWh: 130, EnergyPerWork: 2.6, EnergyWindowS: 72000, IdlePowerW: 1000}
	pol := &sim.Result{Jobs: 2, BoundedSlowdown: 2, EnergyKWh: 100, EnergyPerWork: 2, EnergyWindowS: 36000, IdlePowerW: 1000}
	// pol over 20 h: 100 + 10 h x 1 kW = 110 kWh, 2.2 per work; equal BSLD, so the reward is
	// 0.3 x ln(2.6 / 2.2) = 0.0501 (own windows would give 0.3 x ln(2.6 / 2) = 0.0787).
	if got := Reward(rank.ScoreEnergyMix, pol, base); math.Abs(got-0.3*math.Log(2.6/2.2)) > 1e-9 {
		t.Errorf("reward %v, want %v", got, 0.3*math.Log(2.6/2.2))
	}
	if pol.EnergyKWh != 100 || base.EnergyWindowS != 72000 {
		t.Errorf("inputs changed: policy %v kWh, baseline window %v s", pol.EnergyKWh, base.EnergyWindowS)
	}
}
