package sched

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/hetgpu/hetgpu/model/cluster"
)

// holdersFirst is a queue stage whose order depends on what runs: jobs of namespaces that hold
// no GPU in the snapshot come first (a stand-in for "queues below their guarantee first").
type holdersFirst struct{ saw []int }

func (q *holdersFirst) Prepare(snap *cluster.Snapshot) *cluster.Snapshot { return snap }

func (q *holdersFirst) Order(_ *RoundState, snap *cluster.Snapshot, ranked []Ranked) []Ranked {
	q.saw = append(q.saw, len(snap.Running))
	holds := map[string]bool{}
	for _, a := range snap.Running {
		holds[a.Namespace] = true
	}
	out := slices.Clone(ranked)
	slices.SortStableFunc(out, func(a, b Ranked) int {
		ha, hb := holds[a.Job.Namespace], holds[b.Job.Namespace]
		switch {
		case !ha && hb:
			return -1
		case ha && !hb:
			return 1
		}
		return 0
	})
	return out
}

// TestQueuesOrderAfterPreemption: once preemptions changed what each queue holds, the queue
// stage orders the plan's placement order again on the snapshot after them, so that a queue
// the preemptions took below its guarantee gets its turn in this round.
func TestQueuesOrderAfterPreemption(t *testing.T) {
	mk := func(ns, id string) cluster.Job { j := job(id); j.Namespace = ns; return j }
	snap := &cluster.Snapshot{
		Running: []cluster.Alloc{
			{ID: "a1", Namespace: "team-a", JobID: "r1", Group: "g", NodeID: "n1", DeviceIDs: []string{"d1"}},
			{ID: "a2", Namespace: "team-b", JobID: "r2", Group: "g", NodeID: "n1", DeviceIDs: []string{"d2"}},
			{ID: "a3", Namespace: "team-c", JobID: "r3", Group: "g", NodeID: "n1", DeviceIDs: []string{"d3"}},
		},
		Pending:     []cluster.Job{mk("team-a", "p1"), mk("team-c", "p2")},
		Preemptible: []cluster.Job{mk("team-a", "r1")},
	}
	// stopAll stops r1 (the one preemptible job) and returns the reverse of the order it got:
	// before the preemption every namespace holds a GPU, so the rank order p1 p2 r1 stands and
	// the plan says r1 p2 p1.
	q := &holdersFirst{}
	pl := &recordPlacer{}
	p := Pipeline{Cluster: &fakeCluster{snap: snap}, Ranker: &byID{}, Placer: pl, Preemptor: stopAll{}, Queues: q}
	if _, err := p.RunRound(context.Background()); err != nil {
		t.Fatal(err)
	}
	// After r1 stopped, team-a holds nothing: its jobs (r1, p1) lead, team-c's p2 follows.
	if len(pl.got) != 1 || strings.Join(pl.got[0], " ") != "r1 p1 p2" {
		t.Fatalf("placer got %v, want [[r1 p1 p2]]", pl.got)
	}
	if !slices.Equal(q.saw, []int{3, 2}) {
		t.Fatalf("queue stage ordered snapshots with %v running allocations, want [3 2]", q.saw)
	}
}
