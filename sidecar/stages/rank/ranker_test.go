package rank

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/hetgpu/hetgpu/model/cluster"
	"github.com/hetgpu/hetgpu/sidecar/sched"
)

var _ sched.Ranker = (*Ranker)(nil)

func keys(r []sched.Ranked) []string {
	out := make([]string, len(r))
	for i, x := range r {
		out[i] = x.Job.ID
	}
	return out
}

func TestHeuristicRanking(t *testing.T) {
	now := t0.Add(10 * time.Hour)
	job := func(id string, gpus int, est time.Duration, waited time.Duration) cluster.Job {
		return cluster.Job{Namespace: "n", ID: id, Group: "g", Priority: 50, SubmitTime: now.Add(-waited), GPUs: gpus,
			DeviceName: "nvidia/gpu", Hetgpu: cluster.Annotations{ModelName: id, EstRuntime: est}}
	}
	for _, c := range []struct {
		name string
		h    Heuristic
		jobs []cluster.Job
		want []string
	}{
		{"smaller GPU-time first", Heuristic{}, []cluster.Job{job("long", 1, 6*time.Hour, 0), job("wide", 8, time.Hour, 0), job("short", 1, 10*time.Minute, 0)},
			[]string{"short", "long", "wide"}},
		{"no aging by default", Heuristic{}, []cluster.Job{job("big", 4, 4*time.Hour, 6*time.Hour), job("small", 1, time.Hour, 0)},
			[]string{"small", "big"}},
		{"aging overtakes", Heuristic{AgingMinutes: 60}, []cluster.Job{job("big", 4, 4*time.Hour, 6*time.Hour), job("small", 1, time.Hour, 0)},
			[]string{"big", "small"}},
		{"unknown runtime counts as one hour", Heuristic{}, []cluster.Job{job("unknown", 1, 0, 0), job("2h", 1, 2*time.Hour, 0), job("30m", 1, 30*time.Minute, 0)},
			[]string{"30m", "unknown", "2h"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			snap := &cluster.Snapshot{Now: now, Nodes: []cluster.Node{gpuNode("a", "Tesla V100-SXM2-16GB", "v100", 8, "ready")}, Pending: c.jobs}
			r, err := New(nil, WithHeuristic(c.h))
			if err != nil {
				t.Fatal(err)
			}
			got, err := r.Rank(context.Background(), snap, fakePred{})
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(keys(got)) != fmt.Sprint(c.want) {
				t.Fatalf("order %v, want %v", keys(got), c.want)
			}
			for i := 1; i < len(got); i++ {
				if got[i].Score >= got[i-1].Score {
					t.Fatalf("scores not decreasing: %v then %v", got[i-1].Score, got[i].Score)
				}
			}
			if got[0].Features["gpus"] != float64(log2i(got[0].Job.GPUs)) {
				t.Fatalf("features not explained: %v", got[0].Features)
			}
		})
	}
}

func log2i(n int) int {
	k := 0
	for n > 1 {
		n /= 2
		k++
	}
	return k
}

func bigSnapshot(n int, seed uint64) *cluster.Snapshot {
	rng := rand.New(rand.NewPCG(seed, 1))
	snap := &cluster.Snapshot{Now: t0.Add(24 * time.Hour)}
	for i := 0; i < 32; i++ {
		typ, name := "v100", "Tesla V100-SXM2-16GB"
		if i%2 == 1 {
			typ, name = "t4", "Tesla T4"
		}
		snap.Nodes = append(snap.Nodes, gpuNode(fmt.Sprintf("n%d", i), name, typ, 8, "ready"))
	}
	for i := 0; i < 40; i++ {
		node := fmt.Sprintf("n%d", i%32)
		snap.Running = append(snap.Running, cluster.Alloc{ID: fmt.Sprintf("r%d", i), Namespace: "ns", JobID: fmt.Sprintf("r%d", i),
			Group: "g", NodeID: node, DeviceIDs: []string{fmt.Sprintf("%s-%d", node, i/32*4), fmt.Sprintf("%s-%d", node, i/32*4+1)},
			GPUType: map[bool]string{true: "v100", false: "t4"}[(i%32)%2 == 0], StartTime: snap.Now.Add(-time.Duration(rng.IntN(7200)) * time.Second)})
	}
	for i := 0; i < n; i++ {
		snap.Pending = append(snap.Pending, cluster.Job{Namespace: fmt.Sprintf("ns%d", i%3), ID: fmt.Sprintf("j%d", i), Group: "g",
			Priority: 50, SubmitTime: snap.Now.Add(-time.Duration(rng.IntN(36000)) * time.Second), GPUs: 1 << rng.IntN(4),
			DeviceName: "nvidia/gpu", Hetgpu: cluster.Annotations{ModelName: fmt.Sprintf("m%d", rng.IntN(10)), EstRuntime: time.Duration(60+rng.IntN(36000)) * time.Second}})
	}
	return snap.Indexed() // as the pipeline hands it to the ranker
}

