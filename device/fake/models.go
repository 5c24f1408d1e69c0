package fake

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"
)

// Model is one GPU product the fake can pose as. Memory, bandwidth, TDP and idle power come
// from shared/data/gpu-specs.csv (embedded in model/gpuspec, vendor datasheets); clocks, SM
// counts, bus widths, PCIe links and PCI device IDs are public datasheet / nvidia-smi figures.
// Memory clocks are chosen so that 2 x clock x bus width reproduces the datasheet bandwidth.
type Model struct {
	Key          string // accepted in the fake block, e.g. "A100-SXM4-40GB"
	Name         string // NVML product name, e.g. "NVIDIA A100-SXM4-40GB"
	SpecModel    string // row of gpu-specs.csv
	Arch         nvml.DeviceArchitecture
	CCMajor      int
	CCMinor      int
	SMs          int
	MaxSMMHz     uint32
	MaxMemMHz    uint32
	BusWidth     uint32 // bits
	PCIeGen      int
	PCIeWidth    int
	NVLinks      int  // links per GPU
	NVSwitch     bool // links go to an NVSwitch fabric (all GPUs of a box are peers)
	MinPowerW    uint32
	BAR1MiB      uint64
	PciDeviceID  uint32
	mock         *gpus.Config // go-nvml's mock config (MIG profiles) where it has one
	memoryMiBOvr uint64       // memory as NVML reports it, when it differs from GiB*1024
}

func withName(c gpus.Config, name string) *gpus.Config {
	c.Name = name
	return &c
}

