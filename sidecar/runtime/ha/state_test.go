package ha_test

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/hetgpu/hetgpu/model/cluster"
	"github.com/hetgpu/hetgpu/sidecar/backends/nomad/nomadtest"
	"github.com/hetgpu/hetgpu/sidecar/runtime/ha"
	"github.com/hetgpu/hetgpu/sidecar/runtime/store"
)

// fenceFunc adapts a function to cluster.Fence.
type fenceFunc func(ctx context.Context) error

func (f fenceFunc) Held(ctx context.Context) error { return f(ctx) }

func randomBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 1))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// stateBlobs is an unfenced Blobs under hetgpu/state in the default namespace of a fresh
// fake Nomad, closed when the test ends.
func stateBlobs(t *testing.T) (*nomadtest.Server, *ha.Blobs) {
	t.Helper()
	f := nomadtest.New()
	t.Cleanup(f.Close)
	return f, &ha.Blobs{Client: f.Client(), Namespace: "default", Prefix: "hetgpu/state"}
}

func TestBlobsRoundTripChunked(t *testing.T) {
	f, b := stateBlobs(t)
	ctx := context.Background()
	if _, ok, err := b.Get(ctx, "runs"); ok || err != nil {
		t.Fatalf("Get before any Put = ok %v, err %v; want nothing", ok, err)
	}
	for _, tc := range []struct {
		name   string
		size   int
		chunks int
	}{
		{"small", 100, 1},
		// Random bytes do not compress: 200 KiB need 5 chunks of 45 KiB.
		{"above 64 KiB", 200 << 10, 5},
		{"empty", 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := randomBytes(tc.size, uint64(tc.size))
			if err := b.Put(ctx, "runs", data); err != nil {
				t.Fatal(err)
			}
			got, ok, err := b.Get(ctx, "runs")
			if err != nil || !ok || !bytes.Equal(got, data) {
				t.Fatalf("Get = %d bytes, ok %v, err %v; want the %d bytes put", len(got), ok, err, len(data))
			}
			// Only the newest generation's chunks are left, each within Nomad's limit.
			var chunks []string
			for _, p := range f.VariablePaths("default", "hetgpu/state/runs/") {
				chunks = append(chunks, p)
				if v := f.Variable("default", p); len(v.Items["data"]) > 65536 {
					t.Fatalf("chunk %s holds %d bytes", p, len(v.Items["data"]))
				}
			}
			if len(chunks) != tc.chunks {
				t.Fatalf("chunk variables %v, want %d", chunks, tc.chunks)
			}
		})
	}
}

func TestBlobsHalfWrittenSetNotRead(t *testing.T) {
	f := nomadtest.New()
	defer f.Close()
	ctx := context.Background()
	c := f.Client()
	b := &ha.Blobs{Client: c, Namespace: "default", Prefix: "hetgpu/state"}
	old := []byte("the complete set")
	if err := b.Put(ctx, "runs", old); err != nil {
		t.Fatal(err)
	}
	// A writer died after its first chunk of the next generation: no manifest names it.
	if _, _, err := c.Variables().Update(&api.Variable{Path: "hetgpu/state/runs/2/0", Items: api.VariableItems{"data": "aGFsZg=="}}, nil); err != nil {
		t.Fatal(err)
	}
	got, ok, err := b.Get(ctx, "runs")
	if err != nil || !ok || string(got) != string(old) {
		t.Fatalf("Get = %q, %v, %v; want the complete set %q", got, ok, err, old)
	}
}

func TestBlobsConcurrentWriterConflicts(t *testing.T) {
	_, other := stateBlobs(t)
	ctx := context.Background()
	if err := other.Put(ctx, "runs", []byte("v1")); err != nil {
		t.Fatal(err)
	}
	calls := 0
	// Between this writer's chunks and its manifest, another writer replaces the manifest.
	b := *other
	b.Fence = fenceFunc(func(ctx context.Context) error {
		calls++
		if calls == 2 {
			return other.Put(ctx, "runs", []byte("v2 by the other writer"))
		}
		return nil
	})
	err := b.Put(ctx, "runs", []byte("v2 by this writer"))
	if !errors.Is(err, ha.ErrConflict) {
		t.Fatalf("Put = %v, want ErrConflict", err)
	}
	got, _, _ := other.Get(ctx, "runs")
	if string(got) != "v2 by the other writer" {
		t.Fatalf("shared state = %q, want the other writer's", got)
	}
}

func TestBlobsFencedWriterWritesNothing(t *testing.T) {
	f, b := stateBlobs(t)
	b.Fence = fenceFunc(func(context.Context) error { return ha.ErrLeaseLost })
	if err := b.Put(context.Background(), "runs", []byte("x")); !errors.Is(err, ha.ErrLeaseLost) {
		t.Fatalf("Put = %v, want ErrLeaseLost", err)
	}
	if p := f.VariablePaths("default", "hetgpu/"); len(p) != 0 {
		t.Fatalf("a fenced writer wrote %v", p)
	}
}

