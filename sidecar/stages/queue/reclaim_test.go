package queue

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/hetgpu/hetgpu/model/cluster"
	"github.com/hetgpu/hetgpu/sidecar/sched"
	"github.com/hetgpu/hetgpu/sidecar/stages/place"
	"github.com/hetgpu/hetgpu/sidecar/stages/preempt"
)

// fakeCluster serves one snapshot, applies every pin and preemption, and records them.
type fakeCluster struct {
	snap      *cluster.Snapshot
	preempted []cluster.Preemption
}

func (f *fakeCluster) Snapshot(context.Context) (*cluster.Snapshot, error) { return f.snap, nil }

func (f *fakeCluster) Pin(_ context.Context, ds []cluster.Decision) ([]cluster.PinResult, error) {
	out := make([]cluster.PinResult, len(ds))
	for i := range ds {
		out[i] = cluster.PinResult{JobKey: ds[i].JobKey(), Applied: true}
	}
	return out, nil
}

func (f *fakeCluster) Preempt(_ context.Context, ps []cluster.Preemption) ([]cluster.PinResult, error) {
	f.preempted = append(f.preempted, ps...)
	out := make([]cluster.PinResult, len(ps))
	for i := range ps {
		out[i] = cluster.PinResult{JobKey: ps[i].JobKey(), Applied: true}
	}
	return out, nil
}

var nsNames = []string{"a", "b", "c", "other"}

// randomRound is a crowded cluster of 6 nodes of 8 A100s with running jobs of the four
// namespaces (most preemptible, some of two groups: gangs) and pending ones.
func randomRound(rng *rand.Rand) *cluster.Snapshot {
	snap := &cluster.Snapshot{Now: t0}
	for n := 0; n < 6; n++ {
		snap.Nodes = append(snap.Nodes, node(fmt.Sprintf("n%d", n), "a100", 8))
	}
	for n := range snap.Nodes {
		free := 8
		for free > 0 && rng.IntN(5) > 0 {
			g := min(free, 1<<rng.IntN(3))
			ns := nsNames[rng.IntN(len(nsNames))]
			id := fmt.Sprintf("run-%d-%d", n, free)
			groups := 1 + rng.IntN(2)
			for k := 0; k < groups && free >= g; k++ {
				a := alloc(ns, id, snap.Nodes[n].ID, "a100", 8-free, g, t0.Add(-time.Duration(1+rng.IntN(600))*time.Minute))
				a.Group = fmt.Sprintf("g%d", k)
				snap.Running = append(snap.Running, a)
				if rng.IntN(4) > 0 {
					snap.Preemptible = append(snap.Preemptible, cluster.Job{Namespace: ns, ID: id, Group: a.Group, GPUs: g,
						DeviceName: "nvidia/gpu", SubmitTime: a.StartTime, Hetgpu: cluster.Annotations{Preemptible: true, EstRuntime: time.Hour}})
				}
				free -= g
			}
		}
	}
	for i := 0; i < 4+rng.IntN(12); i++ {
		snap.Pending = append(snap.Pending, cluster.Job{Namespace: nsNames[rng.IntN(3)], ID: fmt.Sprintf("wait-%d", i), Group: "g",
			GPUs: 1 << rng.IntN(4), DeviceName: "nvidia/gpu", SubmitTime: t0.Add(-time.Duration(i) * time.Minute),
			Hetgpu: cluster.Annotations{EstRuntime: 30 * time.Minute}})
	}
	return snap
}

