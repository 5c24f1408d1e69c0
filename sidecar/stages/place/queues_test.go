package place

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/hetgpu/hetgpu/model/cluster"
)

// randomCaps draws queue caps over the bench namespaces: maxima of a queue's own namespaces
// (some per GPU type) and guarantee reserves (every namespace but one), tight enough to bind.
func randomCaps(rng *rand.Rand, snap *cluster.Snapshot) []cluster.GPUCap {
	var types []string
	seen := map[string]bool{}
	for _, n := range snap.Nodes {
		for _, g := range n.Devices {
			if !seen[g.GPUType] {
				seen[g.GPUType] = true
				types = append(types, g.GPUType)
			}
		}
	}
	var caps []cluster.GPUCap
	for i := 0; i < 1+rng.IntN(3); i++ {
		c := cluster.GPUCap{Name: fmt.Sprintf("cap-%d", i), GPUs: rng.IntN(24)}
		n := 1 + rng.IntN(2)
		for k := 0; k < n; k++ {
			c.Namespaces = append(c.Namespaces, benchNamespaces[rng.IntN(len(benchNamespaces))])
		}
		c.Except = rng.IntN(3) == 0
		if rng.IntN(3) == 0 {
			c.GPUType = types[rng.IntN(len(types))]
		}
		if c.Except {
			c.GPUs += 20
		}
		caps = append(caps, c)
	}
	return caps
}

// heldUnder counts, independently of the placer, the GPUs a cap counts among running
// allocations (run) and with the decisions added (all).
func heldUnder(snap *cluster.Snapshot, c cluster.GPUCap, ds []cluster.Decision) (run, all int) {
	member := func(ns string) bool {
		for _, n := range c.Namespaces {
			if n == ns {
				return !c.Except
			}
		}
		return c.Except
	}
	for _, a := range snap.Running {
		if member(a.Namespace) && (c.GPUType == "" || c.GPUType == a.GPUType) {
			run += len(a.DeviceIDs)
		}
	}
	all = run
	for _, d := range ds {
		if member(d.Namespace) && (c.GPUType == "" || c.GPUType == d.GPUType) {
			for _, a := range d.Assign {
				all += len(a.InstanceIDs)
			}
		}
	}
	return run, all
}

// TestQueueCapsHoldInEverySolution: on random clusters with random queue caps, every solver
// path (MILP, decomposition, greedy, every preset) keeps each cap: no new GPU beyond it, and
// none at all under a cap that running jobs already exceed. Verify accepts every answer and
// rejects one that breaks a cap.
func TestQueueCapsHoldInEverySolution(t *testing.T) {
	dec := Default()
	dec.DecomposeAbove = 1
	bound, placed := 0, 0
	onRandomSnapshots(t, map[string]Config{"auto-decomposed": dec}, 8, BenchSpec{Jobs: 40, GPUs: 96, Types: 3, Seed: 900},
		func(name string, cfg Config, seed uint64, snap *cluster.Snapshot, pl *Placer) {
			rng := rand.New(rand.NewPCG(seed, 77))
			snap.Caps = randomCaps(rng, snap)
			ranked, _ := FIFO{}.Rank(context.Background(), snap, NewPriorPredictor())
			ds, _, err := pl.Place(context.Background(), nil, snap, ranked, NewPriorPredictor())
			if err != nil {
				t.Fatal(err)
			}
			placed += len(ds)
			for _, c := range snap.Caps {
				run, all := heldUnder(snap, c, ds)
				if all > c.GPUs && all > run {
					t.Errorf("%s seed %d: cap %+v holds %d GPUs with the decisions (%d running)", name, seed, c, all, run)
				}
				if all == c.GPUs || (run >= c.GPUs && all == run) {
					bound++
				}
			}
			if err := Verify(snap, ds, cfg); err != nil {
				t.Errorf("%s seed %d: %v", name, seed, err)
			}
			// Verify must catch a broken cap: a cap of 0 on a namespace that got GPUs.
			if len(ds) > 0 {
				bad := *snap
				bad.Caps = []cluster.GPUCap{{Name: "queue broken", Namespaces: []string{ds[0].Namespace}}}
				if run, _ := heldUnder(&bad, bad.Caps[0], nil); run == 0 {
					if err := Verify(&bad, ds, cfg); err == nil {
						t.Errorf("%s seed %d: Verify accepted decisions beyond a cap of 0", name, seed)
					}
				}
			}
		})
	if bound == 0 || placed == 0 {
		t.Fatalf("%d binding caps, %d jobs placed: the property was not exercised", bound, placed)
	}
	t.Logf("%d binding caps, %d jobs placed", bound, placed)
}

// TestQueueCapRowsInTheMILP: the caps are rows of the model itself. Two jobs of 4 GPUs in one
// namespace under a cap of 4 on an empty node of 8: the LP of the full model (no greedy
// realization) places exactly one.
func TestQueueCapRowsInTheMILP(t *testing.T) {
	snap, err := RandomSnapshot(BenchSpec{Jobs: 2, GPUs: 8, Types: 1, Seed: 1, Busy: -1})
	if err != nil {
		t.Fatal(err)
	}
	for i := range snap.Pending {
		snap.Pending[i].Namespace, snap.Pending[i].GPUs, snap.Pending[i].GPUsPerNode = "team-a", 4, 0
		snap.Pending[i].Constraints, snap.Pending[i].DeviceConstraints = nil, nil
		snap.Pending[i].Hetgpu.MinThroughput = 0
	}
	for _, capGPUs := range []int{4, 8} {
		snap.Caps = []cluster.GPUCap{{Name: "queue team-a", Namespaces: []string{"team-a"}, GPUs: capGPUs}}
		cfg := Default()
		ranked, _ := FIFO{}.Rank(context.Background(), snap, NewPriorPredictor())
		m, st, err := newModel(cfg, nil, snap, ranked, NewPriorPredictor(), cfg.EnergyWeight)
		if err != nil {
			t.Fatal(err)
		}
		jobs := []int{0, 1}
		sc := m.prepareScope(jobs, nil, st, nil)
		cols := sc.columns()
		mod, _ := m.buildMILP(sc, cols, st)
		res, err := m.runHiGHS(mod, farFuture(), nil)
		if err != nil || !res.HasPrimal {
			t.Fatalf("cap %d: MILP: %v", capGPUs, err)
		}
		gpus := 0.0
		for k, c := range cols {
			gpus += res.X[k] * float64(m.jobs[sc.opts[c].job].g)
		}
		if want := float64(capGPUs); gpus < want-1e-6 || gpus > want+1e-6 {
			t.Errorf("cap %d: the MILP places %.2f GPUs of team-a, want %v", capGPUs, gpus, want)
		}
	}
}

func farFuture() time.Time { return time.Now().Add(time.Minute) }
