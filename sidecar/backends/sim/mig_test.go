package sim_test

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hetgpu/hetgpu/model/cluster"
	"github.com/hetgpu/hetgpu/model/trace"
	"github.com/hetgpu/hetgpu/sidecar/backends/sim"
)

// One A100 split into two 3g.20gb slices: the snapshot shows a MIG device group of the slice
// type, two single-GPU jobs run at once, one per slice, each at the parent's rate x (1/2 x 3/7
// SMs + 1/2 x 4/8 memory); a slice is never shared and a two-GPU job never runs on slices.
func TestMIGSlicesRunSingleGPUJobs(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "one-a100.hcl")
	if err := os.WriteFile(f, []byte(`name = "one-a100"
node_class "a" {
  gpu           = "NVIDIA A100-SXM4-40GB"
  gpus_per_node = 1
  count         = 1
}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := sim.LoadSpec(f + ":mig=a100/3g.20gb+3g.20gb:slots=2")
	if err != nil {
		t.Fatal(err)
	}
	tab := table(t)
	e, err := sim.New(sim.Config{Spec: s, Throughput: tab})
	if err != nil {
		t.Fatal(err)
	}
	jt := "ResNet-18 (batch size 16)"
	const steps = 1e5
	snap := pending(t, e,
		trace.Job{ID: "a", JobType: jt, Model: "ResNet-18", BatchSize: 16, GPUs: 1, TotalSteps: steps},
		trace.Job{ID: "b", JobType: jt, Model: "ResNet-18", BatchSize: 16, GPUs: 1, TotalSteps: steps},
		trace.Job{ID: "c", JobType: jt, Model: "ResNet-18", BatchSize: 16, GPUs: 1, TotalSteps: steps},
		trace.Job{ID: "two", JobType: jt, Model: "ResNet-18", BatchSize: 16, GPUs: 2, TotalSteps: steps},
	)
	ctx := context.Background()
	if len(snap.Nodes) != 1 || len(snap.Nodes[0].Devices) != 1 {
		t.Fatalf("nodes %+v", snap.Nodes)
	}
	n := snap.Nodes[0]
	g := n.Devices[0]
	if g.Name != "NVIDIA A100-SXM4-40GB MIG 3g.20gb" || g.GPUType != "a100-mig-3g.20gb" || len(g.Instances) != 2 ||
		*g.Attributes["memory"].Int != 20*1024 {
		t.Fatalf("device group %s type %s, %d instances, memory %d", g.Name, g.GPUType, len(g.Instances), *g.Attributes["memory"].Int)
	}
	dec := func(job string, inst int) cluster.Decision {
		return cluster.Decision{Namespace: "default", JobID: job, Group: sim.JobGroup, Shared: true,
			Assign: []cluster.Assignment{{NodeID: n.ID, DeviceGroup: g.ID(), InstanceIDs: []string{g.Instances[inst].ID}}}}
	}
	res, _ := e.Pin(ctx, []cluster.Decision{dec("a", 0), dec("b", 1), dec("c", 0)})
	if !res[0].Applied || !res[1].Applied {
		t.Fatalf("pins on the two slices: %+v", res)
	}
	if res[2].Applied || !strings.Contains(res[2].Err.Error(), "in use") {
		t.Fatalf("a third job shared a slice: %+v", res[2])
	}
	snap, _ = e.Snapshot(ctx)
	for _, a := range snap.Running {
		if a.Shared || a.GPUType != "a100-mig-3g.20gb" {
			t.Errorf("allocation %s: shared %t, type %s", a.JobID, a.Shared, a.GPUType)
		}
	}
	// A slice draws the A100's power (TDP 400 W in the datasheet) times its SM share.
	rd, _ := e.GPUReadings()
	if x := rd[g.Instances[0].ID]; math.Abs(x.TDPW-400*3.0/7) > 1e-9 || x.MemoryGiB != 20 || x.Jobs != 1 {
		t.Errorf("slice reading %+v, want TDP %v W, 20 GiB, one job", x, 400*3.0/7)
	}
	r := e.Result("pins")
	if r.Unschedulable != 1 {
		t.Errorf("unschedulable %d, want 1 (the two-GPU job)", r.Unschedulable)
	}
	parent, _, ok := tab.Throughput(jt, "a100", 1)
	if !ok || parent <= 0 {
		t.Fatalf("no A100 throughput for %s", jt)
	}
	want := steps / (parent * (0.5*3.0/7 + 0.5*4.0/8))
	// Finish a and b (c still waits); their JCT is the slice runtime.
	e.AdvanceTo(want + 1)
	r = e.Result("pins")
	if r.Jobs != 2 || math.Abs(r.AvgJCTS-want) > 1e-6*want {
		t.Fatalf("%d jobs finished, avg JCT %v s, want 2 at %v s", r.Jobs, r.AvgJCTS, want)
	}
}