func randomPolicy(t testing.TB) *Policy {
	p, err := NewPolicy(DefaultSchema(), []int{32, 32}, rand.New(rand.NewPCG(5, 5)))
	if err != nil {
		t.Fatal(err)
	}
	p.Actor.Init(rand.New(rand.NewPCG(6, 6)), 1)
	return p
}

func TestPolicyRankingWindowAndOrder(t *testing.T) {
	snap := bigSnapshot(200, 1)
	r, err := New(randomPolicy(t))
	if err != nil {
		t.Fatal(err)
	}
	got, err := r.Rank(context.Background(), snap, fakePred{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 200 {
		t.Fatalf("%d ranked, want 200", len(got))
	}
	seen := map[string]bool{}
	for i, x := range got {
		if seen[x.Job.ID] {
			t.Fatalf("job %s ranked twice", x.Job.ID)
		}
		seen[x.Job.ID] = true
		if i > 0 && x.Score >= got[i-1].Score {
			t.Fatalf("scores not decreasing at %d", i)
		}
		if i < MaxWindow {
			if x.Features == nil {
				t.Fatalf("job %s in the window has no features", x.Job.ID)
			}
		} else if x.Features != nil {
			t.Fatalf("position %d: a job beyond the window has features", i)
		}
	}
	// The window holds the jobs with the least estimated GPU-time; the rest follow in that
	// order.
	work := func(j *cluster.Job) float64 {
		rt := j.Hetgpu.EstRuntime
		if rt <= 0 {
			rt = time.Hour
		}
		return float64(max(j.GPUs, 1)) * rt.Seconds()
	}
	most := 0.0
	for _, x := range got[:MaxWindow] {
		most = max(most, work(x.Job))
	}
	for i, x := range got[MaxWindow:] {
		if work(x.Job) < most {
			t.Fatalf("job %s (%.0f GPU-s) left out of a window that holds one of %.0f GPU-s", x.Job.ID, work(x.Job), most)
		}
		if i > 0 && work(x.Job) < work(got[MaxWindow+i-1].Job) {
			t.Fatalf("position %d: jobs beyond the window must follow by estimated GPU-time", MaxWindow+i)
		}
	}
	// Same input, same answer.
	again, _ := r.Rank(context.Background(), snap, fakePred{})
	if fmt.Sprint(keys(again)) != fmt.Sprint(keys(got)) {
		t.Fatal("ranking the same snapshot twice gave different orders")
	}
	if _, err := New(&Policy{Schema: Schema{Version: 99, Features: []string{"x"}}}); err == nil {
		t.Fatal("a policy with a foreign schema was accepted")
	}
}

// BenchmarkRank128 is the ranking latency target: 128 pending jobs on 256 GPUs under 1 ms.
func BenchmarkRank128(b *testing.B) {
	snap := bigSnapshot(MaxWindow, 2)
	for _, bc := range []struct {
		name    string
		policy  *Policy
		explain bool
	}{{"policy", randomPolicy(b), true}, {"policy-noexplain", randomPolicy(b), false}, {"heuristic", nil, true}} {
		b.Run(bc.name, func(b *testing.B) {
			r, _ := New(bc.policy, WithExplain(bc.explain))
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := r.Rank(ctx, snap, fakePred{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestRankHotPathDoesNotAllocate: feature extraction and scoring (everything but building the
// returned slice and explain maps) allocate nothing in steady state.
func TestRankHotPathDoesNotAllocate(t *testing.T) {
	snap := bigSnapshot(MaxWindow, 3)
	for _, p := range []*Policy{randomPolicy(t), nil} {
		r, _ := New(p)
		r.rank(snap, fakePred{}) // warm the buffers
		allocs := testing.AllocsPerRun(20, func() {
			if _, err := r.rank(snap, fakePred{}); err != nil {
				t.Fatal(err)
			}
		})
		if allocs != 0 {
			t.Errorf("policy %v: %v allocations per ranking round, want 0", p != nil, allocs)
		}
	}
}
