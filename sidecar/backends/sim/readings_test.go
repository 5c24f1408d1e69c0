package sim_test

import (
	"context"
	"testing"

	"github.com/hetgpu/hetgpu/model/cluster"
	"github.com/hetgpu/hetgpu/model/gpuspec"
	"github.com/hetgpu/hetgpu/model/trace"
	"github.com/hetgpu/hetgpu/sidecar/backends/sim"
)

// A busy GPU reads its job's utilisation and the power model's draw; an idle one idles.
func TestGPUReadings(t *testing.T) {
	s := oneClass(t, "Tesla V100-SXM2-16GB", 2, 1)
	e, err := sim.New(sim.Config{Spec: s, Throughput: table(t)})
	if err != nil {
		t.Fatal(err)
	}
	snap := pending(t, e, trace.Job{ID: "a", JobType: "ResNet-50 (batch size 32)", Model: "ResNet-50", BatchSize: 32, GPUs: 1, TotalSteps: 1e6})
	grp := snap.Nodes[0].Devices[0].ID()
	if res, err := e.Pin(context.Background(), []cluster.Decision{{Namespace: "default", JobID: "a", Group: sim.JobGroup,
		Assign: []cluster.Assignment{{NodeID: "c-0", DeviceGroup: grp, InstanceIDs: []string{"GPU-c-0-1"}}}}}); err != nil || !res[0].Applied {
		t.Fatalf("pin: %+v %v", res, err)
	}
	e.AdvanceTo(60)
	rs, at := e.GPUReadings()
	sp, _ := gpuspec.Default().Lookup("v100")
	idle, busy := rs["GPU-c-0-0"], rs["GPU-c-0-1"]
	if len(rs) != 2 || at != sim.DefaultEpoch.Add(60e9) {
		t.Fatalf("%d readings at %v", len(rs), at)
	}
	if idle.Util != 0 || idle.PowerW != sp.IdleW || idle.Jobs != 0 || idle.TDPW != sp.TDPW || idle.MemoryGiB != sp.MemoryGiB {
		t.Errorf("idle GPU = %+v, want util 0 at %g W", idle, sp.IdleW)
	}
	if busy.Util <= 0 || busy.Util > 1 || busy.PowerW <= sp.IdleW || busy.PowerW > sp.TDPW || busy.Jobs != 1 {
		t.Errorf("busy GPU = %+v", busy)
	}
}
