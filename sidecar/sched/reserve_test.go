package sched

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/hetgpu/hetgpu/model/cluster"
	"github.com/hetgpu/hetgpu/model/gpuspec"
)

var t0 = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

// node8 is one ready node with 8 healthy GPUs g0..g7.
func node8() cluster.Node {
	g := cluster.DeviceGroup{Vendor: "nvidia", Type: "gpu", Name: "Tesla V100", GPUType: "v100"}
	for i := range 8 {
		g.Instances = append(g.Instances, cluster.Instance{ID: fmt.Sprintf("g%d", i), Healthy: true})
	}
	return cluster.Node{ID: "n", Status: "ready", Eligible: true, Devices: []cluster.DeviceGroup{g}}
}

// countPlacer places jobs in ranked order while their GPUs fit the free ones (one node).
type countPlacer struct{}

func (countPlacer) Place(_ context.Context, _ *RoundState, snap *cluster.Snapshot, ranked []Ranked, _ Predictor) ([]cluster.Decision, PlaceStats, error) {
	busy := map[string]bool{}
	for _, a := range snap.Running {
		for _, id := range a.DeviceIDs {
			busy[id] = true
		}
	}
	var free []string
	for _, in := range snap.Nodes[0].Devices[0].Instances {
		if !busy[in.ID] {
			free = append(free, in.ID)
		}
	}
	var ds []cluster.Decision
	for _, r := range ranked {
		if r.Job.GPUs > len(free) {
			continue
		}
		ds = append(ds, cluster.Decision{Namespace: r.Job.Namespace, JobID: r.Job.ID, Group: r.Job.Group,
			Assign: []cluster.Assignment{{NodeID: "n", InstanceIDs: free[:r.Job.GPUs]}}})
		free = free[r.Job.GPUs:]
	}
	return ds, PlaceStats{}, nil
}

func pendingJob(id, group string, gpus int, submitted time.Duration, runtime time.Duration) cluster.Job {
	j := cluster.Job{Namespace: "default", ID: id, Group: group, GPUs: gpus, SubmitTime: t0.Add(-submitted)}
	j.Hetgpu.EstRuntime = runtime
	return j
}

func TestShadowTime(t *testing.T) {
	snap := &cluster.Snapshot{Now: t0, Nodes: []cluster.Node{node8()}, Running: []cluster.Alloc{
		{Namespace: "default", JobID: "a", Group: "g", NodeID: "n", DeviceIDs: []string{"g0", "g1", "g2", "g3"}, StartTime: t0.Add(-10 * time.Minute)},
		{Namespace: "default", JobID: "b", Group: "g", NodeID: "n", DeviceIDs: []string{"g4", "g5"}, StartTime: t0.Add(-time.Minute)},
	}, Preemptible: []cluster.Job{pendingJob("b", "g", 2, 0, 3*time.Hour)}}
	for _, tt := range []struct {
		need  int
		at    time.Duration
		extra int
		ok    bool
	}{
		{need: 2, at: 0, extra: 0, ok: true},                // free now
		{need: 5, at: 10 * time.Minute, extra: 1, ok: true}, // a ends as long again as it ran
		{need: 8, at: 3 * time.Hour, extra: 0, ok: true},    // b's estimate
		{need: 9, ok: false},                                // never
	} {
		at, extra, ok := shadowTime(snap, tt.need)
		if ok != tt.ok || (ok && (!at.Equal(t0.Add(tt.at)) || extra != tt.extra)) {
			t.Errorf("need %d: at %v extra %d ok %v, want +%v extra %d ok %v", tt.need, at.Sub(t0), extra, ok, tt.at, tt.extra, tt.ok)
		}
	}
}

