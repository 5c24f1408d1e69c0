package place

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/hetgpu/hetgpu/model/cluster"
	"github.com/hetgpu/hetgpu/sidecar/sched"
)

// pairTable is a prior predictor with fixed pair predictions by model name.
type pairTable struct {
	*PriorPredictor
	pairs map[[2]string][2]float64
}

func (p pairTable) PredictPair(a, b *cluster.Job, _ string) (float64, float64, bool) {
	if r, ok := p.pairs[[2]string{a.Hetgpu.ModelName, b.Hetgpu.ModelName}]; ok {
		return r[0], r[1], true
	}
	if r, ok := p.pairs[[2]string{b.Hetgpu.ModelName, a.Hetgpu.ModelName}]; ok {
		return r[1], r[0], true
	}
	return 0, 0, false
}

// slotNode is a node whose GPUs are exposed as slot groups, one per GPU, as the device
// plugin's sharing block does.
func slotNode(id string, gpus, slots int) cluster.Node {
	n := cluster.Node{ID: id, Name: id, Status: "ready", Eligible: true}
	model := "Tesla V100-SXM2-16GB"
	for g := range gpus {
		parent := fmt.Sprintf("GPU-%s-%d", id, g)
		pm := model
		grp := cluster.DeviceGroup{Vendor: "nvidia", Type: "gpu-slot", Name: fmt.Sprintf("%s shared %d", model, g), GPUType: "v100",
			Attributes: map[string]cluster.Attribute{"parent_model": {String: &pm}, "parent_uuid": {String: &parent}}}
		for k := range slots {
			grp.Instances = append(grp.Instances, cluster.Instance{ID: fmt.Sprintf("%s-slot%d", parent, k), Healthy: true})
		}
		n.Devices = append(n.Devices, grp)
	}
	return n
}

func slotJob(id, model string) cluster.Job {
	j := job(id, 1)
	j.DeviceName = "nvidia/gpu-slot"
	j.Hetgpu.ModelName = model
	return j
}

func placeWith(t *testing.T, cfg Config, snap *cluster.Snapshot, pred sched.Predictor) []cluster.Decision {
	t.Helper()
	dec, _ := placePred(t, cfg, snap, pred)
	if err := Verify(snap, dec, cfg); err != nil {
		t.Fatal(err)
	}
	return dec
}

func TestSlotCoLocationUsesPairPrediction(t *testing.T) {
	prior := NewPriorPredictor()
	pred := pairTable{prior, map[[2]string][2]float64{
		{"new", "running"}:    {0.8, 0.7},
		{"greedy", "running"}: {0.4, 0.5}, // loses more than it gains
		{"oom", "running"}:    {0, 1.2},   // measured out of memory together
	}}
	running := cluster.Alloc{ID: "r", Namespace: "default", JobID: "running", Group: "g", NodeID: "n",
		DeviceIDs: []string{"GPU-n-0-slot0"}, Hetgpu: cluster.Annotations{ModelName: "running"}}
	alone := prior.Predict(&cluster.Job{}, "v100", 1).Throughput
	tests := []struct {
		name       string
		job        cluster.Job
		tmin       float64
		coTmin     float64
		wantPlaced bool
		wantT      float64
	}{
		{name: "pair that gains", job: slotJob("a", "new"), wantPlaced: true, wantT: 0.8 * alone},
		{name: "pair that loses", job: slotJob("a", "greedy")},
		{name: "pair out of memory", job: slotJob("a", "oom")},
		{name: "own T_min broken by sharing", job: slotJob("a", "new"), tmin: 0.9 * alone},
		{name: "co-runner's T_min broken", job: slotJob("a", "new"), coTmin: 0.75 * alone},
		{name: "no pair prediction: SharedEfficiency", job: slotJob("a", "unknown"), wantPlaced: true, wantT: Default().SharedEfficiency * alone},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := running
			r.Hetgpu.MinThroughput = tc.coTmin
			j := tc.job
			j.Hetgpu.MinThroughput = tc.tmin
			snap := &cluster.Snapshot{Nodes: []cluster.Node{slotNode("n", 1, 2)}, Running: []cluster.Alloc{r}, Pending: []cluster.Job{j}}
			dec := placeWith(t, Default(), snap, pred)
			if !tc.wantPlaced {
				if len(dec) != 0 {
					t.Fatalf("placed %+v, want the job to wait", dec)
				}
				return
			}
			if len(dec) != 1 {
				t.Fatalf("decisions = %+v", dec)
			}
			d := dec[0]
			if ids := d.Assign[0].InstanceIDs; len(ids) != 1 || ids[0] != "GPU-n-0-slot1" || !d.Shared {
				t.Errorf("assigned %v shared %t, want the free slot GPU-n-0-slot1, shared", ids, d.Shared)
			}
			if math.Abs(d.PredThroughput-tc.wantT) > 1e-9 {
				t.Errorf("predicted throughput %v, want %v", d.PredThroughput, tc.wantT)
			}
			if !strings.Contains(d.Explanation, "co-runners: default/running/g") || !strings.Contains(d.Explanation, "this job x") {
				t.Errorf("explanation lacks the co-runner: %s", d.Explanation)
			}
		})
	}
}

