package baselines

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/hetgpu/hetgpu/model/cluster"
	"github.com/hetgpu/hetgpu/sidecar/sched"
)

// speeds is a predictor from a table: job ID -> GPU type -> throughput (0 or missing: cannot run).
type speeds map[string]map[string]float64

func (s speeds) Predict(j *cluster.Job, t string, _ int) sched.Estimate {
	return sched.Estimate{Throughput: s[j.ID][t]}
}

// The LP gives each job its max-min fair share of time per GPU type within capacity: six equal
// jobs on four V100s get 4/6 of a V100 each; with a V100 and a K80, a job that runs equally
// fast on both gets all of its time and the one that gains 4x from the V100 at least its equal
// share (fair = 1, the most a job can reach when it runs all the time at its equal-share speed
// on both types).
func TestGavelAllocation(t *testing.T) {
	cases := []struct {
		name  string
		nodes []cluster.Node
		jobs  []cluster.Job
		pred  speeds
		// want: job -> type -> X, where the optimum is unique; fair: min over jobs of
		// throughput(X) / equal-share throughput.
		want map[string]map[string]float64
		fair float64
	}{
		{name: "six equal jobs on four GPUs", nodes: []cluster.Node{node("v", "v100", "Tesla V100", "a", 4, true)},
			jobs: []cluster.Job{job("a", 1), job("b", 1), job("c", 1), job("d", 1), job("e", 1), job("f", 1)},
			pred: speeds{"a": {"v100": 1}, "b": {"v100": 1}, "c": {"v100": 1}, "d": {"v100": 1}, "e": {"v100": 1}, "f": {"v100": 1}},
			want: map[string]map[string]float64{"a": {"v100": 4.0 / 6}, "b": {"v100": 4.0 / 6}, "c": {"v100": 4.0 / 6},
				"d": {"v100": 4.0 / 6}, "e": {"v100": 4.0 / 6}, "f": {"v100": 4.0 / 6}},
			fair: 4.0 / 6},
		{name: "two types", nodes: []cluster.Node{node("v", "v100", "Tesla V100", "a", 1, false), node("k", "k80", "Tesla K80", "a", 1, false)},
			jobs: []cluster.Job{job("a", 1), job("b", 1)},
			pred: speeds{"a": {"v100": 1, "k80": 1}, "b": {"v100": 4, "k80": 1}},
			fair: 1},
		{name: "a job no type runs gets nothing", nodes: []cluster.Node{node("v", "v100", "Tesla V100", "a", 1, false)},
			jobs: []cluster.Job{job("a", 1), job("never", 1)},
			pred: speeds{"a": {"v100": 1}},
			want: map[string]map[string]float64{"a": {"v100": 1}}, fair: 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := NewGavel()
			snap := &cluster.Snapshot{Now: time.Date(2026, 1, 1, 1, 0, 0, 0, time.UTC), Nodes: c.nodes, Pending: c.jobs}
			if _, err := g.Rank(context.Background(), snap, c.pred); err != nil {
				t.Fatal(err)
			}
			got := map[string]map[string]float64{}
			for k, x := range g.alloc {
				got[k[len("default/"):len(k)-len("/g")]] = x
			}
			for id, want := range c.want {
				for typ, x := range want {
					if math.Abs(got[id][typ]-x) > 1e-6 {
						t.Fatalf("job %s on %s: %v, want %v (allocation %v)", id, typ, got[id][typ], x, got)
					}
				}
			}
			capacity := typeCapacity(snap)
			total := 0
			for _, n := range capacity {
				total += n
			}
			used := map[string]float64{}
			fair := math.Inf(1)
			for _, j := range c.jobs {
				share, thr, equal := 0.0, 0.0, 0.0
				for typ, n := range capacity {
					equal += c.pred[j.ID][typ] * float64(n) / float64(total)
					x := got[j.ID][typ]
					share += x
					thr += c.pred[j.ID][typ] * x
					used[typ] += x * float64(j.GPUs)
				}
				if share > 1+1e-6 {
					t.Fatalf("job %s gets %v of the time (%v)", j.ID, share, got)
				}
				if equal > 0 {
					fair = math.Min(fair, thr/equal)
				}
			}
			for typ, u := range used {
				if u > float64(capacity[typ])+1e-6 {
					t.Fatalf("%s: %v GPUs allocated of %d (%v)", typ, u, capacity[typ], got)
				}
			}
			if math.Abs(fair-c.fair) > 1e-6 {
				t.Fatalf("min normalised throughput %v, want %v (%v)", fair, c.fair, got)
			}
		})
	}
}

