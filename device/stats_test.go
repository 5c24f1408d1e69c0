package device

import (
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/hetgpu/hetgpu/device/fake"
	"github.com/hetgpu/hetgpu/plugin/proto/device"
	"github.com/hetgpu/hetgpu/plugin/proto/structs"
)

// fakeInventory enumerates a fake fleet directly (no gRPC), for stats and topology checks.
func fakeInventory(t testing.TB, spec fake.Spec) (*fake.Fleet, *inventory) {
	t.Helper()
	f, err := fake.New(spec)
	if err != nil {
		t.Fatal(err)
	}
	if r := f.Init(); r != nvml.SUCCESS {
		t.Fatal(r)
	}
	inv, err := enumerate(f, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return f, inv
}

func statOf(t *testing.T, resp *device.StatsResponse, uuid string) *device.DeviceStats {
	t.Helper()
	for _, g := range resp.Groups {
		if s, ok := g.InstanceStats[uuid]; ok {
			return s
		}
	}
	t.Fatalf("no stats for %s", uuid)
	return nil
}

func TestStatsValues(t *testing.T) {
	f, inv := fakeInventory(t, fake.Spec{GPUs: []string{"1x T4", "2x A100-SXM4-40GB"}, MIG: []fake.MIG{{GPU: 2, Profiles: []string{"3g.20gb"}}}})
	f.SetLoad(0, 0.5, 0.25, 4096)
	now := time.Unix(1_800_000_000, 0)
	resp := collectStats(inv, now)
	if len(resp.Groups) != 3 {
		t.Fatalf("groups: %d", len(resp.Groups))
	}
	for _, g := range resp.Groups {
		if g.Vendor != "nvidia" || g.Type != "gpu" || g.Name == "" {
			t.Errorf("group %v", g)
		}
		for id, s := range g.InstanceStats {
			if !s.Timestamp.AsTime().Equal(now) || s.Summary == nil {
				t.Errorf("%s: timestamp %v summary %v", id, s.Timestamp, s.Summary)
			}
		}
	}
	t4 := statOf(t, resp, f.UUIDs()[0]).Stats.Attributes
	// T4 datasheet: idle 9 W, TDP 70 W; at 50 % load with alpha 0.7:
	// 9 + (70 - 9) x 0.5^0.7 = 9 + 61 x 0.61557 = 46.55 W.
	const wantW = 46.5499
	if got := t4[StatPowerDraw].FloatNumeratorVal.GetValue(); math.Abs(got-wantW) > 0.01 || t4[StatPowerDraw].Unit != "W" {
		t.Errorf("power_draw = %v, want %.2f W", got, wantW)
	}
	checks := map[string]int64{StatGPUUtilization: 50, StatMemoryUtilization: 25, StatPowerLimit: 70}
	for k, want := range checks {
		if got := t4[k].IntNumeratorVal.GetValue(); got != want {
			t.Errorf("%s = %d, want %d", k, got, want)
		}
	}
	if m := t4[StatMemory]; m.IntNumeratorVal.GetValue() != 4096 || m.IntDenominatorVal.GetValue() != 15360 || m.Unit != "MiB" {
		t.Errorf("memory = %v", m)
	}
	if t4[StatThrottleReasons].StringVal.GetValue() != "none" || t4[StatEnergy].Unit != "J" || t4[StatTemperature].Unit != "C" {
		t.Errorf("throttle %v energy %v temp %v", t4[StatThrottleReasons], t4[StatEnergy], t4[StatTemperature])
	}
	for _, k := range []string{StatSMClock, StatMemoryClock, StatECCErrorsCorrected, StatECCErrorsUncorrected} {
		if t4[k] == nil {
			t.Errorf("stat %s missing", k)
		}
	}
	sum := statOf(t, resp, f.UUIDs()[0]).Summary
	if sum.FloatDenominatorVal.GetValue() != 70 || math.Abs(sum.FloatNumeratorVal.GetValue()-wantW) > 0.01 {
		t.Errorf("summary = %v", sum)
	}
	// The MIG device: its own memory, N/A utilisation, the parent's power, topology parent.
	mig := statOf(t, resp, f.GPU(2).MIGUUIDs()[0])
	if mig.Stats.Attributes[StatGPUUtilization].StringVal.GetValue() != "N/A" ||
		mig.Stats.Attributes[StatMemory].IntDenominatorVal.GetValue() != 19968 ||
		!strings.HasSuffix(mig.Stats.Attributes[StatPowerDraw].Desc, "(whole GPU)") ||
		mig.Stats.Nested[StatTopology].Attributes[StatParentUUID].StringVal.GetValue() != f.UUIDs()[2] {
		t.Errorf("MIG stats %v", mig.Stats)
	}
	// Failing queries turn into N/A, never an error.
	f.SetError(1, "power", nvml.ERROR_GPU_IS_LOST)
	a100 := statOf(t, collectStats(inv, now), f.UUIDs()[1])
	if a100.Stats.Attributes[StatPowerDraw].StringVal.GetValue() != "N/A" || a100.Summary.StringVal.GetValue() != "N/A" {
		t.Errorf("failed power query: %v", a100.Stats.Attributes[StatPowerDraw])
	}
}

func TestTopology(t *testing.T) {
	f, inv := fakeInventory(t, fake.Spec{GPUs: []string{"2x T4", "4x V100", "dgxa100"}})
	uuids := f.UUIDs()
	topo := func(i int) *structs.StatObject {
		return statOf(t, collectStats(inv, time.Now()), uuids[i]).Stats.Nested[StatTopology]
	}
	str := func(o *structs.StatObject, k string) string { return o.Attributes[k].StringVal.GetValue() }
	// T4s: no NVLink, behind one PCIe switch.
	if p := str(topo(0), StatNVLinkPeers); p != "" {
		t.Errorf("T4 peers %q", p)
	}
	if str(topo(0), StatPCIeSwitch) == "" || str(topo(0), StatPCIeSwitch) != str(topo(1), StatPCIeSwitch) {
		t.Errorf("T4 switches %q %q", str(topo(0), StatPCIeSwitch), str(topo(1), StatPCIeSwitch))
	}
	// V100s (direct links): each sees the other three of its box, nothing else.
	peers := strings.Split(str(topo(2), StatNVLinkPeers), ",")
	if len(peers) != 3 || strings.Contains(str(topo(2), StatNVLinkPeers), uuids[0]) || strings.Contains(str(topo(2), StatNVLinkPeers), uuids[6]) {
		t.Errorf("V100 peers %v", peers)
	}
	// DGX A100 (NVSwitch): every GPU of the box is a peer; NUMA halves; switch pairs differ.
	if n := len(strings.Split(str(topo(6), StatNVLinkPeers), ",")); n != 7 {
		t.Errorf("A100 peers: %d, want 7", n)
	}
	if str(topo(6), StatNUMANode) != "0" || str(topo(13), StatNUMANode) != "1" {
		t.Errorf("NUMA %q %q", str(topo(6), StatNUMANode), str(topo(13), StatNUMANode))
	}
	if str(topo(6), StatPCIeSwitch) == str(topo(8), StatPCIeSwitch) || str(topo(6), StatPCIeSwitch) != str(topo(7), StatPCIeSwitch) {
		t.Errorf("A100 switches %q %q %q", str(topo(6), StatPCIeSwitch), str(topo(7), StatPCIeSwitch), str(topo(8), StatPCIeSwitch))
	}
	if str(topo(6), StatPCIBusID) != "0000:30:00.0" {
		t.Errorf("bus id %q", str(topo(6), StatPCIBusID))
	}
}

// NVLink peers stay inside one fake entry: two NVSwitch boxes on one node are two fabrics
// (issue 14: every A100 listed the H100s of the other box as peers).
func TestNVLinkPeersStayInTheirEntry(t *testing.T) {
	tests := []struct {
		name string
		gpus []string
		// nvlink: per entry, whether its GPUs are NVLink peers of each other.
		nvlink []bool
	}{
		{"A100 box and H100 box", []string{"4x A100-SXM4-40GB", "4x H100-SXM5-80GB"}, []bool{true, true}},
		{"two DGX boxes", []string{"dgxa100", "dgxh100"}, []bool{true, true}},
		{"two A100 entries", []string{"2x A100-SXM4-80GB", "2x A100-SXM4-80GB"}, []bool{true, true}},
		{"two V100 meshes and T4s", []string{"2x V100", "3x V100", "2x T4"}, []bool{true, true, false}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, inv := fakeInventory(t, fake.Spec{GPUs: tt.gpus})
			uuids := f.UUIDs()
			// entry of each GPU, in fleet order
			var entry []int
			for e, g := range tt.gpus {
				n := 8
				if c, _, ok := strings.Cut(g, "x "); ok {
					n, _ = strconv.Atoi(c)
				}
				for range n {
					entry = append(entry, e)
				}
			}
			if len(entry) != len(uuids) {
				t.Fatalf("%d GPUs, expected %d", len(uuids), len(entry))
			}
			stats := collectStats(inv, time.Now())
			for i, u := range uuids {
				var want []string
				for j, v := range uuids {
					if j != i && entry[j] == entry[i] && tt.nvlink[entry[i]] {
						want = append(want, v)
					}
				}
				slices.Sort(want)
				got := statOf(t, stats, u).Stats.Nested[StatTopology].Attributes[StatNVLinkPeers].StringVal.GetValue()
				if got != strings.Join(want, ",") {
					t.Errorf("GPU %d (entry %d) peers %q, want %q", i, entry[i], got, strings.Join(want, ","))
				}
			}
		})
	}
}

