package place

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/hetgpu/hetgpu/model/cluster"
	"github.com/hetgpu/hetgpu/sidecar/sched"
)

// staticCluster serves one snapshot and applies every pin.
type staticCluster struct{ snap *cluster.Snapshot }

func (s staticCluster) Snapshot(context.Context) (*cluster.Snapshot, error) { return s.snap, nil }

func (s staticCluster) Pin(_ context.Context, ds []cluster.Decision) ([]cluster.PinResult, error) {
	out := make([]cluster.PinResult, len(ds))
	for i := range ds {
		out[i] = cluster.PinResult{JobKey: ds[i].JobKey(), Applied: true}
	}
	return out, nil
}

// TestGangsWithThePlacer is the gang property with the real placer (every preset, the
// decomposition too) on random crowded clusters whose pending groups are bunched into jobs of
// 1 to 4 groups: no round decides a gang in part, every answer passes Verify, and gangs are
// deferred (the property is exercised).
func TestGangsWithThePlacer(t *testing.T) {
	dec, _ := Preset("hetgpu")
	dec.DecomposeAbove = 1
	deferred, decided := 0, 0
	onRandomSnapshots(t, map[string]Config{"decomposed": dec}, 6, BenchSpec{Jobs: 48, GPUs: 64, Types: 3, Seed: 300},
		func(name string, cfg Config, seed uint64, snap *cluster.Snapshot, pl *Placer) {
			rng := rand.New(rand.NewPCG(seed, 18))
			for i := 0; i < len(snap.Pending); {
				n := 1 + rng.IntN(4)
				id := fmt.Sprintf("gang-%d", i)
				for k := 0; k < n && i < len(snap.Pending); k++ {
					snap.Pending[i].ID, snap.Pending[i].Group = id, fmt.Sprintf("g%d", k)
					i++
				}
			}
			p := sched.Pipeline{Cluster: staticCluster{snap}, Ranker: FIFO{}, Placer: pl}
			r, err := p.RunRound(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			gangs := sched.GangsOf(snap.Pending)
			if part := sched.PartialGangs(gangs, r.Decisions); len(part) > 0 || r.PartialGangPins != 0 {
				t.Errorf("%s seed %d: gangs decided in part %v, pinned in part %d", name, seed, part, r.PartialGangPins)
			}
			if err := Verify(snap, r.Decisions, cfg); err != nil {
				t.Errorf("%s seed %d: %v", name, seed, err)
			}
			deferred += len(r.DeferredGangs)
			decided += len(r.Decisions)
		})
	if deferred == 0 || decided == 0 {
		t.Fatalf("%d gangs deferred, %d groups decided: the property was not exercised", deferred, decided)
	}
	t.Logf("%d gangs deferred, %d groups decided", deferred, decided)
}