// At a round boundary Gavel grants types by priority, preempts running jobs not granted their
// type and places granted jobs on their type; between rounds it only fills free GPUs.
func TestGavelRound(t *testing.T) {
	ctx := context.Background()
	t0 := time.Date(2026, 1, 1, 1, 0, 0, 0, time.UTC)
	nodes := []cluster.Node{node("v", "v100", "Tesla V100", "a", 1, false), node("k", "k80", "Tesla K80", "a", 1, false)}
	pred := speeds{"a": {"v100": 1, "k80": 1}, "b": {"v100": 4, "k80": 1}}
	a, b := job("a", 1), job("b", 1)
	a.SubmitTime, b.SubmitTime = t0, t0
	g := NewGavel()
	p := &sched.Pipeline{Ranker: g, Preemptor: g, Placer: g, Predictor: pred}

	// First round: nothing received yet, every pair is unserved; b's V100 pair has the larger
	// share, so b gets the V100 and a the K80.
	snap := &cluster.Snapshot{Now: t0, Nodes: nodes, Pending: []cluster.Job{a, b}}
	ranked, _ := g.Rank(ctx, snap, pred)
	ds, _, err := g.Place(ctx, nil, snap, ranked, pred)
	if err != nil {
		t.Fatal(err)
	}
	if got := typesOf(ds); got["a"] != "k80" || got["b"] != "v100" || len(got) != 2 {
		t.Fatalf("first round placed %v, want a on k80, b on v100", got)
	}
	if next := g.NextRound(snap); !next.Equal(t0.Add(6 * time.Minute)) {
		t.Fatalf("next round %v, want %v", next, t0.Add(6*time.Minute))
	}

	// Next round: a received only K80 time, so its V100 pair (share 0) comes first and takes
	// the V100; both move (b is not granted the V100 it ran on).
	at := t0.Add(6 * time.Minute)
	running := []cluster.Alloc{
		{ID: "a0", Namespace: "default", JobID: "a", Group: "g", NodeID: "k", DeviceIDs: []string{"k-gpu0"}, GPUType: "k80", StartTime: t0},
		{ID: "b0", Namespace: "default", JobID: "b", Group: "g", NodeID: "v", DeviceIDs: []string{"v-gpu0"}, GPUType: "v100", StartTime: t0},
	}
	snap = &cluster.Snapshot{Now: at, Nodes: nodes, Running: running, Preemptible: []cluster.Job{a, b}}
	plan, err := p.Preemptor.Plan(ctx, nil, snap, mustRank(t, g, withPending(snap, a, b), pred), pred)
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.Preempt) != 2 {
		t.Fatalf("round 2 preempts %v, want both jobs (each granted the other type)", plan.Preempt)
	}
	after := &cluster.Snapshot{Now: at, Nodes: nodes, Pending: []cluster.Job{a, b}}
	ds, _, _ = g.Place(ctx, nil, after, mustRank(t, g, after, pred), pred)
	if got := typesOf(ds); got["a"] != "v100" || got["b"] == "v100" {
		t.Fatalf("round 2 placed %v, want a on v100, b not there", got)
	}

	// Between rounds nothing is preempted.
	mid := &cluster.Snapshot{Now: at.Add(time.Minute), Nodes: nodes, Running: running, Preemptible: []cluster.Job{a, b}}
	plan, _ = g.Plan(ctx, nil, mid, mustRank(t, g, withPending(mid, a, b), pred), pred)
	if len(plan.Preempt) != 0 {
		t.Fatalf("between rounds preempts %v", plan.Preempt)
	}
}

func withPending(snap *cluster.Snapshot, jobs ...cluster.Job) *cluster.Snapshot {
	out := *snap
	out.Pending = jobs
	return &out
}

func mustRank(t *testing.T, g *Gavel, snap *cluster.Snapshot, pred sched.Predictor) []sched.Ranked {
	t.Helper()
	r, err := g.Rank(context.Background(), snap, pred)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func typesOf(ds []cluster.Decision) map[string]string {
	out := map[string]string{}
	for _, d := range ds {
		out[d.JobID] = d.GPUType
	}
	return out
}
