package app

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hetgpu/hetgpu/model/cluster"
	"github.com/hetgpu/hetgpu/sidecar/runtime/service"
	"github.com/hetgpu/hetgpu/sidecar/runtime/store"
	"github.com/hetgpu/hetgpu/sidecar/stages/predict"
)

func runObs(i int) cluster.Observation {
	return cluster.Observation{Namespace: "default", JobID: fmt.Sprintf("job-%d", i), Group: "train", Task: "train",
		AllocID: fmt.Sprintf("alloc-%d", i), ModelName: "ResNet-50", BatchSize: 64, GPUType: "v100", GPUs: 1,
		Throughput: 4 + float64(i%3)*0.1, RuntimeS: 600, Time: time.Date(2026, 1, 1, 0, 0, i, 0, time.UTC)}
}

// fillState writes n learnable runs into a state directory's store and catalog, as a
// sidecar learning them would.
func fillState(t *testing.T, dir string, n int) {
	t.Helper()
	st, err := store.Open(filepath.Join(dir, StateFile), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	pred, err := predict.New(predict.Options{CatalogPath: filepath.Join(dir, CatalogFile), ClipFactor: predict.ClipFactor})
	if err != nil {
		t.Fatal(err)
	}
	var recs []store.NewObservation
	for i := 0; i < n; i++ {
		recs = append(recs, store.NewObservation{Obs: runObs(i), Source: "driver", Claims: []string{"alloc/" + runObs(i).AllocID}})
	}
	if _, err := st.AddObservations(recs, time.Now()); err != nil {
		t.Fatal(err)
	}
	if n, err := service.Replay(context.Background(), st, pred, 0, nil); err != nil || n != len(recs) {
		t.Fatalf("learned %d of %d: %v", n, len(recs), err)
	}
}

// Each damage to a state directory: check names it; repair fixes it, keeping the damaged
// file, and rebuilds the catalog from the store.
func TestStateCheckAndRepair(t *testing.T) {
	for _, tt := range []struct {
		name   string
		damage func(dir string) error
		// catalog: whether the rebuilt catalog must hold every run.
		catalogRuns int
	}{
		{"catalog altered in the middle", func(dir string) error {
			p := filepath.Join(dir, CatalogFile)
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			i := strings.Index(string(b), `"throughput":4`)
			b[i+len(`"throughput":`)] = '9'
			return os.WriteFile(p, b, 0o644)
		}, 300},
		{"store truncated", func(dir string) error {
			return os.Truncate(filepath.Join(dir, StateFile), 40_000)
		}, -1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			fillState(t, dir, 300)
			rep, err := CheckState(dir)
			if err != nil || !rep.OK() || rep.Catalog.Records != 300 || rep.Catalog.LearnedThrough != 300 {
				t.Fatalf("healthy state: %+v %v", rep, err)
			}
			if err := tt.damage(dir); err != nil {
				t.Fatal(err)
			}
			if rep, err = CheckState(dir); err != nil || rep.OK() {
				t.Fatalf("damaged state passes the check: %+v %v", rep, err)
			}
			rr, err := RepairState(context.Background(), dir, PredictorConfig{}, false, nil)
			if err != nil {
				t.Fatal(err)
			}
			if !rr.Rebuilt || rr.CatalogKeptAs == "" {
				t.Errorf("catalog not rebuilt: %+v", rr)
			}
			if rep, err = CheckState(dir); err != nil || !rep.OK() {
				t.Fatalf("after repair: %+v %v", rep, err)
			}
			if tt.catalogRuns > 0 && rep.Catalog.Records != tt.catalogRuns {
				t.Errorf("rebuilt catalog holds %d runs, want %d", rep.Catalog.Records, tt.catalogRuns)
			}
			if rep.Catalog.Records != rr.CatalogRuns || rep.Store.Records["observations"] < rr.CatalogRuns {
				t.Errorf("catalog %d runs, store %v, repair said %d", rep.Catalog.Records, rep.Store.Records, rr.CatalogRuns)
			}
		})
	}
}

// A sidecar started on a state directory whose catalog was deleted (or lost runs in a crash
// before learning them) learns the stored runs again, and says so.
func TestSidecarReplaysStoredRunsIntoMissingCatalog(t *testing.T) {
	t.Setenv("NOMAD_ADDR", "")
	c := simConfig(t, `
listen = "127.0.0.1:0"
simulator {
  trace = "synthetic:jobs=5,rate=3600,seed=3"
}
`)
	fillState(t, filepath.Join(c.StateDir, "simulated"), 50)
	if err := os.Remove(filepath.Join(c.StateDir, "simulated", CatalogFile)); err != nil {
		t.Fatal(err)
	}
	var log strings.Builder
	s, err := New(c, &log)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Store.Close()
	recs, _, err := predict.ReadCatalogFile(filepath.Join(c.StateDir, "simulated", CatalogFile))
	if err != nil || len(recs) != 50 {
		t.Fatalf("catalog after start holds %d runs (%v), want the 50 stored", len(recs), err)
	}
	if !strings.Contains(log.String(), "learned them again from the store") {
		t.Errorf("replay not logged:\n%s", log.String())
	}
}

// A replay into an empty catalog gives it only the newest window of stored runs.
func TestReplayOnlyTheWindow(t *testing.T) {
	dir := t.TempDir()
	fillState(t, dir, 50)
	st, err := store.Open(filepath.Join(dir, StateFile), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	pred, err := predict.New(predict.Options{CatalogPath: filepath.Join(dir, "other.jsonl"), Catalog: predict.CatalogOptions{Window: 20}})
	if err != nil {
		t.Fatal(err)
	}
	n, err := service.Replay(context.Background(), st, pred, 0, nil)
	if err != nil || n != 20 {
		t.Fatalf("replayed %d (%v), want the newest 20", n, err)
	}
	if seq, _ := pred.LearnedThrough(); seq != 50 {
		t.Errorf("learned through %d, want 50", seq)
	}
}

// Runs learned out of order (concurrent requests), then a crash: the one stored but not
// learned, below the highest learned, is learned at the next start, and nothing twice.
func TestReplayFillsAGapBelowTheNewest(t *testing.T) {
	t.Setenv("NOMAD_ADDR", "")
	c := simConfig(t, "listen = \"127.0.0.1:0\"\nsimulator {\n  trace = \"synthetic:jobs=5,rate=3600,seed=3\"\n}\n")
	dir := filepath.Join(c.StateDir, "simulated")
	fillState(t, dir, 50)
	// Drop the run with sequence number 25 from the catalog, as a crash between storing it
	// and learning it (after 26..50 were learned) leaves it.
	p := filepath.Join(dir, CatalogFile)
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	var kept []string
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if !strings.Contains(l, `"seq":25,`) {
			kept = append(kept, l)
		}
	}
	if len(kept) != 49 {
		t.Fatalf("catalog lines %d, want 49", len(kept))
	}
	if err := os.WriteFile(p, []byte(strings.Join(kept, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := New(c, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Store.Close()
	recs, _, err := predict.ReadCatalogFile(p)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[uint64]int{}
	for _, r := range recs {
		seen[r.Seq]++
	}
	if len(recs) != 50 || seen[25] != 1 {
		t.Errorf("catalog holds %d runs, seq 25 %d times; want 50 and once", len(recs), seen[25])
	}
}
