package store

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fill writes n observations and a decision, and returns the file's size.
func fill(t *testing.T, path string, n int) int64 {
	t.Helper()
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	// In many transactions, as a sidecar writes them: the records spread over the file.
	for i := 0; i < n; i += 50 {
		var batch []NewObservation
		for k := i; k < min(n, i+50); k++ {
			batch = append(batch, NewObservation{Obs: obsN(k), Source: "driver"})
		}
		if _, err := s.AddObservations(batch, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.PutDecision(&DecisionRecord{JobKey: "default/j/g", Status: StatusPinned}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// Each kind of damage gives its documented outcome at Open: never a crash; a truncated or
// overwritten file is a CorruptError naming the problem and the commands; an empty file is
// moved aside with a warning and a fresh one started. Repair then keeps the damaged file and
// recovers what it can.
func TestCorruptStateFile(t *testing.T) {
	for _, tt := range []struct {
		name    string
		damage  func(t *testing.T, path string, size int64)
		corrupt bool
		// minKept is how many of the 2000 observations repair must recover.
		minKept int
	}{
		{"truncated", func(t *testing.T, path string, size int64) {
			if err := os.Truncate(path, 100_000); err != nil {
				t.Fatal(err)
			}
		}, true, 100},
		{"random bytes inside", func(t *testing.T, path string, size int64) {
			f, err := os.OpenFile(path, os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			junk := make([]byte, 64<<10)
			r := rand.New(rand.NewPCG(1, 2))
			for i := range junk {
				junk[i] = byte(r.Uint32())
			}
			if _, err := f.WriteAt(junk, size/3); err != nil {
				t.Fatal(err)
			}
			f.Close()
		}, true, 100},
		{"meta pages overwritten", func(t *testing.T, path string, size int64) {
			f, _ := os.OpenFile(path, os.O_WRONLY, 0)
			_, _ = f.WriteAt(make([]byte, 8192), 0)
			f.Close()
		}, true, 1000},
		{"empty", func(t *testing.T, path string, size int64) {
			if err := os.Truncate(path, 0); err != nil {
				t.Fatal(err)
			}
		}, false, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "sidecar.db")
			size := fill(t, path, 2000)
			tt.damage(t, path, size)
			s, err := Open(path, Options{})
			if !tt.corrupt {
				if err != nil {
					t.Fatalf("open: %v", err)
				}
				if n := s.ObservationCount(); n != 0 {
					t.Errorf("fresh file holds %d observations", n)
				}
				s.Close()
				if m, _ := filepath.Glob(path + ".empty-*"); len(m) != 1 {
					t.Errorf("empty file not kept aside: %v", m)
				}
				return
			}
			if err == nil {
				s.Close()
				t.Fatal("damaged file opened without an error")
			}
			var ce *CorruptError
			if !errors.As(err, &ce) || !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "hetgpu state repair") {
				t.Fatalf("open error = %v, want a CorruptError naming `hetgpu state repair`", err)
			}
			rr, err := Repair(path)
			if err != nil {
				t.Fatalf("repair: %v", err)
			}
			if _, err := os.Stat(rr.KeptAs); err != nil {
				t.Errorf("damaged file not kept: %v", err)
			}
			s, err = Open(path, Options{})
			if err != nil {
				t.Fatalf("open after repair: %v", err)
			}
			defer s.Close()
			n := s.ObservationCount()
			t.Logf("repair kept %d of 2000 observations (%d by scanning), lost %v", n, rr.Scanned, rr.Lost)
			if n < tt.minKept || n > 2000 {
				t.Errorf("repair kept %d of 2000 observations, want at least %d (report %+v)", n, tt.minKept, rr)
			}
			// Recovered records keep their claims: the same record again is a duplicate.
			var first ObservationRecord
			_ = s.Observations(func(r ObservationRecord) error {
				if first.Seq == 0 {
					first = r
				}
				return nil
			})
			out, err := s.AddObservations([]NewObservation{{Obs: first.Obs, Source: "driver"}}, time.Now())
			if err != nil || !out[0].Duplicate {
				t.Errorf("re-sent recovered record: %+v %v, want duplicate", out, err)
			}
			// New records continue after the recovered sequence numbers.
			out, _ = s.AddObservations([]NewObservation{{Obs: obsN(99999), Source: "driver"}}, time.Now())
			if out[0].Seq <= first.Seq {
				t.Errorf("new seq %d not after recovered %d", out[0].Seq, first.Seq)
			}
		})
	}
}

func TestCheckHealthyAndMissing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sidecar.db")
	r, err := Check(path)
	if err != nil || !r.Missing || !r.OK() {
		t.Fatalf("missing: %+v %v", r, err)
	}
	fill(t, path, 50)
	r, err = Check(path)
	if err != nil || !r.OK() || r.Records["observations"] != 50 {
		t.Fatalf("healthy: %+v %v", r, err)
	}
	rr, err := Repair(path)
	if err != nil || rr.KeptAs != "" {
		t.Errorf("repair of a healthy file: %+v %v, want nothing done", rr, err)
	}
}

// Random damage of a few bytes anywhere never crashes or hangs Check, Open or Repair (a
// corrupted overflow count once made bbolt's own check loop for billions of steps).
func TestRandomDamageNeverHangs(t *testing.T) {
	path := filepath.Join(t.TempDir(), "seed.db")
	fill(t, path, 60)
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(3, 4))
	damaged := 0
	for i := 0; i < 400; i++ {
		data := bytes.Clone(good)
		for k := 0; k < 1+r.IntN(4); k++ {
			data[r.IntN(len(data))] ^= byte(1 + r.IntN(255))
		}
		p := filepath.Join(t.TempDir(), "sidecar.db")
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() {
			s, err := Open(p, Options{})
			if err == nil {
				s.Close()
				done <- nil
				return
			}
			damaged++
			if !errors.Is(err, ErrCorrupt) {
				done <- fmt.Errorf("open: %w, want ErrCorrupt", err)
				return
			}
			if _, err := Repair(p); err != nil {
				done <- fmt.Errorf("repair: %w", err)
				return
			}
			s, err = Open(p, Options{})
			if err == nil {
				s.Close()
			}
			done <- err
		}()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("case %d: %v", i, err)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("case %d: Open or Repair hung", i)
		}
	}
	t.Logf("%d of 400 damaged files refused and repaired", damaged)
}
