package store

import (
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/hetgpu/hetgpu/model/cluster"
)

func openTemp(t testing.TB, opts Options) (*Store, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "sidecar.db")
	s, err := Open(path, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s, path
}

func obsN(i int) cluster.Observation {
	return cluster.Observation{Namespace: "default", JobID: fmt.Sprintf("j%d", i), Group: "g", GPUType: "v100", GPUs: 1,
		Throughput: 10, RuntimeS: 60, Time: time.Date(2026, 1, 1, 0, 0, i, 0, time.UTC)}
}

// Each rule of the claim contract: equal claims and '/'-boundary prefixes conflict (either
// order), siblings and non-boundary prefixes do not, a record conflicts when any of its
// claims does, and records of one call see each other.
func TestClaimConflicts(t *testing.T) {
	for _, tt := range []struct {
		name   string
		stored []string
		claims []string
		dup    string
	}{
		{"equal", []string{"alloc/A/train"}, []string{"alloc/A/train"}, "alloc/A/train"},
		{"stored ancestor", []string{"alloc/A"}, []string{"alloc/A/train"}, "alloc/A"},
		{"stored descendant", []string{"alloc/A/train"}, []string{"alloc/A"}, "alloc/A/train"},
		{"sibling task", []string{"alloc/A/train"}, []string{"alloc/A/eval"}, ""},
		{"prefix not at a boundary", []string{"alloc/A"}, []string{"alloc/AB"}, ""},
		{"other allocation", []string{"alloc/A"}, []string{"alloc/B"}, ""},
		{"idempotency key", []string{"idem/k1"}, []string{"idem/k1"}, "idem/k1"},
		{"batch index under a key", []string{"idem/k1/0"}, []string{"idem/k1/1"}, ""},
		{"whole key vs batch index", []string{"idem/k1"}, []string{"idem/k1/3"}, "idem/k1"},
		{"any claim conflicts", []string{"idem/k1"}, []string{"alloc/Z", "idem/k1"}, "idem/k1"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s, _ := openTemp(t, Options{})
			t0 := time.Now()
			if out, err := s.AddObservations([]NewObservation{{Obs: obsN(1), Source: "driver", Claims: tt.stored}}, t0); err != nil || out[0].Duplicate {
				t.Fatalf("first: %+v %v", out, err)
			}
			out, err := s.AddObservations([]NewObservation{{Obs: obsN(2), Source: "driver", Claims: tt.claims}}, t0)
			if err != nil {
				t.Fatal(err)
			}
			if out[0].Duplicate != (tt.dup != "") || out[0].DuplicateOf != tt.dup {
				t.Errorf("outcome = %+v, want duplicate of %q", out[0], tt.dup)
			}
			want := 2
			if tt.dup != "" {
				want = 1
			}
			if n := s.ObservationCount(); n != want {
				t.Errorf("stored %d, want %d", n, want)
			}
		})
	}
}

func TestClaimsWithinOneCallAndContentHash(t *testing.T) {
	s, _ := openTemp(t, Options{})
	t0 := time.Now()
	out, err := s.AddObservations([]NewObservation{
		{Obs: obsN(1), Source: "driver", Claims: []string{"alloc/A"}},
		{Obs: obsN(2), Source: "driver", Claims: []string{"alloc/A/train"}}, // same allocation: duplicate
		{Obs: obsN(3), Source: "driver"},                                    // content hash
		{Obs: obsN(3), Source: "driver"},                                    // identical: duplicate
		{Obs: obsN(4), Source: "driver"},
	}, t0)
	if err != nil {
		t.Fatal(err)
	}
	dups := []bool{false, true, false, true, false}
	for i, o := range out {
		if o.Duplicate != dups[i] || (o.Seq == 0) != dups[i] {
			t.Errorf("record %d: %+v, want duplicate %v", i, o, dups[i])
		}
	}
	if n := s.ObservationCount(); n != 3 {
		t.Errorf("stored %d, want 3", n)
	}
}

// Whichever reporter comes first wins: the sidecar's record of a finished allocation
// ("alloc/A") and the driver's per-task record ("alloc/A/train"), in either order and across
// a restart; claims of records trimmed from the window go with them.
func TestClaimsAcrossRestartAndTrim(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sidecar.db")
	s, err := Open(path, Options{MaxObservations: 3})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	if _, err := s.AddObservations([]NewObservation{{Obs: obsN(1), Source: "driver", Claims: []string{"alloc/A/train"}}}, t0); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if s, err = Open(path, Options{MaxObservations: 3}); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	out, _ := s.AddObservations([]NewObservation{{Obs: obsN(2), Source: "sidecar", Claims: []string{"alloc/A"}}}, t0)
	if !out[0].Duplicate {
		t.Errorf("sidecar record after the driver's, across a restart: %+v, want duplicate", out[0])
	}
	for i := 10; i < 13; i++ {
		_, _ = s.AddObservations([]NewObservation{{Obs: obsN(i), Source: "driver"}}, t0)
	}
	out, _ = s.AddObservations([]NewObservation{{Obs: obsN(2), Source: "sidecar", Claims: []string{"alloc/A"}}}, t0)
	if out[0].Duplicate {
		t.Error("claim of a record trimmed from the window still blocks")
	}
}

// Concurrent single-record calls share transactions and each gets its own outcome.
func TestConcurrentAddsAllStoredOnce(t *testing.T) {
	s, _ := openTemp(t, Options{})
	var wg sync.WaitGroup
	errs := make(chan error, 400)
	for i := 0; i < 200; i++ {
		for rep := 0; rep < 2; rep++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := s.AddObservations([]NewObservation{{Obs: obsN(i), Source: "driver", Claims: []string{fmt.Sprintf("idem/k%d", i)}}}, time.Now())
				errs <- err
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := s.ObservationCount(); n != 200 {
		t.Errorf("stored %d, want 200 (each key once)", n)
	}
}
