package dashboard_test

import (
	"math"
	"sort"
	"testing"
	"time"

	"github.com/hetgpu/hetgpu/model/cluster"
	"github.com/hetgpu/hetgpu/sidecar/runtime/dashboard"
	"github.com/hetgpu/hetgpu/sidecar/runtime/store"
)

func f64(v float64) *float64 { return &v }

// testSnapshot: a ready A100 node (one GPU unhealthy, one held, two shared by two jobs, one
// MIG group), a draining T4 node with one GPU held, and a CPU-only node.
func testSnapshot() *cluster.Snapshot {
	mem := int64(40960)
	inst := func(id string, healthy bool, why string) cluster.Instance {
		return cluster.Instance{ID: id, Healthy: healthy, HealthDescription: why}
	}
	return &cluster.Snapshot{
		Now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
		Nodes: []cluster.Node{
			{ID: "n1", Name: "gpu-a", Class: "a100", Datacenter: "dc1", Pool: "default", Status: "ready", Eligible: true,
				Devices: []cluster.DeviceGroup{
					{Vendor: "nvidia", Type: "gpu", Name: "NVIDIA A100-SXM4-40GB", GPUType: "a100",
						Attributes: map[string]cluster.Attribute{"memory": {Int: &mem, Unit: "MiB"}},
						Instances: []cluster.Instance{inst("A0", true, ""), inst("A1", false, "XID 79: GPU has fallen off the bus"),
							inst("A2", true, ""), inst("A3", true, ""), inst("A4", true, "")}},
					{Vendor: "nvidia", Type: "gpu", Name: "NVIDIA A100-SXM4-40GB MIG 3g.20gb", GPUType: "a100",
						Instances: []cluster.Instance{inst("MIG-1", true, "")}},
				}},
			{ID: "n2", Name: "gpu-t", Class: "t4", Datacenter: "dc1", Pool: "default", Status: "ready", Eligible: true, Draining: true,
				Devices: []cluster.DeviceGroup{{Vendor: "nvidia", Type: "gpu", Name: "Tesla T4", GPUType: "t4",
					Instances: []cluster.Instance{inst("T0", true, ""), inst("T1", true, "")}}}},
			{ID: "n3", Name: "cpu", Class: "cpu", Status: "ready", Eligible: true},
		},
		Running: []cluster.Alloc{
			{ID: "a-1", Namespace: "default", JobID: "bert", Group: "train", NodeID: "n1", DeviceIDs: []string{"A2"}, GPUType: "a100"},
			{ID: "a-2", Namespace: "ml", JobID: "small", Group: "g", NodeID: "n1", DeviceIDs: []string{"A3"}, GPUType: "a100", Shared: true},
			{ID: "a-3", Namespace: "ml", JobID: "tiny", Group: "g", NodeID: "n1", DeviceIDs: []string{"A3"}, GPUType: "a100", Shared: true},
			{ID: "a-4", Namespace: "default", JobID: "old", Group: "g", NodeID: "n2", DeviceIDs: []string{"T0"}, GPUType: "t4"},
		},
	}
}

func gpuStates(fl dashboard.Fleet) map[string]string {
	out := map[string]string{}
	for _, n := range fl.Nodes {
		for _, g := range n.GPUs {
			out[g.ID] = g.State
		}
	}
	return out
}

