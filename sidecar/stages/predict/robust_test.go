package predict

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestOneRunMovesPredictionsBoundedly is the property behind ClipFactor: whatever one run
// reports, in range or wildly out of it, no prediction of its workload (any GPU type and
// count) nor of a neighbouring workload moves by more than MaxMoveFactor, and a run that is
// really that different still pulls predictions its way run after run.
func TestOneRunMovesPredictionsBoundedly(t *testing.T) {
	// ROBUST_SEED and ROBUST_STEPS run other or longer sequences.
	seeds := []uint64{1, 2, 3}
	if v, err := strconv.ParseUint(os.Getenv("ROBUST_SEED"), 10, 64); err == nil {
		seeds = []uint64{v}
	}
	steps, _ := strconv.Atoi(os.Getenv("ROBUST_STEPS"))
	if steps <= 0 {
		steps = 120
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) { oneRunBound(t, seed, steps) })
	}
}

func oneRunBound(t *testing.T, seed uint64, steps int) {
	p := smallPredictor(t, Options{ClipFactor: ClipFactor})
	r := rand.New(rand.NewPCG(seed, 22))
	names := []struct {
		name  string
		batch int
	}{{"ResNet-18", 64}, {"ResNet-50", 32}, {"Transformer", 128}, {"NewNet", 48}, {"Poisoned", 8}}
	gpus := []string{"k80", "p100", "v100", "t4", "a100", "h100"}
	counts := []int{1, 2, 4, 8}
	query := func() map[string]float64 {
		out := map[string]float64{}
		for _, n := range names {
			for _, g := range gpus {
				for _, c := range counts {
					out[fmt.Sprint(n.name, n.batch, g, c)] = p.Predict(job(n.name, n.batch), g, c).Throughput
				}
			}
		}
		return out
	}
	before := query()
	worst := 1.0
	for i := 0; i < steps; i++ {
		n := names[r.IntN(len(names))]
		// Log-uniform from 1e-6 to 1e300 steps/s: far below, around and far above reality.
		thr := math.Pow(10, -6+306*r.Float64())
		o := obs(n.name, n.batch, gpus[r.IntN(len(gpus))], counts[r.IntN(len(counts))], thr, 0, i)
		if err := p.Observe(context.Background(), o); err != nil {
			t.Fatal(err)
		}
		after := query()
		for k, b := range before {
			a := after[k]
			if b <= 0 || a <= 0 {
				continue
			}
			if m := math.Max(a/b, b/a); m > worst {
				worst = m
			}
			if m := math.Max(a/b, b/a); m > MaxMoveFactor {
				t.Fatalf("run %d (%s on %d %s at %.3g steps/s) moved %s from %.4g to %.4g (x%.2f > %g)",
					i, o.ModelName, o.GPUs, o.GPUType, thr, k, b, a, m, MaxMoveFactor)
			}
		}
		before = after
	}
	t.Logf("largest move of any prediction by one run in %d runs: x%.3f (bound x%g)", steps, worst, MaxMoveFactor)

}

// A workload really 3x faster than predicted gets there, run by run.
func TestClippedLearningStillLearns(t *testing.T) {
	// A workload really 3x faster than predicted gets there, run by run (each decision
	// round rebuilds the predictor's state; runs within one round clip against the same one).
	q := smallPredictor(t, Options{ClipFactor: ClipFactor})
	start := q.Predict(job("ResNet-18", 64), "v100", 1).Throughput
	for i := 0; i < 8; i++ {
		if err := q.Observe(context.Background(), obs("ResNet-18", 64, "v100", 1, 3*start, 0, i)); err != nil {
			t.Fatal(err)
		}
		q.Predict(job("ResNet-18", 64), "v100", 1)
	}
	if got := q.Predict(job("ResNet-18", 64), "v100", 1).Throughput; got < 2.5*start {
		t.Errorf("after 8 runs at 3x the prediction %.4g, it is %.4g: learning stuck", start, got)
	}
}

// The catalog file: each line carries its checksum; an altered line is an error naming it;
// a torn last line is cut off (and kept) so appending continues cleanly; old lines without a
// checksum are read; store sequence numbers survive a restart.
func TestCatalogChecksumsAndTornTail(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "catalog.jsonl")
	c, err := OpenCatalog(path, nil, CatalogOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 3; i++ {
		r := rec("Net", 8, "t4", 1, float64(i))
		r.Seq = uint64(10 + i)
		if err := c.Add(r); err != nil {
			t.Fatal(err)
		}
	}
	data, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(lines) != 3 || !strings.Contains(lines[0], `,"crc":"`) {
		t.Fatalf("file:\n%s", data)
	}
	legacy := `{"v":1,"source":"observed","time":"2026-01-01T00:00:00Z","model_name":"Old","gpu_type":"t4","gpus":1,"throughput":2}`
	for _, tt := range []struct {
		name    string
		content string
		n       int
		err     string
		torn    bool
	}{
		{"as written", string(data), 3, "", false},
		{"legacy lines without a checksum", legacy + "\n" + string(data), 4, "", false},
		{"altered value in the middle", strings.Replace(lines[0], `"throughput":1`, `"throughput":9`, 1) + "\n" + lines[1] + "\n" + lines[2] + "\n", 0, "line 1: checksum", false},
		{"torn last line", lines[0] + "\n" + lines[1] + "\n" + lines[2][:len(lines[2])/2], 2, "", true},
		{"garbage last line", string(data) + "\x00\x13garbage\n", 3, "", true},
		{"last line altered", lines[0] + "\n" + lines[1] + "\n" + strings.Replace(lines[2], `"throughput":3`, `"throughput":7`, 1) + "\n", 2, "", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "catalog.jsonl")
			if err := os.WriteFile(p, []byte(tt.content), 0o644); err != nil {
				t.Fatal(err)
			}
			c, err := OpenCatalog(p, nil, CatalogOptions{})
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) || !strings.Contains(err.Error(), "hetgpu state repair") {
					t.Fatalf("open = %v, want an error with %q and the repair command", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := len(c.Observed()); got != tt.n {
				t.Fatalf("%d records, want %d", got, tt.n)
			}
			if torn, _ := filepath.Glob(p + ".torn-*"); (len(torn) == 1) != tt.torn || (len(c.Notes) > 0) != tt.torn {
				t.Errorf("torn copies %v, notes %v; want torn=%v", torn, c.Notes, tt.torn)
			}
			// Appending after the repair, then reopening, works (the failure mode).
			r := rec("Net", 8, "t4", 1, 5)
			r.Seq = 99
			if err := c.Add(r); err != nil {
				t.Fatal(err)
			}
			c2, err := OpenCatalog(p, nil, CatalogOptions{})
			if err != nil {
				t.Fatalf("reopen after append: %v", err)
			}
			if got := len(c2.Observed()); got != tt.n+1 {
				t.Errorf("reopened: %d records, want %d", got, tt.n+1)
			}
			if seq, known := c2.LearnedThrough(); seq != 99 || !known {
				t.Errorf("LearnedThrough = %d %v, want 99 true", seq, known)
			}
		})
	}
	// Only legacy records: nothing is known about the store.
	p := filepath.Join(dir, "legacy.jsonl")
	_ = os.WriteFile(p, []byte(legacy+"\n"), 0o644)
	if c, err := OpenCatalog(p, nil, CatalogOptions{}); err != nil {
		t.Fatal(err)
	} else if _, known := c.LearnedThrough(); known {
		t.Error("legacy catalog claims to know the store's sequence")
	}
}
