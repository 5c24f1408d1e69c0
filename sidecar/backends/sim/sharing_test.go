package sim_test

import (
	"context"
	"strings"
	"testing"

	"github.com/hetgpu/hetgpu/model/cluster"
	"github.com/hetgpu/hetgpu/model/trace"
	"github.com/hetgpu/hetgpu/sidecar/backends/sim"
)

// The cluster options (:scale, :slots, :mig) parse in any order; the MIG split makes each
// profile a GPU type (sim/mig.go).
func TestLoadSpecOptions(t *testing.T) {
	tests := []struct {
		ref, name string
		slots     int
		gpus      int
		types     string // checked when set
		err       string
	}{
		{ref: "gavel-108", name: "gavel-108", gpus: 108},
		{ref: "gavel-108:slots=2", name: "gavel-108:slots=2", slots: 2, gpus: 108},
		{ref: "gavel-108:scale=0.25:slots=2", name: "gavel-108:scale=0.25:slots=2", slots: 2, gpus: 24},
		{ref: "gavel-108:slots=2:scale=0.25", name: "gavel-108:scale=0.25:slots=2", slots: 2, gpus: 24},
		{ref: "gavel-108:slots=3", err: `slots = "3", expected 0, 1 or 2`},
		{ref: "gavel-108:slots=x", err: `slots = "x"`},
		{ref: "modern-mix:mig=a100/3g.20gb+3g.20gb", name: "modern-mix:mig=a100/3g.20gb+3g.20gb", gpus: 80,
			types: "a10,a100-mig-3g.20gb,h100,t4"},
		{ref: "modern-mix:mig=a100/4g.20gb+2g.10gb", err: "holds less than 12 GiB"},
		{ref: "modern-mix:mig=A100/3g.20gb+2g.20gb+2g.20gb:slots=2", name: "modern-mix:mig=a100/3g.20gb+2g.20gb+2g.20gb:slots=2", slots: 2,
			gpus: 96, types: "a10,a100-mig-2g.20gb,a100-mig-3g.20gb,h100,t4"},
		{ref: "modern-mix:scale=0.5:mig=h100/7g.80gb", name: "modern-mix:scale=0.5:mig=h100/7g.80gb", gpus: 32,
			types: "a10,a100,h100-mig-7g.80gb,t4"},
		{ref: "modern-mix:mig=a100/4g.20gb+4g.20gb", err: "more than one GPU's 7 compute or 8 memory slices"},
		{ref: "modern-mix:mig=a100/1g.5gb", err: "holds less than 12 GiB"},
		{ref: "modern-mix:mig=t4/3g.20gb", err: `profile "3g.20gb" of parent "t4" is not a MIG profile`},
		{ref: "modern-mix:mig=a100", err: "no parent type or profiles"},
		{ref: "gavel-108:mig=a100/3g.20gb", err: `the cluster has no GPUs of type "a100"`},
	}
	for _, tc := range tests {
		s, err := sim.LoadSpec(tc.ref)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: error %v, want %q", tc.ref, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", tc.ref, err)
		}
		if s.Name != tc.name || s.Slots != tc.slots || s.TotalGPUs() != tc.gpus {
			t.Errorf("%s: name %q slots %d GPUs %d, want %q %d %d", tc.ref, s.Name, s.Slots, s.TotalGPUs(), tc.name, tc.slots, tc.gpus)
		}
		if got := strings.Join(s.GPUTypes(), ","); tc.types != "" && got != tc.types {
			t.Errorf("%s: types %s, want %s", tc.ref, got, tc.types)
		}
	}
}

func TestShareableJobTypes(t *testing.T) {
	tab := table(t)
	for jt, want := range map[string]bool{
		"ResNet-18 (batch size 16)":  true, // Gavel's pairs on V100 sum to 1.81 on average
		"LM (batch size 20)":         true,
		"ResNet-50 (batch size 128)": false, // 0.45: sharing a V100 hurts it
		"CycleGAN":                   false, // 1.10
	} {
		if got := sim.ShareableJobType(tab, jt, "v100"); got != want {
			t.Errorf("ShareableJobType(%s) = %v, want %v", jt, got, want)
		}
	}
}

