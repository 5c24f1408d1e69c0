package device

import (
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/hetgpu/hetgpu/device/fake"
	"github.com/hetgpu/hetgpu/plugin"
	"github.com/hetgpu/hetgpu/plugin/proto/device"
	"github.com/hetgpu/hetgpu/plugin/proto/structs"
)

const heteroConfig = `
fingerprint_period = "200ms"
fake {
  gpus = ["2x T4", "2x V100", "2x A100-SXM4-40GB", "1x H100-SXM5-80GB"]
  seed = "hetero"
}`

var sysfsBusID = regexp.MustCompile(`^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$`)

type wantAttr struct {
	key  string
	val  any // int64, string or bool
	unit string
}

func checkAttrs(t *testing.T, g *device.DeviceGroup, want []wantAttr) {
	t.Helper()
	for _, w := range want {
		a := g.Attributes[w.key]
		if a == nil {
			t.Errorf("%s: attribute %q missing", g.DeviceName, w.key)
			continue
		}
		var got any
		switch v := a.Value.(type) {
		case *structs.Attribute_IntVal:
			got = v.IntVal
		case *structs.Attribute_StringVal:
			got = v.StringVal
		case *structs.Attribute_BoolVal:
			got = v.BoolVal
		case *structs.Attribute_FloatVal:
			got = v.FloatVal
		}
		if got != w.val || a.Unit != w.unit {
			t.Errorf("%s: %s = %v %q, want %v %q", g.DeviceName, w.key, got, a.Unit, w.val, w.unit)
		}
	}
}

func TestHeterogeneousFingerprint(t *testing.T) {
	s := serve(t, heteroConfig)
	resp := s.fingerprints(t).next()
	var names []string
	for _, g := range resp.DeviceGroup {
		names = append(names, g.DeviceName)
		if g.Vendor != "nvidia" || g.DeviceType != "gpu" {
			t.Errorf("group %s: vendor/type %s/%s", g.DeviceName, g.Vendor, g.DeviceType)
		}
		if err := plugin.ValidateGroup(g); err != nil {
			t.Error(err)
		}
		for _, d := range g.Devices {
			if !d.Healthy || !strings.HasPrefix(d.ID, "GPU-") || !sysfsBusID.MatchString(d.HwLocality.GetPciBusId()) {
				t.Errorf("device %+v", d)
			}
		}
		for k, a := range g.Attributes {
			if k == AttrPower || k == "temperature" || strings.Contains(k, "utilization") {
				if k != AttrPower || a.Unit != "W" {
					t.Errorf("volatile attribute %q must be a stat", k)
				}
			}
		}
	}
	want := []string{"NVIDIA A100-SXM4-40GB", "NVIDIA H100 80GB HBM3", "Tesla T4", "Tesla V100-SXM2-16GB"}
	if !slices.Equal(names, want) {
		t.Fatalf("groups = %v, want %v", names, want)
	}
	for name, n := range map[string]int{"NVIDIA A100-SXM4-40GB": 2, "NVIDIA H100 80GB HBM3": 1, "Tesla T4": 2, "Tesla V100-SXM2-16GB": 2} {
		if got := len(groupByName(resp, name).Devices); got != n {
			t.Errorf("%s: %d devices, want %d", name, got, n)
		}
	}
	common := []wantAttr{{AttrDriverVersion, "550.54.15", ""}, {AttrCUDADriverVersion, "12.4", ""}, {AttrMIG, false, ""}}
	checkAttrs(t, groupByName(resp, "Tesla T4"), append(common, []wantAttr{
		{AttrMemory, int64(15360), "MiB"}, {AttrComputeCapability, "7.5", ""}, {AttrArchitecture, "turing", ""},
		{AttrSMCount, int64(40), ""}, {AttrCUDACores, int64(2560), ""}, {AttrCoresClock, int64(1590), "MHz"},
		{AttrMemoryClock, int64(5001), "MHz"}, {AttrMemoryBusWidth, int64(256), ""}, {AttrMemoryBandwidth, int64(320), "GB/s"},
		{AttrPCIeGeneration, int64(3), ""}, {AttrPCIeWidth, int64(16), ""}, {AttrPCIBandwidth, int64(15760), "MB/s"},
		{AttrNVLinkLinks, int64(0), ""}, {AttrPowerLimit, int64(70), "W"}, {AttrPower, int64(70), "W"},
		{AttrPowerLimitDefault, int64(70), "W"}, {AttrPowerLimitMin, int64(60), "W"}, {AttrPowerLimitMax, int64(70), "W"},
		{AttrECC, false, ""}, {AttrBAR1, int64(256), "MiB"},
	}...))
	checkAttrs(t, groupByName(resp, "Tesla V100-SXM2-16GB"), append(common, []wantAttr{
		{AttrMemory, int64(16384), "MiB"}, {AttrComputeCapability, "7.0", ""}, {AttrArchitecture, "volta", ""},
		{AttrSMCount, int64(80), ""}, {AttrMemoryBandwidth, int64(898), "GB/s"}, {AttrNVLinkLinks, int64(1), ""},
		{AttrPowerLimit, int64(300), "W"}, {AttrECC, true, ""},
	}...))
	checkAttrs(t, groupByName(resp, "NVIDIA A100-SXM4-40GB"), append(common, []wantAttr{
		{AttrMemory, int64(40960), "MiB"}, {AttrComputeCapability, "8.0", ""}, {AttrArchitecture, "ampere", ""},
		{AttrSMCount, int64(108), ""}, {AttrMaxSMClock, int64(1410), "MHz"}, {AttrMemoryBandwidth, int64(1555), "GB/s"},
		{AttrPCIeGeneration, int64(4), ""}, {AttrPCIBandwidth, int64(31504), "MB/s"}, {AttrNVLinkLinks, int64(12), ""},
		{AttrPowerLimit, int64(400), "W"}, {AttrPowerLimitMin, int64(100), "W"},
	}...))
	checkAttrs(t, groupByName(resp, "NVIDIA H100 80GB HBM3"), append(common, []wantAttr{
		{AttrMemory, int64(81920), "MiB"}, {AttrComputeCapability, "9.0", ""}, {AttrArchitecture, "hopper", ""},
		{AttrSMCount, int64(132), ""}, {AttrMemoryBandwidth, int64(3350), "GB/s"}, {AttrPCIeGeneration, int64(5), ""},
		{AttrNVLinkLinks, int64(18), ""}, {AttrPowerLimit, int64(700), "W"},
	}...))
}