func TestBuildFleet(t *testing.T) {
	stats := map[string]cluster.DeviceStats{
		"A0": {PowerW: f64(60), PowerLimitW: f64(400), UtilPct: f64(0)},
		"A2": {PowerW: f64(350), PowerLimitW: f64(400), UtilPct: f64(90)},
	}
	all := dashboard.BuildFleet(testSnapshot(), stats, "nomad", dashboard.FleetFilter{})
	if all.NodeCount != 2 || all.GPUCount != 8 || !all.Readings {
		t.Fatalf("counts: %d nodes, %d GPUs, readings %t; want 2 GPU nodes, 8 GPUs, readings", all.NodeCount, all.GPUCount, all.Readings)
	}
	want := map[string]string{"A0": "free", "A1": "unhealthy", "A2": "busy", "A3": "shared", "A4": "free", "MIG-1": "free",
		"T0": "busy", "T1": "unavailable"}
	got := gpuStates(all)
	for id, st := range want {
		if got[id] != st {
			t.Errorf("GPU %s state %q, want %q", id, got[id], st)
		}
	}
	a100 := all.Totals[0]
	if a100.GPUType != "a100" || a100.GPUs != 6 || a100.Free != 3 || a100.Busy != 2 || a100.Unhealthy != 1 ||
		a100.PowerW != 410 || a100.MeanUtilPct != 45 {
		t.Errorf("a100 totals = %+v", a100)
	}
	if g := all.Nodes[0].GPUs[0]; g.MemoryMiB != 40960 || g.Stats == nil || *g.Stats.PowerW != 60 {
		t.Errorf("A0 = %+v", g)
	}
	if g := all.Nodes[0].GPUs[3]; len(g.Allocs) != 2 || g.Allocs[1].JobID != "tiny" {
		t.Errorf("A3 holders = %+v", g.Allocs)
	}
	if g := all.Nodes[0].GPUs[5]; !g.MIG {
		t.Errorf("MIG-1 not marked as a MIG slice: %+v", g)
	}
	if len(all.GPUTypes) != 2 || len(all.Classes) != 2 {
		t.Errorf("filter values: types %v classes %v (the CPU-only node's class is no GPU class)", all.GPUTypes, all.Classes)
	}

	for _, tc := range []struct {
		name string
		f    dashboard.FleetFilter
		want []string
	}{
		{"type", dashboard.FleetFilter{GPUType: "T4"}, []string{"T0", "T1"}},
		{"class", dashboard.FleetFilter{Class: "a100"}, []string{"A0", "A1", "A2", "A3", "A4", "MIG-1"}},
		{"unhealthy", dashboard.FleetFilter{Health: "unhealthy"}, []string{"A1"}},
		{"healthy a100 free", dashboard.FleetFilter{GPUType: "a100", Health: "healthy", State: "free"}, []string{"A0", "A4", "MIG-1"}},
		{"shared", dashboard.FleetFilter{State: "shared"}, []string{"A3"}},
		{"none", dashboard.FleetFilter{GPUType: "h100"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fl := dashboard.BuildFleet(testSnapshot(), nil, "nomad", tc.f)
			var ids []string
			for id := range gpuStates(fl) {
				ids = append(ids, id)
			}
			sort.Strings(ids)
			if len(ids) != len(tc.want) {
				t.Fatalf("filter %+v selects %v, want %v", tc.f, ids, tc.want)
			}
			for i := range ids {
				if ids[i] != tc.want[i] {
					t.Fatalf("filter %+v selects %v, want %v", tc.f, ids, tc.want)
				}
			}
			if fl.GPUCount != 8 || fl.NodeCount != 2 {
				t.Errorf("the whole fleet's counts must not depend on the filter: %d GPUs, %d nodes", fl.GPUCount, fl.NodeCount)
			}
			n := 0
			for _, tt := range fl.Totals {
				n += tt.GPUs
			}
			if n != len(tc.want) {
				t.Errorf("totals count %d GPUs, the filter selects %d", n, len(tc.want))
			}
		})
	}
	if fl := dashboard.BuildFleet(nil, nil, "nomad", dashboard.FleetFilter{}); fl.GPUCount != 0 || fl.Nodes == nil || fl.Totals == nil {
		t.Errorf("before the first round: %+v (want zero counts and empty, non-nil lists for JSON)", fl)
	}
}

func obs(ns, job, typ string, gpus int, thr, energy, runtime float64, batch int, at time.Time) store.ObservationRecord {
	return store.ObservationRecord{Source: "driver", Obs: cluster.Observation{Namespace: ns, JobID: job, Group: "train", GPUType: typ,
		GPUs: gpus, Throughput: thr, EnergyJ: energy, RuntimeS: runtime, BatchSize: batch, Time: at}}
}