// models lists every supported product. Keys are matched case-insensitively, and also by the
// NVML name.
func models() []Model {
	return []Model{
		{Key: "K80", Name: "Tesla K80", SpecModel: "K80 (one die)", Arch: nvml.DEVICE_ARCH_KEPLER, CCMajor: 3, CCMinor: 7,
			SMs: 13, MaxSMMHz: 875, MaxMemMHz: 2505, BusWidth: 384, PCIeGen: 3, PCIeWidth: 16, MinPowerW: 100, BAR1MiB: 16384,
			PciDeviceID: 0x102D10DE},
		{Key: "P100", Name: "Tesla P100-PCIE-16GB", SpecModel: "P100-PCIE-16GB", Arch: nvml.DEVICE_ARCH_PASCAL, CCMajor: 6,
			SMs: 56, MaxSMMHz: 1328, MaxMemMHz: 715, BusWidth: 4096, PCIeGen: 3, PCIeWidth: 16, MinPowerW: 125, BAR1MiB: 16384,
			PciDeviceID: 0x15F810DE},
		{Key: "V100", Name: "Tesla V100-SXM2-16GB", SpecModel: "V100-SXM2-16GB", Arch: nvml.DEVICE_ARCH_VOLTA, CCMajor: 7,
			SMs: 80, MaxSMMHz: 1530, MaxMemMHz: 877, BusWidth: 4096, PCIeGen: 3, PCIeWidth: 16, NVLinks: 6, MinPowerW: 150,
			BAR1MiB: 16384, PciDeviceID: 0x1DB110DE},
		{Key: "V100-SXM2-32GB", Name: "Tesla V100-SXM2-32GB", SpecModel: "V100-SXM2-32GB", Arch: nvml.DEVICE_ARCH_VOLTA, CCMajor: 7,
			SMs: 80, MaxSMMHz: 1530, MaxMemMHz: 877, BusWidth: 4096, PCIeGen: 3, PCIeWidth: 16, NVLinks: 6, MinPowerW: 150,
			BAR1MiB: 32768, PciDeviceID: 0x1DB510DE},
		{Key: "T4", Name: "Tesla T4", SpecModel: "T4", Arch: nvml.DEVICE_ARCH_TURING, CCMajor: 7, CCMinor: 5,
			SMs: 40, MaxSMMHz: 1590, MaxMemMHz: 5001, BusWidth: 256, PCIeGen: 3, PCIeWidth: 16, MinPowerW: 60, BAR1MiB: 256,
			PciDeviceID: 0x1EB810DE, memoryMiBOvr: 15360},
		{Key: "A10", Name: "NVIDIA A10", SpecModel: "A10", Arch: nvml.DEVICE_ARCH_AMPERE, CCMajor: 8, CCMinor: 6,
			SMs: 72, MaxSMMHz: 1695, MaxMemMHz: 6251, BusWidth: 384, PCIeGen: 4, PCIeWidth: 16, MinPowerW: 100, BAR1MiB: 32768,
			PciDeviceID: 0x223610DE, memoryMiBOvr: 23028},
		{Key: "L4", Name: "NVIDIA L4", SpecModel: "L4", Arch: nvml.DEVICE_ARCH_ADA, CCMajor: 8, CCMinor: 9,
			SMs: 58, MaxSMMHz: 2040, MaxMemMHz: 6251, BusWidth: 192, PCIeGen: 4, PCIeWidth: 16, MinPowerW: 40, BAR1MiB: 32768,
			PciDeviceID: 0x27B810DE, memoryMiBOvr: 23034},
		{Key: "A100-SXM4-40GB", Name: "NVIDIA A100-SXM4-40GB", SpecModel: "A100-SXM4-40GB", Arch: nvml.DEVICE_ARCH_AMPERE, CCMajor: 8,
			SMs: 108, MaxSMMHz: 1410, MaxMemMHz: 1215, BusWidth: 5120, PCIeGen: 4, PCIeWidth: 16, NVLinks: 12, NVSwitch: true,
			MinPowerW: 100, BAR1MiB: 65536, PciDeviceID: gpus.A100_SXM4_40GB.PciDeviceId,
			mock: withName(gpus.A100_SXM4_40GB, "NVIDIA A100-SXM4-40GB")},
		{Key: "A100-SXM4-80GB", Name: "NVIDIA A100-SXM4-80GB", SpecModel: "A100-SXM4-80GB", Arch: nvml.DEVICE_ARCH_AMPERE, CCMajor: 8,
			SMs: 108, MaxSMMHz: 1410, MaxMemMHz: 1593, BusWidth: 5120, PCIeGen: 4, PCIeWidth: 16, NVLinks: 12, NVSwitch: true,
			MinPowerW: 100, BAR1MiB: 131072, PciDeviceID: gpus.A100_SXM4_80GB.PciDeviceId,
			mock: withName(gpus.A100_SXM4_80GB, "NVIDIA A100-SXM4-80GB")},
		{Key: "H100-SXM5-80GB", Name: "NVIDIA H100 80GB HBM3", SpecModel: "H100-SXM5-80GB", Arch: nvml.DEVICE_ARCH_HOPPER, CCMajor: 9,
			SMs: 132, MaxSMMHz: 1980, MaxMemMHz: 2617, BusWidth: 5120, PCIeGen: 5, PCIeWidth: 16, NVLinks: 18, NVSwitch: true,
			MinPowerW: 200, BAR1MiB: 131072, PciDeviceID: gpus.H100_SXM5_80GB.PciDeviceId,
			mock: withName(gpus.H100_SXM5_80GB, "NVIDIA H100 80GB HBM3")},
		{Key: "H200-SXM-141GB", Name: "NVIDIA H200", SpecModel: "H200-SXM-141GB", Arch: nvml.DEVICE_ARCH_HOPPER, CCMajor: 9,
			SMs: 132, MaxSMMHz: 1980, MaxMemMHz: 3125, BusWidth: 6144, PCIeGen: 5, PCIeWidth: 16, NVLinks: 18, NVSwitch: true,
			MinPowerW: 200, BAR1MiB: 262144, PciDeviceID: gpus.H200_SXM5_141GB.PciDeviceId,
			mock: withName(gpus.H200_SXM5_141GB, "NVIDIA H200")},
	}
}