func obs(job, alloc string, thr float64) store.NewObservation {
	return store.NewObservation{Obs: cluster.Observation{Namespace: "default", JobID: job, Group: "g", GPUType: "a100", GPUs: 1,
		Throughput: thr, RuntimeS: 60, AllocID: alloc}, Source: "driver", Claims: []string{"alloc/" + alloc}}
}

func openStore(t *testing.T) *store.Store {
	st, err := store.Open(filepath.Join(t.TempDir(), "sidecar.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func TestSharedRunsCarryOverOnce(t *testing.T) {
	f, blobs := stateBlobs(t)
	ctx := context.Background()
	old := openStore(t)
	// Enough runs that the shared set needs several chunks.
	var recs []store.NewObservation
	for i := 0; i < 3000; i++ {
		recs = append(recs, obs("job-"+strings.Repeat("x", i%50), "alloc-"+time.Duration(i).String()+randomHex(i), float64(1+i%97)))
	}
	if _, err := old.AddObservations(recs, time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := old.PutDecisions([]*store.DecisionRecord{{JobKey: "default/j/g"}, {JobKey: "default/k/g"}}); err != nil {
		t.Fatal(err)
	}
	const samples = `[{"key":"default/j/g@1","x":-0.5}]`
	if err := old.PutMeta(store.MetaEstimateSamples, samples); err != nil {
		t.Fatal(err)
	}
	const runtimes = `[{"key":"default/j/g@1","ns":"default","job":"j","gpus":1,"runtime_s":600}]`
	if err := old.PutMeta(store.MetaRuntimeHistory, runtimes); err != nil {
		t.Fatal(err)
	}
	leader := &ha.Shared{Blobs: blobs, Store: old, Window: 3000, ID: "old"}
	if err := leader.Publish(ctx); err != nil {
		t.Fatal(err)
	}
	if n := len(f.VariablePaths("default", "hetgpu/state/runs/")); n < 2 {
		t.Fatalf("%d chunk variables, want at least 2 for 3000 runs", n)
	}
	next := openStore(t)
	// The new leader already had one of the runs (reported to it directly, another claim
	// spelling of the same allocation and task).
	dup := obs("job-", "x", 1)
	dup.Claims = []string{"alloc/" + recs[0].Obs.AllocID + "/train"}
	if _, err := next.AddObservations([]store.NewObservation{dup}, time.Now()); err != nil {
		t.Fatal(err)
	}
	sh := &ha.Shared{Blobs: blobs, Store: next, Window: 3000, ID: "next"}
	for _, tc := range []struct {
		name  string
		added int
	}{{"first takeover", 2999}, {"second takeover", 0}} {
		n, err := sh.Load(ctx)
		if err != nil || n != tc.added {
			t.Fatalf("%s: Load = %d, %v; want %d added", tc.name, n, err, tc.added)
		}
		if c := next.ObservationCount(); c != 3000 {
			t.Fatalf("%s: %d runs in the new store, want 3000 (none lost, none twice)", tc.name, c)
		}
	}
	if got := next.DecisionSeq(); got != 2 {
		t.Fatalf("decision sequence %d, want 2 (continued from the old leader)", got)
	}
	if got := next.Meta(store.MetaEstimateSamples); got != samples {
		t.Fatalf("estimate calibration %q in the new store, want the old leader's %q", got, samples)
	}
	if got := next.Meta(store.MetaRuntimeHistory); got != runtimes {
		t.Fatalf("runtime history %q in the new store, want the old leader's %q", got, runtimes)
	}
}

func randomHex(i int) string {
	const hexd = "0123456789abcdef"
	r := rand.New(rand.NewPCG(uint64(i), 7))
	b := make([]byte, 12)
	for j := range b {
		b[j] = hexd[r.IntN(16)]
	}
	return string(b)
}

// The tuned policy a leader adopted reaches the next leader's state directory, once.
func TestSharedFileRoundTrip(t *testing.T) {
	_, blobs := stateBlobs(t)
	ctx := context.Background()
	src := filepath.Join(t.TempDir(), "ranker-tuned.json")
	dst := filepath.Join(t.TempDir(), "ranker-tuned.json")
	policy := randomBytes(150<<10, 3)
	if err := os.WriteFile(src, policy, 0o644); err != nil {
		t.Fatal(err)
	}
	sh := &ha.Shared{Blobs: blobs}
	if wrote, err := sh.LoadFile(ctx, ha.BlobPolicy, dst); wrote || err != nil {
		t.Fatalf("LoadFile before any policy was shared = %v, %v; want nothing written", wrote, err)
	}
	if err := sh.PublishFile(ctx, ha.BlobPolicy, src); err != nil {
		t.Fatal(err)
	}
	for _, want := range []bool{true, false} {
		wrote, err := sh.LoadFile(ctx, ha.BlobPolicy, dst)
		got, _ := os.ReadFile(dst)
		if err != nil || wrote != want || !bytes.Equal(got, policy) {
			t.Fatalf("LoadFile = %v, %v (%d bytes); want written %v and the %d bytes shared", wrote, err, len(got), want, len(policy))
		}
	}
}
