package fake

import (
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/hetgpu/hetgpu/model/gpuspec"
)

func TestParseEntry(t *testing.T) {
	tests := []struct {
		in      string
		count   int
		key     string
		wantErr string
	}{
		{"4x T4", 4, "T4", ""},
		{"2 x A100-SXM4-40GB", 2, "A100-SXM4-40GB", ""},
		{"H100-SXM5-80GB", 1, "H100-SXM5-80GB", ""},
		{"3X h100", 3, "H100-SXM5-80GB", ""},
		{"1x Tesla V100-SXM2-16GB", 1, "V100", ""},
		{"dgxa100", 8, "A100-SXM4-40GB", ""},
		{"DGXH200", 8, "H200-SXM-141GB", ""},
		{"2x K80", 2, "K80", ""},
		{"1x P100", 1, "P100", ""},
		{"1x A10", 1, "A10", ""},
		{"1x L4", 1, "L4", ""},
		{"0x T4", 0, "", "count 0"},
		{"100x T4", 0, "", "count 100"},
		{"2x Z9", 0, "", `unknown model "Z9"`},
		{"", 0, "", "unknown model"},
	}
	for _, tt := range tests {
		e, err := ParseEntry(tt.in)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("ParseEntry(%q) error = %v, want %q", tt.in, err, tt.wantErr)
			}
			continue
		}
		if err != nil || e.Count != tt.count || e.Model.Key != tt.key {
			t.Errorf("ParseEntry(%q) = %d %s, %v; want %d %s", tt.in, e.Count, e.Model.Key, err, tt.count, tt.key)
		}
	}
}

func TestEveryModelHasDatasheetAndBandwidth(t *testing.T) {
	table := gpuspec.Default()
	for _, m := range models() {
		ds, ok := specFor(table, m)
		if !ok {
			t.Errorf("%s: no gpu-specs.csv row %q", m.Key, m.SpecModel)
			continue
		}
		// The clock/bus-width figures must reproduce the datasheet bandwidth within 2 %.
		bw := 2 * float64(m.MaxMemMHz) * float64(m.BusWidth) / 8 / 1000
		if math.Abs(bw-ds.MemBandwidthGBps)/ds.MemBandwidthGBps > 0.02 {
			t.Errorf("%s: bandwidth from clocks %.0f GB/s, datasheet %.0f", m.Key, bw, ds.MemBandwidthGBps)
		}
		if m.MinPowerW == 0 || float64(m.MinPowerW) >= ds.TDPW {
			t.Errorf("%s: min power %d W not below TDP %.0f W", m.Key, m.MinPowerW, ds.TDPW)
		}
	}
}

func TestNewMixAndUUIDs(t *testing.T) {
	spec := Spec{GPUs: []string{"4x T4", "2x A100-SXM4-40GB"}, Seed: "node-a"}
	f, err := New(spec)
	if err != nil {
		t.Fatal(err)
	}
	if n, r := f.DeviceGetCount(); r != nvml.SUCCESS || n != 6 {
		t.Fatalf("count = %d, %v", n, r)
	}
	wantNames := []string{"Tesla T4", "Tesla T4", "Tesla T4", "Tesla T4", "NVIDIA A100-SXM4-40GB", "NVIDIA A100-SXM4-40GB"}
	seen := map[string]bool{}
	for i, want := range wantNames {
		d, r := f.DeviceGetHandleByIndex(i)
		if r != nvml.SUCCESS {
			t.Fatal(r)
		}
		name, _ := d.GetName()
		uuid, _ := d.GetUUID()
		if name != want || !strings.HasPrefix(uuid, "GPU-") || seen[uuid] {
			t.Errorf("gpu %d: %q %q", i, name, uuid)
		}
		seen[uuid] = true
	}
	again, _ := New(spec)
	other, _ := New(Spec{GPUs: spec.GPUs, Seed: "node-b"})
	if strings.Join(again.UUIDs(), ",") != strings.Join(f.UUIDs(), ",") {
		t.Error("same seed must give the same UUIDs")
	}
	if other.UUIDs()[0] == f.UUIDs()[0] {
		t.Error("different seeds must give different UUIDs")
	}
	mem, _ := f.GPU(4).h.GetMemoryInfo()
	if mem.Total != 40960<<20 {
		t.Errorf("A100 memory = %d", mem.Total)
	}
}