// alias maps short names (lower case) to model keys.
func alias(n string) (string, bool) {
	switch n {
	case "a100":
		return "A100-SXM4-40GB", true
	case "h100":
		return "H100-SXM5-80GB", true
	case "h200":
		return "H200-SXM-141GB", true
	case "v100-sxm2-16gb":
		return "V100", true
	case "p100-pcie-16gb":
		return "P100", true
	}
	return "", false
}

// box maps a go-nvml mock server name (lower case) to its model: 8 NVSwitch-connected GPUs.
func box(n string) (string, bool) {
	switch n {
	case "dgxa100":
		return "A100-SXM4-40GB", true
	case "dgxh100":
		return "H100-SXM5-80GB", true
	case "dgxh200":
		return "H200-SXM-141GB", true
	}
	return "", false
}

// Models lists the accepted model keys, sorted.
func Models() []string {
	var out []string
	for _, m := range models() {
		out = append(out, m.Key)
	}
	sort.Strings(out)
	return out
}

// LookupModel finds a model by key, alias or NVML name, case-insensitively.
func LookupModel(name string) (Model, bool) {
	n := strings.ToLower(strings.TrimSpace(name))
	if k, ok := alias(n); ok {
		n = strings.ToLower(k)
	}
	for _, m := range models() {
		if strings.ToLower(m.Key) == n || strings.ToLower(m.Name) == n {
			return m, true
		}
	}
	return Model{}, false
}

// Entry is one parsed element of the fake block's gpus list: Count GPUs of one model that form
// one box (one NVLink domain for NVLink-capable models).
type Entry struct {
	Count int
	Model Model
}

// ParseEntry parses "4x T4", "2 x A100-SXM4-40GB", "T4" (one GPU) or a whole mock server
// "dgxa100" / "dgxh100" / "dgxh200" (8 GPUs).
func ParseEntry(s string) (Entry, error) {
	t := strings.TrimSpace(s)
	if k, ok := box(strings.ToLower(t)); ok {
		m, _ := LookupModel(k)
		return Entry{Count: 8, Model: m}, nil
	}
	count, name := 1, t
	if i := strings.IndexAny(t, "xX"); i > 0 {
		if n, err := strconv.Atoi(strings.TrimSpace(t[:i])); err == nil {
			count, name = n, strings.TrimSpace(t[i+1:])
		}
	}
	if count < 1 || count > 64 {
		return Entry{}, fmt.Errorf("gpu entry %q: count %d, expected 1 to 64", s, count)
	}
	m, ok := LookupModel(name)
	if !ok {
		return Entry{}, fmt.Errorf("gpu entry %q: unknown model %q, expected one of %s or dgxa100, dgxh100, dgxh200",
			s, name, strings.Join(Models(), ", "))
	}
	return Entry{Count: count, Model: m}, nil
}

// memoryMiB is the total memory NVML reports.
func (m Model) memoryMiB(specGiB float64) uint64 {
	switch {
	case m.memoryMiBOvr > 0:
		return m.memoryMiBOvr
	case m.mock != nil:
		return m.mock.MemoryMB
	}
	return uint64(specGiB * 1024)
}

// migProfiles returns go-nvml mock MIG profiles by name ("3g.20gb"), nil if the model has none.
func (m Model) migProfiles() map[string]nvml.GpuInstanceProfileInfo {
	if m.mock == nil || len(m.mock.MIGProfiles.GpuInstanceProfiles) == 0 {
		return nil
	}
	out := map[string]nvml.GpuInstanceProfileInfo{}
	for _, p := range m.mock.MIGProfiles.GpuInstanceProfiles {
		name := ProfileName(p)
		if _, dup := out[name]; !dup || p.Id < out[name].Id {
			out[name] = p
		}
	}
	return out
}

// ProfileName is NVIDIA's MIG profile name: "<slices>g.<memory GB rounded up>gb".
func ProfileName(p nvml.GpuInstanceProfileInfo) string {
	return fmt.Sprintf("%dg.%dgb", p.SliceCount, (p.MemorySizeMB+1023)/1024)
}