// With slots, a job holds its GPU as shareable: a second single-GPU job can be pinned to it
// and both run; the snapshot says both allow sharing and carries T_min.
func TestSlotsLetTwoJobsShareAGPU(t *testing.T) {
	s, err := sim.LoadSpec("gavel-108:scale=0.12:slots=2")
	if err != nil {
		t.Fatal(err)
	}
	e, err := sim.New(sim.Config{Spec: s, Throughput: table(t)})
	if err != nil {
		t.Fatal(err)
	}
	jt := "ResNet-18 (batch size 16)"
	snap := pending(t, e,
		trace.Job{ID: "a", JobType: jt, Model: "ResNet-18", BatchSize: 16, GPUs: 1, TotalSteps: 1e4, MinThroughput: 3},
		trace.Job{ID: "b", JobType: jt, Model: "ResNet-18", BatchSize: 16, GPUs: 1, TotalSteps: 1e4},
	)
	ctx := context.Background()
	if len(snap.Pending) != 2 || !snap.Pending[0].Hetgpu.AllowSharing || snap.Pending[0].Hetgpu.MinThroughput != 3 {
		t.Fatalf("pending %+v", snap.Pending)
	}
	n := snap.Nodes[len(snap.Nodes)-1]
	g := n.Devices[0]
	dec := func(job string) cluster.Decision {
		return cluster.Decision{Namespace: "default", JobID: job, Group: sim.JobGroup,
			Assign: []cluster.Assignment{{NodeID: n.ID, DeviceGroup: g.ID(), InstanceIDs: []string{g.Instances[0].ID}}}}
	}
	res, _ := e.Pin(ctx, []cluster.Decision{dec("a")})
	if !res[0].Applied {
		t.Fatalf("pin a: %+v", res)
	}
	res, _ = e.Pin(ctx, []cluster.Decision{dec("b")})
	if !res[0].Applied {
		t.Fatalf("pin b on a's GPU: %+v", res)
	}
	snap, _ = e.Snapshot(ctx)
	if len(snap.Running) != 2 || !snap.Running[0].Shared || !snap.Running[1].Shared {
		t.Fatalf("running %+v", snap.Running)
	}
	// A co-runner's workload and T_min reach the placement (pair predictions, T_min checks).
	if a := snap.Running[0]; a.JobID != "a" || a.Hetgpu.ModelName != "ResNet-18" || a.Hetgpu.BatchSize != 16 || a.Hetgpu.MinThroughput != 3 {
		t.Errorf("running allocation a: %+v", a)
	}
	e.AdvanceTo(1e9)
	r := e.Result("pins")
	if r.Jobs != 2 || r.TMinJobs != 1 {
		t.Fatalf("result: %d jobs, %d with T_min", r.Jobs, r.TMinJobs)
	}
}

func TestSyntheticShareableAndTMin(t *testing.T) {
	sp, err := trace.ParseSyntheticSpec("jobs=200,rate=10,seed=3,multigpu=false,shareable=1,tmin=0.5")
	if err != nil {
		t.Fatal(err)
	}
	if sp.Shareable != 1 || sp.TMin != 0.5 || !strings.Contains(sp.String(), "shareable=1,tmin=0.5") {
		t.Fatalf("spec %+v %s", sp, sp)
	}
	tab := table(t)
	o := sim.TraceOptions(tab, 3)
	tr, err := trace.Synthetic(sp, trace.SyntheticOptions{JobTypes: o.JobTypes, Throughput: o.Throughput, Measured: o.Measured, Shareable: o.Shareable})
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range tr.Jobs {
		if !sim.ShareableJobType(tab, j.JobType, "v100") {
			t.Fatalf("job %s of type %s does not leave a GPU partly idle", j.ID, j.JobType)
		}
		thr, _, _ := tab.Throughput(j.JobType, "v100", 1)
		if d := j.MinThroughput - 0.5*thr; d > 1e-9 || d < -1e-9 {
			t.Fatalf("job %s: T_min %v, want half of %v", j.ID, j.MinThroughput, thr)
		}
	}
	for _, bad := range []string{"jobs=1,rate=1,shareable=2", "jobs=1,rate=1,tmin=-1"} {
		if _, err := trace.ParseSyntheticSpec(bad); err == nil || !strings.Contains(err.Error(), "expected a number from 0 to 1") {
			t.Errorf("%s: %v", bad, err)
		}
	}
	if _, err := trace.Synthetic(sp, trace.SyntheticOptions{Throughput: o.Throughput}); err == nil || !strings.Contains(err.Error(), "needs co-location measurements") {
		t.Errorf("shareable without measurements: %v", err)
	}
}