func TestPowerCurveAndEnergy(t *testing.T) {
	var mu sync.Mutex
	now := time.Unix(1000, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	f, err := New(Spec{GPUs: []string{"1x V100"}, Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	ds, _ := gpuspec.Default().Lookup("V100-SXM2-16GB")
	d, _ := f.DeviceGetHandleByIndex(0)
	for _, u := range []float64{0, 0.25, 0.5, 1} {
		f.SetLoad(0, u, u/2, 1024)
		want := ds.IdleW + (ds.TDPW-ds.IdleW)*math.Pow(u, DefaultPowerAlpha)
		mw, r := d.GetPowerUsage()
		if r != nvml.SUCCESS || math.Abs(float64(mw)/1000-want) > 0.01 || math.Abs(f.PowerW(0)-want) > 1e-9 {
			t.Errorf("util %.2f: power %d mW, want %.2f W", u, mw, want)
		}
	}
	// At full load for 10 s the counter grows by TDP x 10 s.
	e0, _ := d.GetTotalEnergyConsumption()
	advance(10 * time.Second)
	e1, _ := d.GetTotalEnergyConsumption()
	if got, want := float64(e1-e0)/1000, ds.TDPW*10; math.Abs(got-want) > 0.01 {
		t.Errorf("energy over 10 s = %.2f J, want %.2f", got, want)
	}
	util, _ := d.GetUtilizationRates()
	mem, _ := d.GetMemoryInfo()
	if util.Gpu != 100 || util.Memory != 50 || mem.Used != 1024<<20 {
		t.Errorf("util %+v mem %+v", util, mem)
	}
}

func TestXIDEventsAndErrors(t *testing.T) {
	f, err := New(Spec{GPUs: []string{"2x T4"}})
	if err != nil {
		t.Fatal(err)
	}
	set, _ := f.EventSetCreate()
	d, _ := f.DeviceGetHandleByIndex(1)
	if r := d.RegisterEvents(nvml.EventTypeXidCriticalError, set); r != nvml.SUCCESS {
		t.Fatal(r)
	}
	if _, r := set.Wait(10); r != nvml.ERROR_TIMEOUT {
		t.Errorf("empty set Wait = %v, want timeout", r)
	}
	f.InjectXID(1, 79)
	e, r := set.Wait(1000)
	if r != nvml.SUCCESS || e.EventData != 79 || e.Device != d || e.EventType != nvml.EventTypeXidCriticalError {
		t.Errorf("event = %+v, %v", e, r)
	}
	f.SetError(1, "power", nvml.ERROR_GPU_IS_LOST)
	if _, r := d.GetPowerUsage(); r != nvml.ERROR_GPU_IS_LOST {
		t.Errorf("power query = %v", r)
	}
	if _, r := d.GetTemperature(nvml.TEMPERATURE_GPU); r != nvml.SUCCESS {
		t.Errorf("other queries must keep working: %v", r)
	}
	f.SetError(1, "all", nvml.ERROR_UNKNOWN)
	if _, r := d.GetTemperature(nvml.TEMPERATURE_GPU); r != nvml.ERROR_UNKNOWN {
		t.Errorf("all: %v", r)
	}
	f.SetError(1, "all", nvml.SUCCESS)
	f.SetError(1, "power", nvml.SUCCESS)
	if _, r := d.GetPowerUsage(); r != nvml.SUCCESS {
		t.Errorf("cleared: %v", r)
	}
	set.Free()
	if _, r := set.Wait(10); r != nvml.ERROR_UNINITIALIZED {
		t.Errorf("freed set Wait = %v", r)
	}
}

func TestInitFailuresAndFaults(t *testing.T) {
	f, err := New(Spec{GPUs: []string{"1x T4"}, InitFailures: 2,
		Faults: []Fault{{GPU: 0, After: 0, Error: "GPU_IS_LOST", Query: "temperature"}}})
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []nvml.Return{nvml.ERROR_DRIVER_NOT_LOADED, nvml.ERROR_DRIVER_NOT_LOADED, nvml.SUCCESS} {
		if r := f.Init(); r != want {
			t.Errorf("Init #%d = %v, want %v", i, r, want)
		}
	}
	d, _ := f.DeviceGetHandleByIndex(0)
	deadline := time.Now().Add(2 * time.Second)
	for {
		if _, r := d.GetTemperature(nvml.TEMPERATURE_GPU); r == nvml.ERROR_GPU_IS_LOST {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("fault was not applied after Init")
		}
		time.Sleep(5 * time.Millisecond)
	}
	f.Close()
}

func TestMIG(t *testing.T) {
	f, err := New(Spec{GPUs: []string{"1x T4", "1x A100-SXM4-40GB"}, MIG: []MIG{{GPU: 1, Profiles: []string{"3g.20gb", "2g.10gb", "1g.5gb"}}}})
	if err != nil {
		t.Fatal(err)
	}
	d, _ := f.DeviceGetHandleByIndex(1)
	if cur, _, _ := d.GetMigMode(); cur != nvml.DEVICE_MIG_ENABLE {
		t.Fatal("MIG mode not enabled")
	}
	var names []string
	for i := range 7 {
		m, r := d.GetMigDeviceHandleByIndex(i)
		if r == nvml.ERROR_NOT_FOUND {
			break
		}
		name, _ := m.GetName()
		uuid, _ := m.GetUUID()
		if !strings.HasPrefix(uuid, "MIG-") {
			t.Errorf("MIG uuid %q", uuid)
		}
		names = append(names, name)
		// The task driver resolves NVIDIA_VISIBLE_DEVICES = <MIG UUID> like real NVML does.
		if byUUID, r := f.DeviceGetHandleByUUID(uuid); r != nvml.SUCCESS || byUUID != m {
			t.Errorf("DeviceGetHandleByUUID(%s) = %v, %v, want the MIG device", uuid, byUUID, r)
		}
	}
	want := "NVIDIA A100-SXM4-40GB MIG 3g.20gb,NVIDIA A100-SXM4-40GB MIG 2g.10gb,NVIDIA A100-SXM4-40GB MIG 1g.5gb"
	if strings.Join(names, ",") != want {
		t.Errorf("MIG names = %v", names)
	}
}

func TestSpecErrors(t *testing.T) {
	tests := []struct {
		spec Spec
		want string
	}{
		{Spec{}, "gpus is empty"},
		{Spec{GPUs: []string{"1x T4", "2x Q9"}}, `gpus[1]`},
		{Spec{GPUs: []string{"1x T4"}, MIG: []MIG{{GPU: 0, Profiles: []string{"1g.5gb"}}}}, "does not support MIG"},
		{Spec{GPUs: []string{"1x A100"}, MIG: []MIG{{GPU: 0, Profiles: []string{"9g.99gb"}}}}, `profile "9g.99gb"`},
		{Spec{GPUs: []string{"1x A100"}, MIG: []MIG{{GPU: 0, Profiles: []string{"7g.40gb", "1g.5gb"}}}}, "8 slices"},
		// Two 3g.20gb take all 8 memory slices: a third slice does not fit (gpuspec.MIGLayout).
		{Spec{GPUs: []string{"1x A100"}, MIG: []MIG{{GPU: 0, Profiles: []string{"3g.20gb", "3g.20gb", "1g.5gb"}}}}, "9 memory slices"},
		{Spec{GPUs: []string{"1x A100"}, MIG: []MIG{{GPU: 3, Profiles: []string{"1g.5gb"}}}}, "mig[0]: gpu 3"},
		{Spec{GPUs: []string{"1x T4"}, Faults: []Fault{{GPU: 0}}}, "neither xid nor error"},
		{Spec{GPUs: []string{"1x T4"}, Faults: []Fault{{GPU: 0, Error: "BROKEN"}}}, `error "BROKEN"`},
		{Spec{GPUs: []string{"1x T4"}, Faults: []Fault{{GPU: 0, XID: 79, Query: "fan"}}}, `query "fan"`},
		{Spec{GPUs: []string{"1x T4"}, Faults: []Fault{{GPU: 1, XID: 79}}}, "fault[0]: gpu 1"},
		{Spec{GPUs: []string{"1x T4"}, PowerAlpha: -1}, "power_alpha"},
		{Spec{GPUs: []string{"40x T4", "40x T4"}}, "at most 64"},
	}
	for _, tt := range tests {
		_, err := New(tt.spec)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("New(%+v) error = %v, want %q", tt.spec, err, tt.want)
		}
	}
}

func TestParseReturn(t *testing.T) {
	for in, want := range map[string]nvml.Return{"GPU_IS_LOST": nvml.ERROR_GPU_IS_LOST, "error_unknown": nvml.ERROR_UNKNOWN,
		"timeout": nvml.ERROR_TIMEOUT} {
		if r, err := ParseReturn(in); err != nil || r != want {
			t.Errorf("ParseReturn(%q) = %v, %v", in, r, err)
		}
	}
}

func FuzzParseEntry(f *testing.F) {
	for _, s := range []string{"4x T4", "dgxh100", "2 x A100-SXM4-40GB", "x", "0x", "99999999999999999999x T4"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		e, err := ParseEntry(s)
		if err == nil && (e.Count < 1 || e.Count > 64 || e.Model.Key == "") {
			t.Errorf("ParseEntry(%q) = %+v without error", s, e)
		}
	})
}

// The mock records call arguments forever; the handles must bypass that for polled queries.
func TestPolledQueriesDoNotAccumulate(t *testing.T) {
	f, err := New(Spec{GPUs: []string{"2x V100"}})
	if err != nil {
		t.Fatal(err)
	}
	d, _ := f.DeviceGetHandleByIndex(0)
	other, _ := f.DeviceGetHandleByIndex(1)
	for range 100 {
		d.GetClockInfo(nvml.CLOCK_SM)
		d.GetTemperature(nvml.TEMPERATURE_GPU)
		d.GetTotalEccErrors(nvml.MEMORY_ERROR_TYPE_CORRECTED, nvml.VOLATILE_ECC)
		d.GetNvLinkState(0)
		d.GetProcessUtilization(0)
		if lvl, r := d.GetTopologyCommonAncestor(other); r != nvml.SUCCESS || lvl != nvml.TOPOLOGY_SINGLE {
			t.Fatalf("topology = %v %v", lvl, r)
		}
	}
	g := f.GPU(0).dev
	if n := len(g.GetClockInfoCalls()) + len(g.GetTemperatureCalls()) + len(g.GetTotalEccErrorsCalls()) +
		len(g.GetNvLinkStateCalls()) + len(g.GetTopologyCommonAncestorCalls()) + len(f.Server.DeviceGetHandleByIndexCalls()) +
		len(g.GetProcessUtilizationCalls()); n != 0 {
		t.Errorf("mock recorded %d calls", n)
	}
	byUUID, r := f.DeviceGetHandleByUUID(f.UUIDs()[1])
	if r != nvml.SUCCESS || byUUID != other {
		t.Errorf("DeviceGetHandleByUUID = %v, %v", byUUID, r)
	}
	if n := len(f.Server.DeviceGetHandleByUUIDCalls()); n != 0 {
		t.Errorf("mock recorded %d DeviceGetHandleByUUID calls", n)
	}
}

// GetProcessUtilization answers per-process samples of the MPS clients SetProcessLoad put on
// a GPU, with NVML's NOT_FOUND when nothing is newer than lastSeen.
func TestProcessUtilization(t *testing.T) {
	now := time.Unix(2000, 0)
	f, err := New(Spec{GPUs: []string{"2x V100"}, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	d, _ := f.DeviceGetHandleByIndex(0)
	if _, r := d.GetProcessUtilization(0); r != nvml.ERROR_NOT_FOUND {
		t.Errorf("no processes: %v, want NOT_FOUND", r)
	}
	f.SetProcessLoad(0, 42, 0.8)
	f.SetProcessLoad(0, 7, 0.2)
	f.SetProcessLoad(1, 9, 0.5) // another GPU's process
	got, r := d.GetProcessUtilization(0)
	want := []nvml.ProcessUtilizationSample{
		{Pid: 7, TimeStamp: 2000_000_000, SmUtil: 20, MemUtil: 12},
		{Pid: 42, TimeStamp: 2000_000_000, SmUtil: 80, MemUtil: 48},
	}
	if r != nvml.SUCCESS || !slices.Equal(got, want) {
		t.Errorf("samples = %+v %v, want %+v", got, r, want)
	}
	if _, r := d.GetProcessUtilization(2000_000_000); r != nvml.ERROR_NOT_FOUND {
		t.Errorf("nothing newer than lastSeen: %v, want NOT_FOUND", r)
	}
	f.SetProcessLoad(0, 42, 0)
	if got, _ := d.GetProcessUtilization(0); len(got) != 1 || got[0].Pid != 7 {
		t.Errorf("after removing pid 42: %+v", got)
	}
	f.SetError(0, "utilization", nvml.ERROR_NOT_SUPPORTED)
	if _, r := d.GetProcessUtilization(0); r != nvml.ERROR_NOT_SUPPORTED {
		t.Errorf("injected error: %v, want NOT_SUPPORTED", r)
	}
}

// A MIG block is accepted exactly when gpuspec.MIGLayout says its slices fit one GPU (the
// simulator's ":mig=" option follows the same rule).
func TestMIGFollowsGPUSpecLayout(t *testing.T) {
	for _, profiles := range [][]string{
		{"3g.20gb", "3g.20gb"}, {"4g.20gb", "3g.20gb"}, {"7g.40gb"}, {"2g.10gb", "2g.10gb", "2g.10gb", "1g.5gb"},
		{"4g.20gb", "4g.20gb"}, {"7g.40gb", "1g.5gb"}, {"3g.20gb", "3g.20gb", "1g.5gb"},
	} {
		var types []string
		for _, p := range profiles {
			typ, _ := gpuspec.MIGTypeFor("a100", p)
			types = append(types, typ)
		}
		use, _ := gpuspec.MIGLayout(types)
		_, err := New(Spec{GPUs: []string{"1x A100-SXM4-40GB"}, MIG: []MIG{{GPU: 0, Profiles: profiles}}})
		if (err == nil) != use.Fits() {
			t.Errorf("profiles %v: error %v; gpuspec.MIGLayout %+v fits %v", profiles, err, use, use.Fits())
		}
	}
}