func TestSlotPrefersFreeGPUOverLosingPair(t *testing.T) {
	pred := pairTable{NewPriorPredictor(), map[[2]string][2]float64{{"x", "running"}: {0.3, 0.3}}}
	snap := &cluster.Snapshot{Nodes: []cluster.Node{slotNode("n", 2, 2)},
		Running: []cluster.Alloc{{ID: "r", Namespace: "default", JobID: "running", Group: "g", NodeID: "n",
			DeviceIDs: []string{"GPU-n-0-slot0"}, Hetgpu: cluster.Annotations{ModelName: "running"}}},
		Pending: []cluster.Job{slotJob("a", "x")}}
	dec := placeWith(t, Default(), snap, pred)
	if len(dec) != 1 || !strings.HasPrefix(dec[0].Assign[0].InstanceIDs[0], "GPU-n-1-") || dec[0].Shared {
		t.Fatalf("want the empty GPU 1, got %+v", dec)
	}
}

func TestWholeGPUJobNeverOnSlots(t *testing.T) {
	n := slotNode("n", 2, 4)
	snap := &cluster.Snapshot{Nodes: []cluster.Node{n}, Pending: []cluster.Job{job("exclusive", 1)}}
	if dec := placeWith(t, Default(), snap, nil); len(dec) != 0 {
		t.Fatalf("a nvidia/gpu job was placed on slots: %+v", dec)
	}
	snap.Nodes = append(snap.Nodes, node("w", "v100", "Tesla V100-SXM2-16GB", "a", 1, false))
	dec := placeWith(t, Default(), snap, nil)
	if len(dec) != 1 || dec[0].Assign[0].NodeID != "w" {
		t.Fatalf("want the whole GPU on w, got %+v", dec)
	}
}

func TestSameRoundPairs(t *testing.T) {
	// One idle GPU with two slots: the round may put both new jobs on it (a new pair on an idle
	// GPU), admitted only when both gain and both T_mins hold under the pair.
	alone := NewPriorPredictor().Predict(&cluster.Job{}, "v100", 1).Throughput
	tests := []struct {
		name   string
		pair   [2]float64
		tminB  float64
		placed []string
	}{
		{"pair that gains", [2]float64{0.7, 0.9}, 0, []string{"a", "bb"}},
		{"pair that loses: the later job waits", [2]float64{0.3, 0.4}, 0, []string{"a"}},
		{"pair that gains but misses the later job's T_min: it waits", [2]float64{0.7, 0.9}, 0.95 * alone, []string{"a"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pred := pairTable{NewPriorPredictor(), map[[2]string][2]float64{{"A", "B"}: tc.pair}}
			b := slotJob("bb", "B")
			b.Hetgpu.MinThroughput = tc.tminB
			snap := &cluster.Snapshot{Nodes: []cluster.Node{slotNode("n", 1, 2)},
				Pending: []cluster.Job{slotJob("a", "A"), b}}
			dec := placeWith(t, Default(), snap, pred)
			var got []string
			for _, d := range dec {
				got = append(got, d.JobID)
			}
			if strings.Join(got, ",") != strings.Join(tc.placed, ",") {
				t.Fatalf("placed %v, want %v", got, tc.placed)
			}
			if len(dec) == 2 {
				a, b := decisionFor(dec, "a"), decisionFor(dec, "bb")
				if math.Abs(a.PredThroughput-tc.pair[0]*alone) > 1e-9 || math.Abs(b.PredThroughput-tc.pair[1]*alone) > 1e-9 || !a.Shared || !b.Shared {
					t.Errorf("pair throughputs %v, %v, want %v x %v", a.PredThroughput, b.PredThroughput, tc.pair, alone)
				}
				if !strings.Contains(b.Explanation, "co-runner placed in the same round: default/a/g") {
					t.Errorf("explanation %s", b.Explanation)
				}
			}
		})
	}
}

// A MIG slice is a GPU type of its own: a job goes there when the slice meets its T_min.
func TestMIGSliceIsAType(t *testing.T) {
	prior := NewPriorPredictor()
	const slice = "a100-mig-3g.20gb"
	j := job("fits", 1)
	sliceT := prior.Predict(&j, slice, 1).Throughput
	if whole := prior.Predict(&j, "a100", 1).Throughput; !(sliceT > 0 && sliceT < whole) {
		t.Fatalf("slice %v, whole %v", sliceT, whole)
	}
	mig := cluster.Node{ID: "m", Name: "m", Status: "ready", Eligible: true, Devices: []cluster.DeviceGroup{{
		Vendor: "nvidia", Type: "gpu", Name: "NVIDIA A100-SXM4-40GB MIG 3g.20gb",
		Instances: []cluster.Instance{{ID: "MIG-a", Healthy: true}, {ID: "MIG-b", Healthy: true}}}}}
	tests := []struct {
		tmin   float64
		placed bool
	}{{0, true}, {0.9 * sliceT, true}, {1.1 * sliceT, false}}
	for _, tc := range tests {
		j := job("fits", 1)
		j.Hetgpu.MinThroughput = tc.tmin
		snap := &cluster.Snapshot{Nodes: []cluster.Node{mig}, Pending: []cluster.Job{j}}
		dec := placeWith(t, Default(), snap, nil)
		if !tc.placed {
			if len(dec) != 0 {
				t.Errorf("T_min %v above the slice's %v: placed %+v", tc.tmin, sliceT, dec)
			}
			continue
		}
		if len(dec) != 1 || dec[0].GPUType != slice || math.Abs(dec[0].PredThroughput-sliceT) > 1e-9 ||
			!strings.HasPrefix(dec[0].Assign[0].InstanceIDs[0], "MIG-") {
			t.Errorf("T_min %v: decisions %+v, want the slice type %s at %v", tc.tmin, dec, slice, sliceT)
		}
	}
}