func TestStatsStream(t *testing.T) {
	s := serve(t, `fake {
  gpus = ["2x T4"]
}`)
	s.fingerprints(t).next()
	stream, err := s.device.Stats(t.Context(), &device.StatsRequest{CollectionInterval: durationpb.New(50 * time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	s.fleet(t).SetError(0, "all", nvml.ERROR_UNKNOWN)
	for i := range 3 {
		resp, err := stream.Recv()
		if err != nil {
			t.Fatalf("stats message %d: %v", i, err)
		}
		if len(resp.Groups) != 1 || len(resp.Groups[0].InstanceStats) != 2 {
			t.Fatalf("stats %v", resp)
		}
	}
}

func TestThrottleString(t *testing.T) {
	tests := map[uint64]string{
		0:                             "none",
		nvml.ClocksEventReasonGpuIdle: "idle",
		nvml.ClocksEventReasonSwPowerCap | nvml.ClocksThrottleReasonHwThermalSlowdown: "sw_power_cap,hw_thermal",
		1 << 40: "other",
	}
	for in, want := range tests {
		if got := throttleString(in); got != want {
			t.Errorf("throttleString(%#x) = %q, want %q", in, got, want)
		}
	}
}

// BenchmarkCollectStats8GPUs measures one stats collection over an 8-GPU DGX A100 node.
func BenchmarkCollectStats8GPUs(b *testing.B) {
	f, inv := fakeInventory(b, fake.Spec{GPUs: []string{"dgxa100"}})
	for i := range 8 {
		f.SetLoad(i, 0.6, 0.4, 20000)
	}
	now := time.Now()
	b.ReportAllocs()
	for b.Loop() {
		if resp := collectStats(inv, now); len(resp.Groups[0].InstanceStats) != 8 {
			b.Fatal("missing stats")
		}
	}
}
