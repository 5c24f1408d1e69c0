package sim_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/hetgpu/hetgpu/model/cluster"
	"github.com/hetgpu/hetgpu/model/throughput"
	"github.com/hetgpu/hetgpu/model/throughput/throughputtest"
	"github.com/hetgpu/hetgpu/model/trace"
	"github.com/hetgpu/hetgpu/sidecar/backends/sim"
)

func table(t testing.TB) *throughput.Table {
	t.Helper()
	return throughputtest.Bundled(t)
}

// pending submits jobs to e, starts its clock at 0 and returns the snapshot in which they wait.
func pending(t testing.TB, e *sim.Engine, jobs ...trace.Job) *cluster.Snapshot {
	t.Helper()
	if err := e.Submit(jobs...); err != nil {
		t.Fatal(err)
	}
	e.AdvanceTo(0)
	snap, err := e.Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

func spec(t testing.TB, src string) *sim.Spec {
	t.Helper()
	s, err := sim.ParseSpec([]byte(src), "test.hcl")
	if err != nil {
		t.Fatalf("ParseSpec: %v", err)
	}
	return s
}

// oneClass is a cluster of count nodes of gpus GPUs of one model.
func oneClass(t testing.TB, gpu string, gpus, count int) *sim.Spec {
	return spec(t, fmt.Sprintf(`name = "test"
node_class "c" {
  gpu           = %q
  gpus_per_node = %d
  count         = %d
}
`, gpu, gpus, count))
}

// mixed is a cluster of v nodes of four V100s and k nodes of four K80s.
func mixed(t testing.TB, v, k int) *sim.Spec {
	return spec(t, fmt.Sprintf(`name = "mixed"
node_class "v" {
  gpu = "Tesla V100-SXM2-16GB"
  gpus_per_node = 4
  count = %d
}
node_class "k" {
  gpu = "Tesla K80"
  gpus_per_node = 4
  count = %d
}
`, v, k))
}

func synthetic(t testing.TB, jobs int, rate float64, seed uint64, multi bool) *trace.Trace {
	t.Helper()
	sp := trace.SyntheticSpec{Jobs: jobs, RatePerHour: rate, Seed: seed, RefGPU: "v100", MultiGPU: multi}
	o := sim.TraceOptions(table(t), seed)
	tr, err := trace.Synthetic(sp, trace.SyntheticOptions{Throughput: o.Throughput, Measured: o.Measured})
	if err != nil {
		t.Fatalf("Synthetic: %v", err)
	}
	return tr
}

// checker is a sim.Meter that checks, after every round, through the public Snapshot, that
// no GPU is held by two jobs unless both share, that no GPU holds more than two jobs, and that
// busy GPUs never exceed capacity.
type checker struct {
	t      testing.TB
	rounds int
}

func (c *checker) Measure(snap *cluster.Snapshot) {
	c.rounds++
	checkSnapshot(c.t, snap)
}

func (c *checker) Report(*sim.Result) {}

func checkSnapshot(t testing.TB, snap *cluster.Snapshot) {
	t.Helper()
	total := 0
	exists := map[string]bool{}
	for _, n := range snap.Nodes {
		for _, d := range n.Devices {
			for _, in := range d.Instances {
				exists[in.ID] = true
				total++
			}
		}
	}
	holders := map[string][]cluster.Alloc{}
	for _, a := range snap.Running {
		for _, id := range a.DeviceIDs {
			if !exists[id] {
				t.Fatalf("alloc %s holds unknown GPU %s", a.ID, id)
			}
			holders[id] = append(holders[id], a)
		}
	}
	if len(holders) > total {
		t.Fatalf("%d GPUs busy, cluster has %d", len(holders), total)
	}
	for id, hs := range holders {
		if len(hs) > 2 {
			t.Fatalf("GPU %s held by %d allocations", id, len(hs))
		}
		if len(hs) == 2 && !(hs[0].Shared && hs[1].Shared) {
			t.Fatalf("GPU %s held by %s and %s without sharing", id, hs[0].JobID, hs[1].JobID)
		}
	}
}
