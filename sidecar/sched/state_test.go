package sched

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/hetgpu/hetgpu/model/cluster"
)

// A round compiles each job's constraints once, whoever asks and however often; a nil state
// compiles afresh every time and keeps nothing.
func TestRoundStateCompilesOnce(t *testing.T) {
	good := cluster.Job{Namespace: "default", ID: "a", Group: "train", DeviceName: "nvidia/gpu"}
	bad := cluster.Job{Namespace: "default", ID: "b", Group: "train"} // no device name: an error
	tests := []struct {
		name    string
		job     *cluster.Job
		wantErr bool
	}{
		{"compiles", &good, false},
		{"error kept", &bad, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := NewRoundState(nil)
			var mu sync.Mutex
			n := 0
			st.OnCompile(func(key string) {
				mu.Lock()
				defer mu.Unlock()
				if key != tt.job.Key() {
					t.Errorf("compiled %s, want %s", key, tt.job.Key())
				}
				n++
			})
			var wg sync.WaitGroup
			for range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					cj, err := st.Compiled(tt.job)
					if (err != nil) != tt.wantErr || (cj == nil) != tt.wantErr {
						t.Errorf("Compiled = %v, %v; want error %v", cj, err, tt.wantErr)
					}
				}()
			}
			wg.Wait()
			first, _ := st.Compiled(tt.job)
			again, _ := st.Compiled(tt.job)
			if first != again {
				t.Error("a second ask got another compilation")
			}
			if n != 1 {
				t.Errorf("compiled %d times by concurrent asks, want once", n)
			}
			var none *RoundState
			a, errA := none.Compiled(tt.job)
			b, _ := none.Compiled(tt.job)
			if (errA != nil) != tt.wantErr || !tt.wantErr && a == b {
				t.Errorf("nil state: %v, %v (same answer twice: %v)", a, errA, a == b)
			}
		})
	}
}

// Sequential asks compile once.
func TestRoundStateSequentialOnce(t *testing.T) {
	st := NewRoundState(nil)
	n := 0
	st.OnCompile(func(string) { n++ })
	j := cluster.Job{Namespace: "default", ID: "a", Group: "train", DeviceName: "nvidia/gpu"}
	for range 5 {
		if _, err := st.Compiled(&j); err != nil {
			t.Fatal(err)
		}
	}
	if n != 1 {
		t.Fatalf("compiled %d times in one round, want 1", n)
	}
}

// Only the round state compiles constraints in the scheduler's code: a step that called
// constraint.CompileJob itself would compile a job again in the same round.
func TestOnlyRoundStateCompiles(t *testing.T) {
	root := filepath.Join("..", "..")
	var found []string
	for _, dir := range []string{"sidecar", "model"} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return nil
			}
			rel, _ := filepath.Rel(root, path)
			rel = filepath.ToSlash(rel)
			if rel == "sidecar/sched/state.go" || strings.HasPrefix(rel, "model/constraint/") {
				return nil
			}
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			if strings.Contains(string(b), "constraint.CompileJob(") {
				found = append(found, rel)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(found) > 0 {
		t.Fatalf("constraint.CompileJob called outside sched.RoundState: %v; use RoundState.Compiled", found)
	}
}