// A gang that has waited past ReserveAfter and cannot be placed holds back the jobs that would
// delay it: a short job predicted to end before the GPUs free up still starts, a long one and
// one without an estimate wait. Without ReserveAfter all of them start.
func TestReservationBackfill(t *testing.T) {
	snap := func() *cluster.Snapshot {
		return &cluster.Snapshot{Now: t0, Nodes: []cluster.Node{node8()},
			Running: []cluster.Alloc{{Namespace: "default", JobID: "run", Group: "g", NodeID: "n", DeviceIDs: []string{"g0", "g1", "g2", "g3"},
				StartTime: t0.Add(-time.Hour)}},
			Pending: []cluster.Job{
				pendingJob("gang", "a", 4, 2*time.Hour, time.Hour), pendingJob("gang", "b", 4, 2*time.Hour, time.Hour),
				pendingJob("short", "g", 1, time.Minute, 30*time.Minute), pendingJob("long", "g", 1, time.Minute, 5*time.Hour),
				pendingJob("unknown", "g", 1, time.Minute, 0),
			}}
	}
	for _, tt := range []struct {
		name    string
		after   time.Duration
		decided []string
		held    []string
	}{
		{"reserving", 30 * time.Minute, []string{"short"}, []string{"default/long/g", "default/unknown/g"}},
		{"not waited long enough", 3 * time.Hour, []string{"long", "short", "unknown"}, nil},
		{"off", 0, []string{"long", "short", "unknown"}, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := Pipeline{Cluster: &fakeCluster{snap: snap()}, Ranker: &byID{}, Placer: countPlacer{}, ReserveAfter: tt.after}
			r, err := p.RunRound(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, d := range r.Decisions {
				got = append(got, d.JobID)
			}
			slices.Sort(got)
			if !slices.Equal(got, tt.decided) {
				t.Fatalf("decided %v, want %v", got, tt.decided)
			}
			if tt.held == nil {
				if r.Reservation != nil {
					t.Fatalf("reservation %+v, want none", r.Reservation)
				}
				return
			}
			res := r.Reservation
			if res == nil || res.Gang != "default/gang" || res.GPUs != 8 || !res.Until.Equal(t0.Add(time.Hour)) || !slices.Equal(res.Held, tt.held) {
				t.Fatalf("reservation %+v, want gang default/gang, 8 GPUs, until +1h, held %v", res, tt.held)
			}
		})
	}
}

// refPred predicts a fixed throughput per GPU type (0: unknown).
type refPred map[string]float64

func (p refPred) Predict(_ *cluster.Job, gpuType string, _ int) Estimate {
	return Estimate{Throughput: p[gpuType]}
}

// A decided job ends its hetgpu.runtime (on the reference type) scaled to the type it got by
// gpuspec.RuntimeOn, the rule the ranker's features and the explain page use; a job that has
// no estimate and has barely run is expected to run cluster.Unestimated longer.
func TestPredictedEndUsesSharedRuntimeRule(t *testing.T) {
	j := pendingJob("j", "g", 1, 0, 2*time.Hour)
	d := &cluster.Decision{PredThroughput: 40, Assign: []cluster.Assignment{{NodeID: "n", InstanceIDs: []string{"g0"}}}}
	for _, tc := range []struct {
		name string
		pred Predictor
		want time.Duration
	}{
		{"four times the reference's speed", refPred{gpuspec.ReferenceGPU: 10}, 30 * time.Minute},
		{"reference unknown", refPred{}, 2 * time.Hour},
		{"no predictor", nil, 2 * time.Hour},
	} {
		end, ok := predictedEnd(t0, &j, d, tc.pred)
		if !ok || end.Sub(t0) != tc.want {
			t.Errorf("%s: ends in %v (ok %v), want %v", tc.name, end.Sub(t0), ok, tc.want)
		}
		if tc.pred != nil {
			ref := tc.pred.Predict(&j, gpuspec.ReferenceGPU, 1).Throughput
			if want := time.Duration(gpuspec.RuntimeOn(float64(2*time.Hour), ref, d.PredThroughput)); end.Sub(t0) != want {
				t.Errorf("%s: %v, gpuspec.RuntimeOn says %v", tc.name, end.Sub(t0), want)
			}
		}
	}
	snap := &cluster.Snapshot{Now: t0, Nodes: []cluster.Node{node8()}, Running: []cluster.Alloc{
		{Namespace: "default", JobID: "a", Group: "g", NodeID: "n", DeviceIDs: []string{"g0", "g1", "g2", "g3", "g4", "g5", "g6", "g7"}, StartTime: t0.Add(-20 * time.Second)},
	}}
	if at, _, ok := shadowTime(snap, 1); !ok || at.Sub(t0) != cluster.Unestimated(20*time.Second) || at.Sub(t0) != time.Minute {
		t.Errorf("a job 20 s in without an estimate frees its GPUs in %v (ok %v), want cluster.Unestimated's minute", at.Sub(t0), ok)
	}
}
