package rank

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/hetgpu/hetgpu/model/cluster"
	"github.com/hetgpu/hetgpu/model/cluster/clustertest"
	"github.com/hetgpu/hetgpu/sidecar/sched"
)

// fakePred: per GPU, v100 does 10 steps/s at 250 W, t4 4 steps/s at 70 W; "big" models OOM on t4.
type fakePred struct{}

func (fakePred) Predict(job *cluster.Job, gpuType string, gpus int) sched.Estimate {
	switch gpuType {
	case "v100":
		return sched.Estimate{Throughput: 10 * float64(gpus), PowerW: 250 * float64(gpus)}
	case "t4":
		if job.Hetgpu.ModelName == "big" {
			return sched.Estimate{}
		}
		return sched.Estimate{Throughput: 4 * float64(gpus), PowerW: 70 * float64(gpus)}
	}
	return sched.Estimate{}
}

var t0 = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

var gpuNode = clustertest.GPUNode

func testSnapshot(now time.Time) *cluster.Snapshot {
	return &cluster.Snapshot{
		Now: now,
		Nodes: []cluster.Node{
			gpuNode("a", "Tesla V100-SXM2-16GB", "v100", 4, "ready"),
			gpuNode("b", "Tesla T4", "t4", 8, "ready"),
			gpuNode("c", "Tesla V100-SXM2-16GB", "v100", 2, "down"),
			gpuNode("d", "Tesla V100-SXM2-16GB", "v100", 4, "ready", 3),
		},
		Running: []cluster.Alloc{{ID: "r1", Namespace: "x", JobID: "r1", Group: "g", NodeID: "a",
			DeviceIDs: []string{"a-0", "a-1"}, GPUType: "v100", StartTime: now.Add(-10 * time.Minute)}},
		Pending: []cluster.Job{
			{Namespace: "x", ID: "j0", Group: "g", Priority: 50, SubmitTime: now.Add(-time.Hour), GPUs: 1, DeviceName: "nvidia/gpu",
				Hetgpu: cluster.Annotations{ModelName: "small", EstRuntime: time.Hour}},
			{Namespace: "y", ID: "j1", Group: "g", Priority: 100, SubmitTime: now, GPUs: 4, DeviceName: "nvidia/gpu/Tesla V100-SXM2-16GB"},
			{Namespace: "y", ID: "j2", Group: "g", Priority: 50, SubmitTime: now, GPUs: 4, DeviceName: "nvidia/gpu",
				Hetgpu: cluster.Annotations{ModelName: "big", MaxNodes: 2}},
			{Namespace: "y", ID: "j3", Group: "g", Priority: 50, SubmitTime: now, GPUs: 16, DeviceName: "gpu"},
		},
	}
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

// extract runs x over the first n pending jobs of snap (with fakePred) and returns their
// feature rows and the globals.
func extract(x *Extractor, snap *cluster.Snapshot, n int) (rows, g []float64) {
	rows, g = make([]float64, n*NumFeatures), make([]float64, NumGlobals)
	x.Extract(snap, fakePred{}, n, rows, g)
	return rows, g
}

func TestExtractorFeatures(t *testing.T) {
	snap := testSnapshot(t0)
	var x Extractor
	rows, g := extract(&x, snap, 4)
	f := func(j, i int) float64 { return rows[j*NumFeatures+i] }
	// supply: v100 4 (a) + 3 (d, one unhealthy; c is down) = 7, t4 8; free v100 2+3, t4 8.
	// demand: v100 1+4+4+16 = 25, t4 (j0, j3; j1 wants V100, j2 OOMs on T4) 1+16 = 17.
	cases := []struct {
		job, feat int
		want      float64
	}{
		{0, FWait, math.Log1p(60)},
		{1, FWait, 0},
		{0, FGPUs, 0},
		{3, FGPUs, 4},
		{0, FDemandSupply, math.Log1p((25.0 + 17) / 15)},
		{1, FDemandSupply, math.Log1p(25.0 / 7)},
		{0, FNearAvail, 1},                      // 13 free + 2 soon vs 1 GPU, capped at 4x
		{1, FNearAvail, math.Min(4, 7.0/4) / 4}, // r1's 2 V100s count as soon free (Lindy: 10 min left)
		{1, FWays, 0},                           // no V100 node has 4 free
		{1, FFrag, 1},                           // all 5 free V100s sit on nodes too small for it
		{1, FCanStart, 0},
		{2, FWays, math.Log1p(2)}, // per-node share 2: nodes a (2 free) and d (3 free)
		{2, FFrag, 0},
		{2, FCanStart, 1}, // 3 + 2 over two nodes
		{0, FWays, math.Log1p(3)},
		{0, FCanStart, 1},
		{3, FCanStart, 0},
		{0, FSpeedup, math.Log2(10.0 / 7)},
		{2, FSpeedup, 0}, // only one candidate type
		{0, FEstKnown, 1},
		{0, FRuntime, math.Log10(3600)},
		{0, FEnergy, math.Log10(250)},
		{1, FEstKnown, 0},
		{1, FRuntime, 0},
		{0, FNSShare, 1},
		{1, FNSShare, 0},
		{1, FPriority, 1},
		{0, FPriority, 0},
	}
	names := DefaultSchema().Features
	for _, c := range cases {
		if got := f(c.job, c.feat); !near(got, c.want) {
			t.Errorf("job %d feature %s = %v, want %v", c.job, names[c.feat], got, c.want)
		}
	}
	if want := 15.0 / 15; !near(g[GFree], 13.0/15) || !near(g[GPending], math.Log1p(4)) || want != 1 {
		t.Errorf("globals %v", g)
	}
}

// TestExtractorRemembersRuntimes: once a job with an estimate runs, its GPUs are expected back
// at start + predicted runtime on its GPU type, not by the Lindy rule.
func TestExtractorRemembersRuntimes(t *testing.T) {
	snap := testSnapshot(t0)
	var x Extractor
	rows, g := extract(&x, snap, 4)
	// Later j0 runs on two T4s for 30 min: predicted runtime there is 1 h x 10/4 = 2.5 h, so the
	// GPUs are not back within the 30 min horizon (Lindy would say they are).
	later := testSnapshot(t0.Add(30 * time.Minute))
	later.Running = append(later.Running, cluster.Alloc{ID: "j0-0", Namespace: "x", JobID: "j0", Group: "g", NodeID: "b",
		DeviceIDs: []string{"b-0"}, GPUType: "t4", StartTime: t0})
	later.Pending = later.Pending[1:]
	x.Extract(later, fakePred{}, 3, rows, g)
	// j3 (any type): free v100 5 + t4 7; soon: r1's 2 V100s (10 min old, Lindy), not j0's T4.
	got := rows[2*NumFeatures+FNearAvail]
	want := math.Min(4, 14.0/16) / 4
	if !near(got, want) {
		t.Fatalf("near_avail of the 16-GPU job = %v, want %v (j0's T4 must not count as soon free)", got, want)
	}
	var fresh Extractor
	fresh.Extract(later, fakePred{}, 3, rows, g)
	if got := rows[2*NumFeatures+FNearAvail]; !near(got, math.Min(4, 15.0/16)/4) {
		t.Fatalf("without memory the Lindy rule should count j0's T4 as soon free: near_avail %v", got)
	}
}

// The ranker's candidate pools follow Nomad's device matching (constraint.MatchesRequest):
// an empty request matches nothing, the vendor counts, and a model name must be a group's
// name, not only the same GPU type.
func TestDeviceMatches(t *testing.T) {
	var x Extractor
	x.groups = [][]cluster.DeviceGroup{
		{{Vendor: "nvidia", Type: "gpu", Name: "Tesla T4"}},
		{{Vendor: "nvidia", Type: "gpu", Name: "Tesla V100-SXM2-16GB"}, {Vendor: "nvidia", Type: "gpu", Name: "Tesla V100-SXM2-32GB"}},
		{{Vendor: "amd", Type: "gpu", Name: "Instinct MI250"}},
	}
	const t4, v100, mi250 = 0, 1, 2
	for _, c := range []struct {
		req  string
		typ  int
		want bool
	}{
		{"", t4, false},
		{"gpu", t4, true},
		{"nvidia/gpu", v100, true},
		{"nvidia/gpu/Tesla T4", t4, true},
		{"nvidia/gpu/Tesla T4", v100, false},
		{"nvidia/gpu/Tesla V100-SXM2-32GB", v100, true},
		{"nvidia/gpu/Tesla V100", v100, false},
		{"/gpu/Tesla T4", t4, true},
		{"nvidia/gpu", mi250, false},
		{"amd/gpu", mi250, true},
		{"nvidia/fpga", t4, false},
		{"fpga", t4, false},
	} {
		if got := x.deviceMatches(c.req, c.typ); got != c.want {
			t.Errorf("deviceMatches(%q, type %d) = %v, want %v", c.req, c.typ, got, c.want)
		}
	}
}

func TestNormalizerMergeEqualsSequential(t *testing.T) {
	a, b, all := NewNormalizer(2), NewNormalizer(2), NewNormalizer(2)
	x := []float64{1, 2, 3, 5, -1, 0, 4, 4, 2, 9}
	a.Update(x[:4])
	b.Update(x[4:])
	all.Update(x)
	a.Merge(b)
	for i := range 2 {
		if !near(a.Mean[i], all.Mean[i]) || math.Abs(a.M2[i]-all.M2[i]) > 1e-9 || a.Count != all.Count {
			t.Fatalf("merged %+v, sequential %+v", a, all)
		}
	}
	rows := []float64{100, -100}
	all.Apply(rows)
	if rows[0] != ClipZ || rows[1] != -ClipZ {
		t.Fatalf("normalised outliers %v, want clipped to +-%v", rows, ClipZ)
	}
}

// A job asking for GPU slots gets its features from the slot groups (their free slots) and a
// job asking for whole GPUs from the whole groups, on a node that has both of one model.
func TestExtractorSlotGroups(t *testing.T) {
	n := gpuNode("a", "Tesla V100-SXM2-16GB", "v100", 2, "ready")
	slots := cluster.DeviceGroup{Vendor: "nvidia", Type: "gpu-slot", Name: "Tesla V100-SXM2-16GB shared 2", GPUType: "v100"}
	for k := range 4 {
		slots.Instances = append(slots.Instances, cluster.Instance{ID: fmt.Sprintf("a-2-slot%d", k), Healthy: true})
	}
	n.Devices = append(n.Devices, slots)
	snap := &cluster.Snapshot{Now: t0, Nodes: []cluster.Node{n},
		// Both whole GPUs busy; one slot of four busy (its job started 10 min ago: Lindy says
		// it frees within the 30-minute horizon).
		Running: []cluster.Alloc{
			{ID: "w", Namespace: "x", JobID: "w", Group: "g", NodeID: "a", DeviceIDs: []string{"a-0", "a-1"}, GPUType: "v100", StartTime: t0.Add(-10 * time.Hour)},
			{ID: "s", Namespace: "x", JobID: "s", Group: "g", NodeID: "a", DeviceIDs: []string{"a-2-slot0"}, GPUType: "v100", StartTime: t0.Add(-10 * time.Minute)},
		},
		Pending: []cluster.Job{
			{Namespace: "x", ID: "whole", Group: "g", SubmitTime: t0, GPUs: 1, DeviceName: "nvidia/gpu"},
			{Namespace: "x", ID: "slot", Group: "g", SubmitTime: t0, GPUs: 1, DeviceName: "nvidia/gpu-slot"},
		}}
	var x Extractor
	rows, _ := extract(&x, snap, 2)
	f := func(j, i int) float64 { return rows[j*NumFeatures+i] }
	cases := []struct {
		name      string
		job, feat int
		want      float64
	}{
		{"whole job: no whole GPU free", 0, FCanStart, 0},
		{"whole job: no node with a free whole GPU", 0, FWays, 0},
		{"whole job: demand 1 on supply 2", 0, FDemandSupply, math.Log1p(1.0 / 2)},
		{"slot job: 3 slots free", 1, FCanStart, 1},
		{"slot job: one group with free slots", 1, FWays, math.Log1p(1)},
		{"slot job: demand 1 on supply 4", 1, FDemandSupply, math.Log1p(1.0 / 4)},
		{"slot job: 3 free + 1 soon, capped at 4x", 1, FNearAvail, 1},
		{"whole job: the slot job freeing soon is not a whole GPU", 0, FNearAvail, 0},
	}
	names := DefaultSchema().Features
	for _, c := range cases {
		if got := f(c.job, c.feat); !near(got, c.want) {
			t.Errorf("%s: job %d feature %s = %v, want %v", c.name, c.job, names[c.feat], got, c.want)
		}
	}
}