// TestReclaimProperty: with queues, rounds on random crowded clusters (preemption planner,
// MILP placer) preempt only borrowed preemptible jobs, never a job its queue's guarantee
// covers (but to move it: then it is placed again in the round), stop gangs whole, and keep
// every cap; and reclaims do happen.
func TestReclaimProperty(t *testing.T) {
	set, err := New(Config{Queues: []Spec{
		{Name: "a", Namespaces: []string{"a"}, Guarantee: 16, Max: 32},
		{Name: "b", Namespaces: []string{"b"}, Guarantee: 12},
		{Name: "c", Namespaces: []string{"c"}, Guarantee: 8, Weight: 2},
	}})
	if err != nil {
		t.Fatal(err)
	}
	guar := map[string]int{"a": 16, "b": 12, "c": 8}
	pc := preempt.Default()
	pc.MinRun = 0
	planner, err := preempt.New(pc)
	if err != nil {
		t.Fatal(err)
	}
	pl, err := place.New(place.Default(), nil)
	if err != nil {
		t.Fatal(err)
	}
	reclaims, ownQueue, moved := 0, 0, 0
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, 18))
		snap := randomRound(rng)
		fc := &fakeCluster{snap: snap}
		p := sched.Pipeline{Cluster: fc, Ranker: place.FIFO{}, Predictor: place.NewPriorPredictor(), Placer: pl, Preemptor: planner, Queues: set}
		r, err := p.RunRound(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		preemptible := map[string]bool{}
		for _, j := range snap.Preemptible {
			preemptible[j.Key()] = true
		}
		type grp struct {
			gpus  int
			start time.Time
		}
		groups := map[string]*grp{}
		for _, a := range snap.Running {
			k := a.Namespace + "/" + a.JobID + "/" + a.Group
			if groups[k] == nil {
				groups[k] = &grp{start: a.StartTime}
			}
			groups[k].gpus += len(a.DeviceIDs)
		}
		placed := map[string]bool{}
		for _, d := range r.Decisions {
			placed[d.JobKey()] = true
		}
		stopped := map[string]bool{}
		for _, pr := range fc.preempted {
			stopped[pr.JobKey()] = true
		}
		for _, pr := range fc.preempted {
			k := pr.JobKey()
			if !preemptible[k] {
				t.Errorf("seed %d: %s preempted but not preemptible", seed, k)
			}
			// Borrowed: the queue's groups that may not stop, or started earlier, fill its
			// guarantee without this one.
			before := 0
			for ok, g := range groups {
				if ok == k || !strings.HasPrefix(ok, pr.Namespace+"/") {
					continue
				}
				if !preemptible[ok] || g.start.Before(groups[k].start) || (g.start.Equal(groups[k].start) && ok < k) {
					before += g.gpus
				}
			}
			// A job within its queue's guarantee may only make room for its own queue (one GPU
			// type: no job moves to faster GPUs here), or move to make room for another queue's
			// job: then it is placed again in the same round, so its queue keeps what it held.
			if before < guar[pr.Namespace] && strings.HasPrefix(pr.Reason, "moving within its queue's guarantee") {
				if !placed[k] {
					t.Errorf("seed %d: %s moved (%s) but not placed again in the round", seed, k, pr.Reason)
				}
				moved++
				continue
			}
			if before < guar[pr.Namespace] {
				own := false
				for _, j := range snap.Pending {
					own = own || j.Namespace == pr.Namespace
				}
				if !own {
					t.Errorf("seed %d: %s preempted within queue %s's guarantee (%d GPUs before it, guarantee %d) with no job of its queue waiting", seed, k, pr.Namespace, before, guar[pr.Namespace])
				} else {
					ownQueue++
				}
				continue
			}
			// Whole gangs: every running group of the job is stopped too.
			for ok := range groups {
				if strings.HasPrefix(ok, pr.Namespace+"/"+pr.JobID+"/") && !stopped[ok] {
					t.Errorf("seed %d: %s preempted but its gang's group %s keeps running", seed, k, ok)
				}
			}
			if guar[pr.Namespace] > 0 {
				reclaims++
			}
		}
		if err := place.Verify(r.Snapshot, r.Decisions, place.Default()); err != nil {
			t.Errorf("seed %d: %v", seed, err)
		}
		if r.PartialGangPins != 0 {
			t.Errorf("seed %d: %d gangs pinned in part", seed, r.PartialGangPins)
		}
	}
	if reclaims == 0 || moved == 0 {
		t.Fatalf("%d jobs of queues with a guarantee reclaimed, %d moved: the property was not exercised", reclaims, moved)
	}
	t.Logf("%d preemptions of borrowed jobs, %d of guaranteed jobs for their own queue, %d moved", reclaims, ownQueue, moved)
}
