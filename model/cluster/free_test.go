package cluster

import (
	"fmt"
	"slices"
	"sync"
	"testing"
)

// freeNode is a ready node with one group of GPUs "<id>-0".. of which those in unhealthy are
// unhealthy.
func freeNode(id, gpuType, name string, gpus int, unhealthy ...int) Node {
	g := DeviceGroup{Vendor: "nvidia", Type: "gpu", Name: name, GPUType: gpuType}
	for k := range gpus {
		g.Instances = append(g.Instances, Instance{ID: fmt.Sprintf("%s-%d", id, k), Healthy: !slices.Contains(unhealthy, k)})
	}
	return Node{ID: id, Status: "ready", Eligible: true, Devices: []DeviceGroup{g}}
}

func TestFreeIndex(t *testing.T) {
	draining := freeNode("d", "a100", "NVIDIA A100", 2)
	draining.Draining = true
	untyped := freeNode("u", "", "NVIDIA A100-SXM4-40GB MIG 1g.5gb", 2)
	snap := &Snapshot{
		Nodes: []Node{freeNode("a", "v100", "Tesla V100", 4, 3), draining, freeNode("b", "v100", "Tesla V100", 2), untyped},
		Running: []Alloc{
			{NodeID: "a", DeviceIDs: []string{"a-0"}},
			{NodeID: "a", DeviceIDs: []string{"a-1"}, Shared: true},
			{NodeID: "a", DeviceIDs: []string{"a-1"}, Shared: true},
			// An instance ID of another node: instance IDs are unique per node only.
			{NodeID: "x", DeviceIDs: []string{"b-0"}},
			{NodeID: "d", DeviceIDs: []string{"d-0"}},
		},
	}
	f := snap.Free()
	type group struct {
		node, typ string
		ids       []string
	}
	var got []group
	for _, fg := range f.Groups() {
		got = append(got, group{fg.Node.ID, fg.Type, fg.IDs})
	}
	want := []group{
		{"a", "v100", []string{"a-2"}}, // a-0, a-1 held, a-3 unhealthy
		{"b", "v100", []string{"b-0", "b-1"}},
		{"u", "a100-mig-1g.5gb", []string{"u-0", "u-1"}}, // the type the MIG name names
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("Groups() = %v, want %v (the draining node left out)", got, want)
	}
	for _, c := range []struct {
		name      string
		got, want int
	}{
		{"GPUs", f.GPUs(), 5},
		{"Healthy", f.Healthy(), 3 + 2 + 2},
		{"TypeGPUs(v100)", f.TypeGPUs("v100"), 3},
		{"TypeGPUs(a100)", f.TypeGPUs("a100"), 0},
		{"NodeGPUs(a)", f.NodeGPUs("a"), 1},
		{"NodeGPUs(d)", f.NodeGPUs("d"), 0},
		{"Holders(a, a-1)", f.Holders("a", "a-1"), 2},
		{"Holders(b, b-0)", f.Holders("b", "b-0"), 0},
		{"Holders(d, d-0)", f.Holders("d", "d-0"), 1},
	} {
		if c.got != c.want {
			t.Errorf("%s = %d, want %d", c.name, c.got, c.want)
		}
	}
}

func TestFreeIndexMemo(t *testing.T) {
	base := &Snapshot{Nodes: []Node{freeNode("a", "v100", "Tesla V100", 4)},
		Running: []Alloc{{NodeID: "a", DeviceIDs: []string{"a-0"}}}}
	if base.Free() == base.Free() {
		t.Fatal("a snapshot nobody indexed shares one index between calls; it has nowhere to keep it")
	}
	snap := base.Indexed()
	if snap == base || base.free != nil {
		t.Fatal("Indexed modified the snapshot it was given")
	}
	if snap.Indexed() != snap || snap.Free() != snap.Free() {
		t.Fatal("an indexed snapshot builds its index again")
	}
	cp := *snap
	cp.Pending = []Job{{ID: "j"}}
	if cp.Free() != snap.Free() {
		t.Error("a copy that keeps Nodes and Running does not share the index")
	}
	cp.Running = nil
	if got := cp.Free().GPUs(); got != 4 {
		t.Errorf("a copy without the running allocation has %d free GPUs, want 4 (a stale index)", got)
	}
	if got := cp.Indexed().Free().GPUs(); got != 4 {
		t.Errorf("the copy indexed again has %d free GPUs, want 4", got)
	}
}

// TestFreeIndexConcurrentReaders is for -race: an indexed snapshot is read from many
// goroutines at once (the placer's candidate workers, the explain API), the first of them
// building the index, and all get the one index.
func TestFreeIndexConcurrentReaders(t *testing.T) {
	snap := benchSnapshot(64).Indexed()
	got := make([]*FreeIndex, 8)
	var wg sync.WaitGroup
	for i := range got {
		wg.Go(func() {
			f := snap.Free()
			n := 0
			for _, g := range f.Groups() {
				n += len(g.IDs)
			}
			if n != f.GPUs() {
				t.Errorf("reader %d saw %d free instances in the groups, %d in the count", i, n, f.GPUs())
			}
			got[i] = f
		})
	}
	wg.Wait()
	for i, f := range got {
		if f != snap.Free() {
			t.Errorf("reader %d saw index %p, the snapshot has %p", i, f, snap.Free())
		}
	}
}

// benchSnapshot has nodes of 8 GPUs, half of them held by running allocations.
func benchSnapshot(nodes int) *Snapshot {
	snap := &Snapshot{}
	types := []string{"v100", "a100", "h100", "t4"}
	for i := range nodes {
		id := fmt.Sprintf("node-%04d", i)
		snap.Nodes = append(snap.Nodes, freeNode(id, types[i%len(types)], "GPU", 8, i%7))
		for k := 0; k < 8; k += 2 + i%3 {
			snap.Running = append(snap.Running, Alloc{NodeID: id, DeviceIDs: []string{fmt.Sprintf("%s-%d", id, k)}})
		}
	}
	return snap
}

// BenchmarkFreeIndex1024 builds the index of a 1,024-GPU snapshot, once per round.
func BenchmarkFreeIndex1024(b *testing.B) {
	snap := benchSnapshot(128)
	b.ReportAllocs()
	for b.Loop() {
		if snap.Indexed().Free().GPUs() == 0 {
			b.Fatal("no free GPUs")
		}
	}
}
