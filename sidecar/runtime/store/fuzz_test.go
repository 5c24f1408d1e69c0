package store

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// FuzzOpenDamagedFile: whatever bytes the state file holds, Check and Open answer (a report,
// a CorruptError, or a working store) and never crash the process.
func FuzzOpenDamagedFile(f *testing.F) {
	dir := f.TempDir()
	path := filepath.Join(dir, "seed.db")
	s, err := Open(path, Options{})
	if err != nil {
		f.Fatal(err)
	}
	recs := make([]NewObservation, 40)
	for i := range recs {
		recs[i] = NewObservation{Obs: obsN(i), Source: "driver"}
	}
	if _, err := s.AddObservations(recs, time.Now()); err != nil {
		f.Fatal(err)
	}
	s.Close()
	good, err := os.ReadFile(path)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good, 0, byte(0))
	f.Add(good[:len(good)/2], 0, byte(0))
	f.Add(good, 4096+16, byte(0xff))
	f.Add(good, 3*4096+20, byte(0x7f))
	f.Fuzz(func(t *testing.T, data []byte, at int, b byte) {
		if len(data) > 1<<20 {
			return
		}
		data = append([]byte(nil), data...)
		if at >= 0 && at < len(data) {
			data[at] ^= b
		}
		p := filepath.Join(t.TempDir(), "sidecar.db")
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		rep, err := Check(p)
		if err != nil {
			return
		}
		s, err := Open(p, Options{})
		if err == nil {
			if !rep.OK() && !rep.Empty {
				t.Fatalf("opened a file Check found damaged: %v", rep.Problems)
			}
			_ = s.Observations(func(ObservationRecord) error { return nil })
			s.Close()
		}
	})
}