func TestMIGFingerprint(t *testing.T) {
	s := serve(t, `
fake {
  gpus = ["3x A100-SXM4-40GB"]
  mig {
    gpu = 1
    profiles = ["3g.20gb", "3g.20gb"]
  }
  mig {
    gpu = 2
    profiles = ["1g.5gb"]
  }
}`)
	resp := s.fingerprints(t).next()
	full := groupByName(resp, "NVIDIA A100-SXM4-40GB")
	g3 := groupByName(resp, "NVIDIA A100-SXM4-40GB MIG 3g.20gb")
	g1 := groupByName(resp, "NVIDIA A100-SXM4-40GB MIG 1g.5gb")
	if full == nil || g3 == nil || g1 == nil || len(resp.DeviceGroup) != 3 {
		t.Fatalf("groups: %v", resp.DeviceGroup)
	}
	if len(full.Devices) != 1 || len(g3.Devices) != 2 || len(g1.Devices) != 1 {
		t.Errorf("device counts %d %d %d; the MIG-mode parent must not be offered", len(full.Devices), len(g3.Devices), len(g1.Devices))
	}
	for _, d := range g3.Devices {
		if !strings.HasPrefix(d.ID, "MIG-") || d.HwLocality.PciBusId != "0000:11:00.0" {
			t.Errorf("MIG device %+v", d)
		}
	}
	checkAttrs(t, g3, []wantAttr{{AttrMemory, int64(19968), "MiB"}, {AttrSMCount, int64(42), ""}, {AttrMIG, true, ""},
		{AttrMIGProfile, "3g.20gb", ""}, {AttrMIGParentName, "NVIDIA A100-SXM4-40GB", ""}, {AttrPowerLimit, int64(400), "W"},
		{AttrComputeCapability, "8.0", ""}})
	checkAttrs(t, g1, []wantAttr{{AttrMemory, int64(4864), "MiB"}, {AttrSMCount, int64(14), ""}, {AttrMIGProfile, "1g.5gb", ""}})
	if _, ok := g3.Attributes[AttrCUDACores]; ok {
		t.Error("MIG group carries the whole GPU's cuda_cores")
	}
}

func TestXIDMarksUnhealthyAndRefingerprints(t *testing.T) {
	s := serve(t, `fake {
  gpus = ["2x T4"]
}`)
	fs := s.fingerprints(t)
	fs.next()
	f := s.fleet(t)
	target := f.UUIDs()[1]
	// The XID watcher registers asynchronously, so keep injecting until a fingerprint follows.
	// XID 13 is an application error and must not count; 79 must.
	var got *device.FingerprintResponse
	for i := 0; got == nil && i < 200; i++ {
		f.InjectXID(1, 13)
		f.InjectXID(1, 79)
		got = fs.within(50 * time.Millisecond)
	}
	if got == nil {
		t.Fatal("no new fingerprint after XID 79")
	}
	for _, d := range groupByName(got, "Tesla T4").Devices {
		switch d.ID {
		case target:
			if d.Healthy || d.HealthDescription != "XID 79: GPU has fallen off the bus" {
				t.Errorf("target device %+v", d)
			}
		default:
			if !d.Healthy {
				t.Errorf("other device turned unhealthy: %+v", d)
			}
		}
	}
}

