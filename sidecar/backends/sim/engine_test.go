package sim_test

import (
	"context"
	"math"
	"sort"
	"testing"
	"time"

	"github.com/hetgpu/hetgpu/model/cluster"
	"github.com/hetgpu/hetgpu/model/gpuspec"
	"github.com/hetgpu/hetgpu/model/trace"
	"github.com/hetgpu/hetgpu/sidecar/backends/sim"
	"github.com/hetgpu/hetgpu/sidecar/policies"
	"github.com/hetgpu/hetgpu/sidecar/sched"
	"github.com/hetgpu/hetgpu/sidecar/stages/place"
)

func newPolicy(t testing.TB, name string, s *sim.Spec) *sim.PipelinePolicy {
	t.Helper()
	p, err := policies.New(name, policies.Options{Spec: s, Throughput: table(t), Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func run(t testing.TB, s *sim.Spec, tr *trace.Trace, p *sim.PipelinePolicy) *sim.Result {
	t.Helper()
	r, err := sim.Simulate(context.Background(), sim.Setup{Spec: s, Throughput: table(t), Trace: tr}, p, nil)
	if err != nil {
		t.Fatalf("Simulate %s: %v", p.Name(), err)
	}
	return r
}

// With more GPUs than the trace can ever use at once, nobody waits: every JCT is the job's ideal
// runtime (steps / measured throughput of its type and count on the only GPU type).
func TestInfiniteGPUsJCTIsIdealRuntime(t *testing.T) {
	s := oneClass(t, "Tesla V100-SXM2-16GB", 8, 150)
	tr := synthetic(t, 120, 30, 3, true)
	for _, name := range []string{"fifo", "sjf", "tiresias", "gavel"} {
		t.Run(name, func(t *testing.T) {
			r := run(t, s, tr, newPolicy(t, name, s))
			if r.Jobs != len(tr.Jobs) {
				t.Fatalf("%d of %d jobs finished", r.Jobs, len(tr.Jobs))
			}
			byID := map[string]trace.Job{}
			for _, j := range tr.Jobs {
				byID[j.ID] = j
			}
			for _, j := range r.JobResults {
				thr, _, _ := table(t).Throughput(byID[j.ID].JobType, "v100", j.GPUs)
				want := byID[j.ID].TotalSteps / thr
				if math.Abs(j.JCTS-want) > 1e-6*want || math.Abs(j.IdealS-want) > 1e-6*want {
					t.Fatalf("job %s: JCT %.3f s, ideal %.3f s, want %.3f s", j.ID, j.JCTS, j.IdealS, want)
				}
				if j.QueueS != 0 {
					t.Fatalf("job %s waited %.3f s on an idle cluster", j.ID, j.QueueS)
				}
			}
		})
	}
}

// Busy GPU time never exceeds capacity, at any round (checked through snapshots) and in total.
func TestGPUTimeNeverExceedsCapacity(t *testing.T) {
	s := mixed(t, 3, 2)
	tr := synthetic(t, 150, 4, 5, true)
	for _, name := range []string{"fifo", "sjf", "tiresias", "gavel"} {
		t.Run(name, func(t *testing.T) {
			c := &checker{t: t}
			p := newPolicy(t, name, s)
			p.Meter = c
			r := run(t, s, tr, p)
			if c.rounds == 0 || r.Jobs+r.Unschedulable != len(tr.Jobs) {
				t.Fatalf("rounds %d, finished %d + unschedulable %d of %d", c.rounds, r.Jobs, r.Unschedulable, len(tr.Jobs))
			}
			if r.GPUUtil <= 0 || r.GPUUtil > 1+1e-9 {
				t.Fatalf("GPU utilisation %v outside (0, 1]", r.GPUUtil)
			}
			for _, sm := range r.Series {
				if sm.BusyGPUs > s.TotalGPUs() || sm.BusyGPUs < 0 {
					t.Fatalf("t=%v: %d busy GPUs of %d", sm.T, sm.BusyGPUs, s.TotalGPUs())
				}
			}
		})
	}
}

// FIFO starts jobs in arrival order (head-of-line blocking, no overtaking).
func TestFIFOStartsInArrivalOrder(t *testing.T) {
	s := oneClass(t, "Tesla V100-SXM2-16GB", 4, 2)
	tr := synthetic(t, 120, 6, 7, true)
	r := run(t, s, tr, newPolicy(t, "fifo", s))
	js := append([]sim.JobResult(nil), r.JobResults...)
	sort.Slice(js, func(a, b int) bool { return js[a].ArrivalS < js[b].ArrivalS })
	waited := 0
	for i := 1; i < len(js); i++ {
		if js[i].StartS < js[i-1].StartS {
			t.Fatalf("job %s (arrived %.0f) started at %.0f, before %s (arrived %.0f) at %.0f",
				js[i].ID, js[i].ArrivalS, js[i].StartS, js[i-1].ID, js[i-1].ArrivalS, js[i-1].StartS)
		}
		if js[i].QueueS > 0 {
			waited++
		}
	}
	if waited < len(js)/4 {
		t.Fatalf("only %d of %d jobs waited: the test load is not contended", waited, len(js))
	}
}

// Little's law: the time-average number of jobs in the system equals arrival rate x mean JCT.
// Over a run that starts and ends empty the two sides integrate the same quantity, so they
// agree up to the series' bookkeeping; a broken series or JCT shows up as a mismatch.
func TestLittlesLaw(t *testing.T) {
	s := oneClass(t, "Tesla V100-SXM2-16GB", 4, 6)
	tr := synthetic(t, 400, 1.2, 11, true) // steady load below capacity
	for _, name := range []string{"fifo", "tiresias"} {
		t.Run(name, func(t *testing.T) {
			r := run(t, s, tr, newPolicy(t, name, s))
			var area float64
			for i := 0; i+1 < len(r.Series); i++ {
				area += float64(r.Series[i].Queue+r.Series[i].Running) * (r.Series[i+1].T - r.Series[i].T)
			}
			span := r.Series[len(r.Series)-1].T - r.Series[0].T
			L := area / span
			lambda := float64(r.Jobs) / span
			if math.Abs(L-lambda*r.AvgJCTS) > 0.01*L {
				t.Fatalf("L = %.4f, lambda x W = %.4f", L, lambda*r.AvgJCTS)
			}
			if r.AvgQueueS <= 0 {
				t.Fatalf("no queueing at all: load too light for a meaningful check")
			}
		})
	}
}

// sharePolicy starts every pending job on the first GPU of the first node, shared.
func sharePolicy(t testing.TB) *sim.PipelinePolicy {
	return &sim.PipelinePolicy{PolicyName: "share", Estimates: sim.Estimates{Off: true},
		Stages: sched.Stages{Ranker: place.FIFO{}, Placer: shareFirstGPU{}, Predictor: sim.TablePredictor{Table: table(t)}}}
}

type shareFirstGPU struct{}

func (shareFirstGPU) Place(_ context.Context, _ *sched.RoundState, snap *cluster.Snapshot, ranked []sched.Ranked, _ sched.Predictor) ([]cluster.Decision, sched.PlaceStats, error) {
	n := &snap.Nodes[0]
	var out []cluster.Decision
	for _, r := range ranked {
		out = append(out, cluster.Decision{Namespace: r.Job.Namespace, JobID: r.Job.ID, Group: r.Job.Group, Shared: true,
			Assign: []cluster.Assignment{{NodeID: n.ID, InstanceIDs: []string{n.Devices[0].Instances[0].ID}}}})
	}
	return out, sched.PlaceStats{}, nil
}

// A co-located pair runs at the table's pair throughputs; once one finishes the other speeds up
// to its isolated throughput.
func TestColocatedPairRunsAtPairThroughputs(t *testing.T) {
	tab := table(t)
	a, b := "ResNet-18 (batch size 64)", "Transformer (batch size 32)"
	ra, rb, ok := tab.Colocated("v100", a, 1, b, 1)
	if !ok || ra <= 0 || rb <= 0 {
		t.Fatalf("table has no pair %s + %s on v100", a, b)
	}
	isoA, _ := tab.Measured(a, "v100", 1)
	isoB, _ := tab.Measured(b, "v100", 1)
	// A's work takes 1000 s at the pair rate; B has twice as much.
	tr := &trace.Trace{Name: "pair", Jobs: []trace.Job{
		{ID: "a", JobType: a, Model: "ResNet-18", BatchSize: 64, GPUs: 1, TotalSteps: 1000 * ra},
		{ID: "b", JobType: b, Model: "Transformer", BatchSize: 32, GPUs: 1, TotalSteps: 2000 * rb},
	}}
	s := oneClass(t, "Tesla V100-SXM2-16GB", 1, 1)
	r := run(t, s, tr, sharePolicy(t))
	got := map[string]float64{}
	for _, j := range r.JobResults {
		got[j.ID] = j.FinishS
	}
	if math.Abs(got["a"]-1000) > 1e-6 {
		t.Fatalf("a finished at %v, want 1000 (pair throughput %v steps/s)", got["a"], ra)
	}
	wantB := 1000 + 1000*rb/isoB
	if math.Abs(got["b"]-wantB) > 1e-6 {
		t.Fatalf("b finished at %v, want %v (pair %v then isolated %v steps/s)", got["b"], wantB, rb, isoB)
	}
	_ = isoA
}

// Preemption keeps progress: a job stopped half-way needs only the other half. preemptOnce
// is a preemption stage that stops the running job once, 500 s after the first round, and asks
// for a round then (sched.Waker).
type preemptOnce struct {
	t0   time.Time
	done bool
}

func (p *preemptOnce) Plan(_ context.Context, _ *sched.RoundState, snap *cluster.Snapshot, ranked []sched.Ranked, _ sched.Predictor) (sched.Plan, error) {
	plan := sched.Plan{Order: ranked}
	if !p.done && len(snap.Preemptible) == 1 && !snap.Now.Before(p.t0.Add(500*time.Second)) {
		p.done = true
		j := snap.Preemptible[0]
		plan.Preempt = []cluster.Preemption{{Namespace: j.Namespace, JobID: j.ID, Group: j.Group}}
	}
	return plan, nil
}

func (p *preemptOnce) NextRound(snap *cluster.Snapshot) time.Time {
	if p.t0.IsZero() {
		p.t0 = snap.Now
	}
	if p.done {
		return time.Time{}
	}
	return p.t0.Add(500 * time.Second)
}

func preemptOncePolicy(t testing.TB) *sim.PipelinePolicy {
	return &sim.PipelinePolicy{PolicyName: "preempt-once", Estimates: sim.Estimates{Off: true},
		Stages: sched.Stages{Ranker: place.FIFO{}, Placer: place.FirstFit{}, Preemptor: &preemptOnce{}, Predictor: sim.TablePredictor{Table: table(t)}}}
}

func TestPreemptionKeepsProgress(t *testing.T) {
	jt := "ResNet-50 (batch size 32)"
	thr, _ := table(t).Measured(jt, "v100", 1)
	tr := &trace.Trace{Name: "p", Jobs: []trace.Job{{ID: "x", JobType: jt, Model: "ResNet-50", BatchSize: 32, GPUs: 1, TotalSteps: 1000 * thr}}}
	s := oneClass(t, "Tesla V100-SXM2-16GB", 1, 1)
	r := run(t, s, tr, preemptOncePolicy(t))
	// Preempted at 500 and restarted in the same round: finishes at 1000 with no penalty.
	if r.Preemptions != 1 || math.Abs(r.JobResults[0].FinishS-1000) > 1e-6 {
		t.Fatalf("preemptions %d, finish %v, want 1 and 1000", r.Preemptions, r.JobResults[0].FinishS)
	}
	r2, err := sim.Simulate(context.Background(), sim.Setup{Spec: s, Throughput: table(t), Trace: tr, RestartPenaltyS: 30}, preemptOncePolicy(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(r2.JobResults[0].FinishS-1030) > 1e-6 {
		t.Fatalf("with a 30 s restart penalty finish %v, want 1030", r2.JobResults[0].FinishS)
	}
}

// Pin rejects bad decisions with a reason and applies good ones.
func TestPinValidates(t *testing.T) {
	s := oneClass(t, "Tesla V100-SXM2-16GB", 4, 2)
	e, err := sim.New(sim.Config{Spec: s, Throughput: table(t)})
	if err != nil {
		t.Fatal(err)
	}
	jt := "ResNet-50 (batch size 32)"
	snap := pending(t, e,
		trace.Job{ID: "a", JobType: jt, Model: "ResNet-50", BatchSize: 32, GPUs: 2, TotalSteps: 1e4},
		trace.Job{ID: "b", JobType: jt, Model: "ResNet-50", BatchSize: 32, GPUs: 2, TotalSteps: 1e4},
	)
	ctx := context.Background()
	if len(snap.Pending) != 2 || snap.Pending[0].Hetgpu.ModelName != "ResNet-50" || snap.Pending[0].Hetgpu.MaxNodes != 1 {
		t.Fatalf("pending %+v", snap.Pending)
	}
	if g := snap.Nodes[0].Devices[0]; g.Name != "Tesla V100-SXM2-16GB" || g.GPUType != "v100" || g.Instances[0].ID != "GPU-c-0-0" {
		t.Fatalf("device group %+v", g)
	}
	grp := snap.Nodes[0].Devices[0].ID()
	dec := func(job string, ids ...string) cluster.Decision {
		return cluster.Decision{Namespace: "default", JobID: job, Group: sim.JobGroup,
			Assign: []cluster.Assignment{{NodeID: "c-0", DeviceGroup: grp, InstanceIDs: ids}}}
	}
	res, err := e.Pin(ctx, []cluster.Decision{
		dec("a", "GPU-c-0-0", "GPU-c-0-1"),
		dec("b", "GPU-c-0-1", "GPU-c-0-2"), // overlaps a
		dec("nope", "GPU-c-0-3"),
	})
	if err != nil {
		t.Fatal(err)
	}
	if !res[0].Applied || res[1].Applied || res[1].Err == nil || res[2].Err == nil {
		t.Fatalf("pin results %+v", res)
	}
	res, _ = e.Pin(ctx, []cluster.Decision{dec("b", "GPU-c-0-2")})
	if res[0].Applied || res[0].Err == nil {
		t.Fatalf("pin of 1 GPU for a 2-GPU job: %+v", res)
	}
	res, _ = e.Pin(ctx, []cluster.Decision{dec("b", "GPU-c-0-2", "GPU-c-0-3")})
	if !res[0].Applied {
		t.Fatalf("pin: %+v", res)
	}
	snap, _ = e.Snapshot(ctx)
	if len(snap.Running) != 2 || len(snap.Pending) != 0 {
		t.Fatalf("running %d pending %d", len(snap.Running), len(snap.Pending))
	}
	e.AdvanceTo(1e9)
	if !e.Done() {
		t.Fatal("jobs did not finish")
	}
}

// Energy integrates busy and idle GPUs with the documented power model: one single-GPU job for
// 1000 s on a 2-GPU V100 node draws Power(0.9) on its GPU and idle power on the other.
func TestEnergyModel(t *testing.T) {
	jt := "ResNet-50 (batch size 32)"
	thr, _ := table(t).Measured(jt, "v100", 1)
	tr := &trace.Trace{Name: "e", Jobs: []trace.Job{{ID: "x", JobType: jt, Model: "ResNet-50", BatchSize: 32, GPUs: 1, TotalSteps: 1000 * thr}}}
	s := oneClass(t, "Tesla V100-SXM2-16GB", 2, 1)
	r := run(t, s, tr, newPolicy(t, "fifo", s))
	v, _ := gpuspec.Default().Lookup("v100")
	want := (v.Power(0.9, 0.7) + v.IdleW) * 1000 / 3.6e6
	if math.Abs(r.EnergyKWh-want) > 1e-9 || math.Abs(r.GPUUtil-0.5) > 1e-9 {
		t.Fatalf("energy %v kWh, util %v; want %v kWh, 0.5", r.EnergyKWh, r.GPUUtil, want)
	}
	if math.Abs(r.JobResults[0].EnergyJ-v.Power(0.9, 0.7)*1000) > 1e-6 {
		t.Fatalf("job energy %v J, want %v", r.JobResults[0].EnergyJ, v.Power(0.9, 0.7)*1000)
	}
	// Work per energy: 1000 V100-seconds of work on one GPU.
	if math.Abs(r.EnergyPerWork-want/(1000.0/3600)) > 1e-9 {
		t.Fatalf("energy per work %v, want %v", r.EnergyPerWork, want/(1000.0/3600))
	}
}