func TestBuildEnergy(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	runs := []store.ObservationRecord{
		obs("default", "a", "v100", 2, 10, 7.2e6, 3600, 32, t0),
		obs("ml", "b", "v100", 1, 5, 3.6e6, 3600, 0, t0.Add(3*time.Hour)),
		obs("ml", "c", "t4", 1, 0, 1e6, 1800, 0, t0.Add(6*time.Hour)), // no throughput: energy, no work
	}
	en := dashboard.BuildEnergy(runs)
	if en.Runs != 3 || en.EnergyJ != 11.8e6 {
		t.Fatalf("runs %d energy %g", en.Runs, en.EnergyJ)
	}
	for _, tc := range []struct {
		group          []dashboard.EnergyGroup
		i              int
		key            string
		runs           int
		jPerStep, kwhH float64
		jPerSample     float64
	}{
		{en.ByType, 0, "t4", 1, 0, 1e6 / 3.6e6 / 0.5, 0},
		{en.ByType, 1, "v100", 2, (7.2e6 + 3.6e6) / (36000 + 18000), 3.0 / 3, 7.2e6 / (36000 * 32)},
		{en.ByNamespace, 0, "default", 1, 7.2e6 / 36000, 1, 7.2e6 / (36000 * 32)},
		{en.ByNamespace, 1, "ml", 2, 3.6e6 / 18000, (3.6e6 + 1e6) / 3.6e6 / 1.5, 0},
	} {
		g := tc.group[tc.i]
		if g.Key != tc.key || g.Runs != tc.runs || math.Abs(g.JPerStep-tc.jPerStep) > 1e-9 ||
			math.Abs(g.KWhPerGPUHour-tc.kwhH) > 1e-9 || math.Abs(g.JPerSample-tc.jPerSample) > 1e-12 {
			t.Errorf("group %s = %+v; want runs %d, J/step %g, kWh/GPU-h %g, J/sample %g", tc.key, g, tc.runs, tc.jPerStep, tc.kwhH, tc.jPerSample)
		}
	}
	// 6 h span: 15-min buckets would be 24; 1800 s is the first nice width that fits.
	if en.BucketS != 1800 || len(en.Buckets) != 13 {
		t.Fatalf("bucket %g s × %d, want 1800 s × 13", en.BucketS, len(en.Buckets))
	}
	if en.Buckets[0].ByType["v100"] != 7.2e6 || en.Buckets[6].ByNamespace["ml"] != 3.6e6 || en.Buckets[12].ByType["t4"] != 1e6 {
		t.Errorf("buckets put runs in the wrong place: %+v", en.Buckets)
	}
	if e := dashboard.BuildEnergy(nil); e.Runs != 0 || e.Buckets == nil || e.ByType == nil {
		t.Errorf("no runs: %+v", e)
	}
}

func TestBuildLearning(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	runs := []store.ObservationRecord{
		obs("default", "a", "v100", 1, 10, 3.6e5, 3600, 0, t0),        // predicted 11: 10 % off; 100 W measured
		obs("default", "b", "v100", 1, 10, 3.6e5, 3600, 0, t0),        // predicted 10: exact
		obs("default", "c", "t4", 1, 4, 0, 3600, 0, t0),               // predicted 2: 50 % off, no power measured
		obs("default", "d", "t4", 1, 4, 0, 3600, 0, t0),               // no prediction
		obs("default", "e", "t4", 1, 0, 3.6e5, 3600, 0, t0),           // no throughput
		obs("default", "f", "a100", 1, 20, 3.6e5, 3600, 0, t0),        // predicted 0: not comparable
		obs("default", "g", "v100", 2, 20, 7.2e5, 3600, 0, t0),        // predicted 30, power 300 vs 200
		obs("default", "h", "v100", 1, 10, 3.6e5, 3600, 0, t0.Add(1)), // predicted 9.5: within 10 %
	}
	pred := map[string][2]float64{"a": {11, 100}, "b": {10, 120}, "c": {2, 0}, "g": {30, 300}, "h": {9.5, 0}}
	lookup := func(o *cluster.Observation) (float64, float64, bool) {
		p, ok := pred[o.JobID]
		return p[0], p[1], ok
	}
	l := dashboard.BuildLearning(runs, lookup, "bundled:default", map[string]float64{"adopted": 1})
	if l.Runs != 8 || len(l.Points) != 5 || l.Policy != "bundled:default" || l.Tuning["adopted"] != 1 {
		t.Fatalf("learning = %+v", l)
	}
	if len(l.ByType) != 2 {
		t.Fatalf("by type = %+v", l.ByType)
	}
	t4, v100 := l.ByType[0], l.ByType[1]
	if t4.GPUType != "t4" || t4.Runs != 1 || t4.MeanThrErr != 0.5 || t4.Within10 != 0 || t4.MeanPowerErr != 0 {
		t.Errorf("t4 = %+v", t4)
	}
	// Errors 0.1, 0, 0.5, 0.05; power errors 0 (100 vs 100 W), 0.2 (120 vs 100), 0.5 (300 vs 200).
	if v100.Runs != 4 || math.Abs(v100.MeanThrErr-0.1625) > 1e-9 || v100.Within10 != 0.75 || math.Abs(v100.MeanPowerErr-0.7/3) > 1e-9 {
		t.Errorf("v100 = %+v", v100)
	}
}