func TestNVMLErrorsNeverCloseTheStream(t *testing.T) {
	s := serve(t, `fingerprint_period = "100ms"
fake {
  gpus = ["2x L4"]
  init_failures = 2
}`)
	fs := s.fingerprints(t)
	next := fs.next
	// NVML cannot start: an empty list first, then the devices once a retry succeeds.
	if first := next(); len(first.DeviceGroup) != 0 {
		t.Fatalf("first fingerprint while NVML fails = %v, want empty", first.DeviceGroup)
	}
	if second := next(); len(groupByName(second, "NVIDIA L4").GetDevices()) != 2 {
		t.Fatalf("after retry: %v", second.DeviceGroup)
	}
	f := s.fleet(t)
	f.SetError(0, "temperature", nvml.ERROR_GPU_IS_LOST)
	resp := next()
	d := groupByName(resp, "NVIDIA L4").Devices[0]
	if d.Healthy || d.HealthDescription != "NVML temperature: ERROR_GPU_IS_LOST" {
		t.Errorf("lost GPU: %+v", d)
	}
	// A failing handle keeps the GPU listed (unhealthy), never drops or ends the stream.
	f.SetError(1, "all", nvml.ERROR_UNKNOWN)
	resp = next()
	if g := groupByName(resp, "NVIDIA L4"); len(g.Devices) != 2 || g.Devices[1].Healthy {
		t.Errorf("after handle failure: %+v", g.GetDevices())
	}
	// Recovery is reported too.
	f.SetError(0, "temperature", nvml.SUCCESS)
	f.SetError(1, "all", nvml.SUCCESS)
	resp = next()
	for _, d := range groupByName(resp, "NVIDIA L4").Devices {
		if !d.Healthy {
			t.Errorf("not recovered: %+v", d)
		}
	}
}

func TestDisabledAndIgnored(t *testing.T) {
	s := serve(t, `enabled = false
fake {
  gpus = ["1x T4"]
}`)
	if resp := s.fingerprints(t).next(); len(resp.DeviceGroup) != 0 {
		t.Errorf("disabled plugin reported %v", resp.DeviceGroup)
	}
	s2 := serve(t, `fake {
  gpus = ["2x T4"]
  seed = "ign"
}`)
	all := s2.fingerprints(t).next()
	first := groupByName(all, "Tesla T4").Devices[0].ID
	s3 := serve(t, `ignored_gpu_ids = ["`+first+`"]
fake {
  gpus = ["2x T4"]
  seed = "ign"
}`)
	resp := s3.fingerprints(t).next()
	if ds := groupByName(resp, "Tesla T4").Devices; len(ds) != 1 || ds[0].ID == first {
		t.Errorf("ignored GPU still listed: %v", ds)
	}
}

func TestNormalizeBusID(t *testing.T) {
	tests := []struct {
		in   string
		want string
	}{
		{"00000000:3B:00.0", "0000:3b:00.0"},
		{"0000:AF:1F.7", "0000:af:1f.7"},
		{"00000001:01:00.1", "0001:01:00.1"},
	}
	for _, tt := range tests {
		var p nvml.PciInfo
		for i := range tt.in {
			p.BusId[i] = int8(tt.in[i])
		}
		if got := normalizeBusID(p); got != tt.want {
			t.Errorf("normalizeBusID(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
	// Garbage falls back to the numeric fields.
	if got := normalizeBusID(nvml.PciInfo{Domain: 0, Bus: 0x3b, Device: 2}); got != "0000:3b:02.0" {
		t.Errorf("fallback = %q", got)
	}
}

func TestXIDDescription(t *testing.T) {
	if got := XIDDescription(79); got != "XID 79: GPU has fallen off the bus" {
		t.Error(got)
	}
	if got := XIDDescription(12345); got != "XID 12345: critical error" {
		t.Error(got)
	}
}

// The real NVML path: where libnvidia-ml cannot be loaded (as on CI), the plugin sends an empty
// fingerprint, keeps the stream open and keeps retrying instead of dying.
func TestRealNVMLWithoutDriver(t *testing.T) {
	probe := nvml.New()
	if r := probe.Init(); r == nvml.SUCCESS {
		probe.Shutdown()
		t.Skip("an NVIDIA driver is present; this test covers machines without one")
	}
	s := serve(t, `fingerprint_period = "200ms"`)
	fs := s.fingerprints(t)
	if resp := fs.next(); len(resp.DeviceGroup) != 0 {
		t.Fatalf("fingerprint without NVML = %v, want empty", resp.DeviceGroup)
	}
	// Retries happen (several periods) without a new message and without ending the stream.
	if resp := fs.within(time.Second); resp != nil {
		t.Errorf("unexpected fingerprint %v while NVML stays unavailable", resp)
	}
	if _, ok := s.p.NVML().(*fake.Fleet); ok {
		t.Error("no fake block, but the fake backend was used")
	}
}
