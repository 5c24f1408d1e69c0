package sched

import (
	"context"
	"slices"
	"testing"

	"github.com/hetgpu/hetgpu/model/cluster"
)

// fakeCluster records what the pipeline asks of it.
type fakeCluster struct {
	snap      *cluster.Snapshot
	preempted []string
	pinned    []string
}

func (f *fakeCluster) Snapshot(context.Context) (*cluster.Snapshot, error) { return f.snap, nil }

func (f *fakeCluster) Pin(_ context.Context, ds []cluster.Decision) ([]cluster.PinResult, error) {
	var out []cluster.PinResult
	for _, d := range ds {
		f.pinned = append(f.pinned, d.JobID)
		out = append(out, cluster.PinResult{JobKey: d.JobKey(), Applied: true})
	}
	return out, nil
}

func (f *fakeCluster) Preempt(_ context.Context, ps []cluster.Preemption) ([]cluster.PinResult, error) {
	var out []cluster.PinResult
	for _, p := range ps {
		f.preempted = append(f.preempted, p.JobID)
		out = append(out, cluster.PinResult{JobKey: p.JobKey(), Applied: p.JobID != "refused"})
	}
	return out, nil
}

// byID ranks jobs by their ID, alphabetically.
type byID struct{ seen []string }

func (r *byID) Rank(_ context.Context, snap *cluster.Snapshot, _ Predictor) ([]Ranked, error) {
	var out []Ranked
	r.seen = r.seen[:0]
	for i := range snap.Pending {
		out = append(out, Ranked{Job: &snap.Pending[i]})
		r.seen = append(r.seen, snap.Pending[i].ID)
	}
	slices.SortFunc(out, func(a, b Ranked) int {
		if a.Job.ID < b.Job.ID {
			return -1
		}
		return 1
	})
	return out, nil
}

// stopAll preempts every running job the ranker placed before a pending one, plus "refused".
type stopAll struct{}

func (stopAll) Plan(_ context.Context, _ *RoundState, snap *cluster.Snapshot, ranked []Ranked, _ Predictor) (Plan, error) {
	var p Plan
	for i := range snap.Preemptible {
		j := snap.Preemptible[i]
		p.Preempt = append(p.Preempt, cluster.Preemption{Namespace: j.Namespace, JobID: j.ID, Group: j.Group, Reason: "test"})
	}
	// Placement order: reverse rank, to see that the placer gets the plan's order.
	for i := len(ranked) - 1; i >= 0; i-- {
		p.Order = append(p.Order, ranked[i])
	}
	return p, nil
}

// recordPlacer places every job it is given, in order.
type recordPlacer struct{ got [][]string }

func (r *recordPlacer) Place(_ context.Context, _ *RoundState, snap *cluster.Snapshot, ranked []Ranked, _ Predictor) ([]cluster.Decision, PlaceStats, error) {
	var ids []string
	var ds []cluster.Decision
	for _, x := range ranked {
		ids = append(ids, x.Job.ID)
		ds = append(ds, cluster.Decision{Namespace: x.Job.Namespace, JobID: x.Job.ID, Group: x.Job.Group})
	}
	r.got = append(r.got, ids)
	return ds, PlaceStats{}, nil
}

func job(id string) cluster.Job {
	return cluster.Job{Namespace: "default", ID: id, Group: "g", GPUs: 1}
}

func TestRunRoundPreempts(t *testing.T) {
	snap := &cluster.Snapshot{
		Running: []cluster.Alloc{
			{ID: "a1", Namespace: "default", JobID: "r1", Group: "g", NodeID: "n1", DeviceIDs: []string{"d1"}},
			{ID: "a2", Namespace: "default", JobID: "refused", Group: "g", NodeID: "n1", DeviceIDs: []string{"d2"}},
		},
		Pending:     []cluster.Job{job("p1")},
		Preemptible: []cluster.Job{job("r1"), job("refused")},
	}
	fc := &fakeCluster{snap: snap}
	rk := &byID{}
	pl := &recordPlacer{}
	p := Pipeline{Cluster: fc, Ranker: rk, Placer: pl, Preemptor: stopAll{}}
	r, err := p.RunRound(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(fc.preempted, []string{"r1", "refused"}) {
		t.Fatalf("preempted %v", fc.preempted)
	}
	// The ranker saw pending and preemptible jobs together, once.
	if !slices.Equal(rk.seen, []string{"p1", "r1", "refused"}) {
		t.Fatalf("ranker saw %v", rk.seen)
	}
	// The placer got the plan's order, without the job whose preemption was refused.
	if len(pl.got) != 1 || !slices.Equal(pl.got[0], []string{"r1", "p1"}) {
		t.Fatalf("placer got %v, want [[r1 p1]]", pl.got)
	}
	if len(r.Snapshot.Running) != 1 || r.Snapshot.Running[0].JobID != "refused" {
		t.Fatalf("running after preemption: %+v", r.Snapshot.Running)
	}
	if len(r.Preempted) != 2 || !r.Preempted[0].Applied || r.Preempted[1].Applied {
		t.Fatalf("preempted results %+v", r.Preempted)
	}
	// The snapshot the backend returned is not modified.
	if len(snap.Running) != 2 || len(snap.Pending) != 1 {
		t.Fatalf("backend snapshot modified: %d running, %d pending", len(snap.Running), len(snap.Pending))
	}
}

func TestDecideNeverPreempts(t *testing.T) {
	snap := &cluster.Snapshot{Pending: []cluster.Job{job("p1")}, Preemptible: []cluster.Job{job("r1")}}
	fc := &fakeCluster{snap: snap}
	pl := &recordPlacer{}
	p := Pipeline{Cluster: fc, Ranker: &byID{}, Placer: pl, Preemptor: stopAll{}}
	if _, err := p.Decide(context.Background(), snap); err != nil {
		t.Fatal(err)
	}
	if len(fc.preempted) != 0 || !slices.Equal(pl.got[0], []string{"p1"}) {
		t.Fatalf("shadow decide preempted %v, placed %v", fc.preempted, pl.got)
	}
}

type oneByOne struct{ calls int }

func (l *oneByOne) Observe(context.Context, cluster.Observation) error { l.calls++; return nil }

type batched struct {
	oneByOne
	batches []int
}

func (l *batched) ObserveAll(_ context.Context, obs []cluster.Observation) error {
	l.batches = append(l.batches, len(obs))
	return nil
}

func TestObserveAll(t *testing.T) {
	obs := make([]cluster.Observation, 3)
	a := &oneByOne{}
	if err := ObserveAll(context.Background(), a, obs); err != nil || a.calls != 3 {
		t.Fatalf("plain learner: %d calls, %v", a.calls, err)
	}
	b := &batched{}
	if err := ObserveAll(context.Background(), b, obs); err != nil || b.calls != 0 || !slices.Equal(b.batches, []int{3}) {
		t.Fatalf("batch learner: %d single calls, batches %v, %v", b.calls, b.batches, err)
	}
}
