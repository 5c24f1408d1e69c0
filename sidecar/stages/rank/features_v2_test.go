package rank

import (
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/hetgpu/hetgpu/model/cluster"
)

// Schema version 2's features of jobs whose estimates came from the user, hetgpu.steps, the
// history (at several levels) or nowhere, with and without attained service.
func TestExtractorFeaturesV2(t *testing.T) {
	snap := testSnapshot(t0)
	snap.Pending = []cluster.Job{
		// A user estimate, never run, queued an hour.
		{Namespace: "x", ID: "user", Group: "g", SubmitTime: t0.Add(-time.Hour), GPUs: 1, DeviceName: "nvidia/gpu",
			Hetgpu: cluster.Annotations{ModelName: "small", EstRuntime: time.Hour, Est: cluster.EstimateInfo{Source: cluster.EstUser}}},
		// A history estimate of namespace level, 2 GPUs that ran 30 min each before a preemption.
		{Namespace: "x", ID: "hist", Group: "g", SubmitTime: t0.Add(-2 * time.Hour), GPUs: 2, DeviceName: "nvidia/gpu",
			AttainedGPUSeconds: 3600,
			Hetgpu: cluster.Annotations{ModelName: "small", EstRuntime: 20 * time.Minute, Est: cluster.EstimateInfo{
				Source: cluster.EstHistory, Level: "namespace", Runs: 41, Confidence: 0.75, Ran: 30 * time.Minute, Left: 3 * time.Hour}}},
		// hetgpu.steps, and hetgpu.ran (from an annotation) instead of AttainedGPUSeconds.
		{Namespace: "x", ID: "steps", Group: "g", SubmitTime: t0.Add(-10 * time.Minute), GPUs: 1, DeviceName: "nvidia/gpu",
			Hetgpu: cluster.Annotations{ModelName: "small", EstRuntime: 2 * time.Hour, Ran: 4 * time.Minute, Est: cluster.EstimateInfo{Source: cluster.EstSteps}}},
		// No estimate at all.
		{Namespace: "x", ID: "none", Group: "g", SubmitTime: t0, GPUs: 4, DeviceName: "nvidia/gpu"},
		// The history's prior (no runs yet), same job level names.
		{Namespace: "x", ID: "prior", Group: "g", SubmitTime: t0, GPUs: 1, DeviceName: "nvidia/gpu",
			Hetgpu: cluster.Annotations{EstRuntime: time.Hour, Est: cluster.EstimateInfo{Source: cluster.EstHistory, Level: "prior", Left: 5 * time.Hour}}},
		// A backend's estimate the estimates step has not marked reads as the user's.
		{Namespace: "x", ID: "unmarked", Group: "g", SubmitTime: t0, GPUs: 1, DeviceName: "nvidia/gpu",
			Hetgpu: cluster.Annotations{EstRuntime: time.Hour}},
	}
	n := len(snap.Pending)
	var x Extractor
	rows, _ := extract(&x, snap, n)
	names := DefaultSchema().Features
	for _, c := range []struct {
		job, feat int
		want      float64
	}{
		{0, FAttained, 0},
		{0, FQueued, math.Log1p(60)},
		{0, FSrcUser, 1}, {0, FSrcSteps, 0}, {0, FSrcHistory, 0},
		{0, FEstConf, 1}, {0, FEstLevel, 1}, {0, FEstLeft, 0}, {0, FEstRank, 0}, {0, FEstRuns, 0},
		{1, FAttained, math.Log1p(60)},     // 3600 GPU-s = 60 GPU-min
		{1, FQueued, math.Log1p(120 - 30)}, // waited 2 h, ran 30 min per GPU
		{1, FSrcHistory, 1}, {1, FSrcUser, 0},
		{1, FEstConf, 0.75}, {1, FEstRuns, math.Log1p(41)}, {1, FEstLevel, 0.4},
		{1, FEstLeft, math.Log10(3 * 3600)}, {1, FEstRank, math.Log10(20 * 60)},
		{1, FEstKnown, 1}, // v1's flag: the heuristic reads a history estimate too
		{2, FAttained, math.Log1p(4)}, {2, FQueued, math.Log1p(6)},
		{2, FSrcSteps, 1}, {2, FEstConf, 1}, {2, FEstLevel, 1}, {2, FEstLeft, 0},
		{3, FAttained, 0}, {3, FQueued, 0},
		{3, FSrcUser, 0}, {3, FSrcSteps, 0}, {3, FSrcHistory, 0}, {3, FEstConf, 0}, {3, FEstLevel, 0},
		{4, FSrcHistory, 1}, {4, FEstLevel, 0}, {4, FEstConf, 0}, {4, FEstRuns, 0}, {4, FEstLeft, math.Log10(5 * 3600)},
		{5, FSrcUser, 1}, {5, FEstConf, 1},
	} {
		if got := rows[c.job*NumFeatures+c.feat]; !near(got, c.want) {
			t.Errorf("job %s feature %s = %v, want %v", snap.Pending[c.job].ID, names[c.feat], got, c.want)
		}
	}
}

func TestSchemas(t *testing.T) {
	v1, v2 := SchemaV1(), DefaultSchema()
	if len(v1.Features) != NumFeaturesV1 || len(v2.Features) != NumFeatures || v2.Version != SchemaVersion || v1.Version != SchemaVersion1 {
		t.Fatalf("v1 %d features (version %d), v2 %d (version %d)", len(v1.Features), v1.Version, len(v2.Features), v2.Version)
	}
	if !slices.Equal(v1.Features, v2.Features[:NumFeaturesV1]) {
		t.Fatalf("v1 %v is not a prefix of v2 %v", v1.Features, v2.Features)
	}
	odd := v2
	odd.Features = slices.Clone(v2.Features)
	odd.Features[NumFeaturesV1], odd.Features[NumFeaturesV1+1] = odd.Features[NumFeaturesV1+1], odd.Features[NumFeaturesV1]
	v3 := v2
	v3.Version = 3
	for _, c := range []struct {
		s  Schema
		ok bool
	}{{v1, true}, {v2, true}, {odd, false}, {v3, false}, {Schema{Version: 1, Features: v2.Features, Globals: v2.Globals}, false}} {
		if c.s.Supported() != c.ok {
			t.Errorf("schema %d %v: supported %v, want %v", c.s.Version, c.s.Features, c.s.Supported(), c.ok)
		}
		p, err := NewPolicy(c.s, []int{4}, rand.New(rand.NewPCG(1, 1)))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := New(p); (err == nil) != c.ok {
			t.Errorf("schema %d %v: New error %v, want ok %v", c.s.Version, c.s.Features, err, c.ok)
		}
	}
}

// A version 1 policy ranks a queue with estimate-free jobs exactly as it did on version 1 rows:
// the ranker feeds it the first NumFeaturesV1 columns, whatever the new columns hold.
func TestV1PolicyIgnoresV2Features(t *testing.T) {
	p, err := NewPolicy(SchemaV1(), []int{8}, rand.New(rand.NewPCG(7, 7)))
	if err != nil {
		t.Fatal(err)
	}
	snap := bigSnapshot(60, 5)
	r := quietRanker(t, p)
	before, err := r.Rank(context.Background(), snap, fakePred{})
	if err != nil {
		t.Fatal(err)
	}
	// The same queue with only v2 inputs changed: attained service and the estimate's reading.
	for i := range snap.Pending {
		j := &snap.Pending[i]
		j.AttainedGPUSeconds = float64(100 * (i + 1))
		if j.Hetgpu.EstRuntime > 0 {
			j.Hetgpu.Est = cluster.EstimateInfo{Source: cluster.EstHistory, Level: "job", Runs: i, Confidence: 0.5, Left: time.Duration(i+1) * time.Hour}
		}
	}
	after, err := r.Rank(context.Background(), snap, fakePred{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range before {
		if before[i].Job.ID != after[i].Job.ID || before[i].Score != after[i].Score {
			t.Fatalf("position %d: %s %v before, %s %v after v2-only changes", i, before[i].Job.ID, before[i].Score, after[i].Job.ID, after[i].Score)
		}
	}
	// A v2 policy whose first layer reads attained service does see the change.
	p2, err := NewPolicy(DefaultSchema(), []int{8}, rand.New(rand.NewPCG(7, 7)))
	if err != nil {
		t.Fatal(err)
	}
	r2, err := New(p2, WithExplain(false))
	if err != nil {
		t.Fatal(err)
	}
	fresh := bigSnapshot(60, 5)
	a, _ := r2.Rank(context.Background(), fresh, fakePred{})
	b, _ := r2.Rank(context.Background(), snap, fakePred{})
	same := true
	for i := range a {
		same = same && a[i].Score == b[i].Score
	}
	if same {
		t.Fatal("a v2 policy's scores did not change with attained service and the estimate's source")
	}
}
