package device

import (
	"fmt"
	"maps"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/hetgpu/hetgpu/device/arch"
	"github.com/hetgpu/hetgpu/plugin"
	"github.com/hetgpu/hetgpu/plugin/proto/structs"
)

// Group attribute keys. Only stable values: a changing attribute changes the node's computed
// class. Volatile readings are stats (stats.go). The README documents each with a constraint.
const (
	AttrMemory            = "memory"              // int MiB (as nomad-device-nvidia)
	AttrBAR1              = "bar1"                // int MiB (as nomad-device-nvidia)
	AttrComputeCapability = "compute_capability"  // string "8.0"
	AttrArchitecture      = "architecture"        // string "ampere"
	AttrCUDACores         = "cuda_cores"          // int
	AttrSMCount           = "sm_count"            // int
	AttrCoresClock        = "cores_clock"         // int MHz, max graphics clock (nvidia's is the current one)
	AttrMaxSMClock        = "max_sm_clock"        // int MHz
	AttrMemoryClock       = "memory_clock"        // int MHz, max memory clock
	AttrMemoryBusWidth    = "memory_bus_width"    // int bits (no Nomad unit exists for bits)
	AttrMemoryBandwidth   = "memory_bandwidth"    // int GB/s, 2 x memory clock x bus width
	AttrPCIeGeneration    = "pcie_generation"     // int, max link generation
	AttrPCIeWidth         = "pcie_width"          // int lanes, max link width
	AttrPCIBandwidth      = "pci_bandwidth"       // int MB/s (as nomad-device-nvidia), per direction
	AttrNVLinkLinks       = "nvlink_links"        // int active NVLink links
	AttrPower             = "power"               // int W: enforced power limit (nvidia's name)
	AttrPowerLimit        = "power_limit"         // int W: enforced
	AttrPowerLimitDefault = "power_limit_default" // int W
	AttrPowerLimitMin     = "power_limit_min"     // int W: lowest settable
	AttrPowerLimitMax     = "power_limit_max"     // int W: highest settable
	AttrDriverVersion     = "driver_version"      // string "550.54.15"
	AttrCUDADriverVersion = "cuda_driver_version" // string "12.4"
	AttrECC               = "ecc"                 // bool: ECC currently enabled
	AttrMIG               = "mig"                 // bool: this device is a MIG device / MIG mode
	AttrMIGProfile        = "mig_profile"         // string "3g.20gb" (MIG groups only)
	AttrMIGParentName     = "mig_parent"          // string parent product name (MIG groups only)
)

// pcieLaneMBps is usable bandwidth per lane and direction by PCIe generation (after encoding).
func pcieLaneMBps(gen int) int64 {
	switch gen {
	case 1:
		return 250
	case 2:
		return 500
	case 3:
		return 985
	case 4:
		return 1969
	case 5:
		return 3938
	case 6:
		return 7563
	}
	return 0
}

func archName(a nvml.DeviceArchitecture) string {
	switch a {
	case nvml.DEVICE_ARCH_KEPLER:
		return "kepler"
	case nvml.DEVICE_ARCH_MAXWELL:
		return "maxwell"
	case nvml.DEVICE_ARCH_PASCAL:
		return "pascal"
	case nvml.DEVICE_ARCH_VOLTA:
		return "volta"
	case nvml.DEVICE_ARCH_TURING:
		return "turing"
	case nvml.DEVICE_ARCH_AMPERE:
		return "ampere"
	case nvml.DEVICE_ARCH_ADA:
		return "ada"
	case nvml.DEVICE_ARCH_HOPPER:
		return "hopper"
	case nvml.DEVICE_ARCH_BLACKWELL:
		return "blackwell"
	case nvml.DEVICE_ARCH_RUBIN:
		return "rubin"
	}
	return "unknown"
}

// gpuAttributes reads a whole GPU's stable attributes. Unsupported queries are left out;
// hard failures are reported through fail.
func gpuAttributes(h nvml.Device, sys systemInfo, migMode bool, fail func(string, nvml.Return)) map[string]*structs.Attribute {
	b := plugin.NewAttributes()
	if mem, r := h.GetMemoryInfo(); r == nvml.SUCCESS {
		b.Int(AttrMemory, int64(mem.Total>>20), plugin.UnitMiB)
	} else {
		fail("memory info", r)
	}
	if bar, r := h.GetBAR1MemoryInfo(); r == nvml.SUCCESS && bar.Bar1Total > 0 {
		b.Int(AttrBAR1, int64(bar.Bar1Total>>20), plugin.UnitMiB)
	}
	major, minor, r := h.GetCudaComputeCapability()
	if r == nvml.SUCCESS {
		b.String(AttrComputeCapability, fmt.Sprintf("%d.%d", major, minor))
	}
	if a, r := h.GetArchitecture(); r == nvml.SUCCESS {
		b.String(AttrArchitecture, archName(a))
	}
	if cores, r := h.GetNumGpuCores(); r == nvml.SUCCESS && cores > 0 {
		b.Int(AttrCUDACores, int64(cores), "")
		if major > 0 {
			b.Int(AttrSMCount, int64(cores/arch.CoresPerSM(major, minor)), "")
		}
	}
	if mhz, r := h.GetMaxClockInfo(nvml.CLOCK_GRAPHICS); r == nvml.SUCCESS && mhz > 0 {
		b.Int(AttrCoresClock, int64(mhz), plugin.UnitMHz)
	}
	if mhz, r := h.GetMaxClockInfo(nvml.CLOCK_SM); r == nvml.SUCCESS && mhz > 0 {
		b.Int(AttrMaxSMClock, int64(mhz), plugin.UnitMHz)
	}
	memMHz, r := h.GetMaxClockInfo(nvml.CLOCK_MEM)
	if r == nvml.SUCCESS && memMHz > 0 {
		b.Int(AttrMemoryClock, int64(memMHz), plugin.UnitMHz)
	}
	if bits, r := h.GetMemoryBusWidth(); r == nvml.SUCCESS && bits > 0 {
		b.Int(AttrMemoryBusWidth, int64(bits), "")
		if memMHz > 0 {
			// Double data rate: bytes/s = 2 x clock x width / 8.
			mbps := 2 * int64(memMHz) * int64(bits) / 8
			b.Int(AttrMemoryBandwidth, (mbps+500)/1000, plugin.UnitGBPerSec)
		}
	}
	gen, rg := h.GetMaxPcieLinkGeneration()
	width, rw := h.GetMaxPcieLinkWidth()
	if rg == nvml.SUCCESS && gen > 0 {
		b.Int(AttrPCIeGeneration, int64(gen), "")
	}
	if rw == nvml.SUCCESS && width > 0 {
		b.Int(AttrPCIeWidth, int64(width), "")
	}
	if rg == nvml.SUCCESS && rw == nvml.SUCCESS && pcieLaneMBps(gen) > 0 {
		b.Int(AttrPCIBandwidth, pcieLaneMBps(gen)*int64(width), plugin.UnitMBPerSec)
	}
	b.Int(AttrNVLinkLinks, int64(activeNVLinks(h)), "")
	if w, r := h.GetEnforcedPowerLimit(); r == nvml.SUCCESS && w > 0 {
		b.Int(AttrPowerLimit, int64(w/1000), plugin.UnitWatt)
		b.Int(AttrPower, int64(w/1000), plugin.UnitWatt)
	} else if w, r := h.GetPowerManagementLimit(); r == nvml.SUCCESS && w > 0 {
		b.Int(AttrPowerLimit, int64(w/1000), plugin.UnitWatt)
		b.Int(AttrPower, int64(w/1000), plugin.UnitWatt)
	}
	if w, r := h.GetPowerManagementDefaultLimit(); r == nvml.SUCCESS && w > 0 {
		b.Int(AttrPowerLimitDefault, int64(w/1000), plugin.UnitWatt)
	}
	if lo, hi, r := h.GetPowerManagementLimitConstraints(); r == nvml.SUCCESS && hi > 0 {
		b.Int(AttrPowerLimitMin, int64(lo/1000), plugin.UnitWatt)
		b.Int(AttrPowerLimitMax, int64(hi/1000), plugin.UnitWatt)
	}
	if sys.driverVersion != "" {
		b.String(AttrDriverVersion, sys.driverVersion)
	}
	if sys.cudaVersion != "" {
		b.String(AttrCUDADriverVersion, sys.cudaVersion)
	}
	if cur, _, r := h.GetEccMode(); r == nvml.SUCCESS {
		b.Bool(AttrECC, cur == nvml.FEATURE_ENABLED)
	}
	b.Bool(AttrMIG, migMode)
	attrs, err := b.Build()
	if err != nil {
		// Unreachable with the constant units above; keep the plugin alive regardless.
		return map[string]*structs.Attribute{}
	}
	return attrs
}

// activeNVLinks counts links in the enabled state; NVML answers NOT_SUPPORTED past the last link.
func activeNVLinks(h nvml.Device) int {
	n := 0
	for l := range nvml.NVLINK_MAX_LINKS {
		st, r := h.GetNvLinkState(l)
		if r != nvml.SUCCESS {
			break
		}
		if st == nvml.FEATURE_ENABLED {
			n++
		}
	}
	return n
}

// migAttributes are the parent's attributes with the slice's own memory, SMs and profile.
func migAttributes(h nvml.Device, parent *instance) map[string]*structs.Attribute {
	attrs := maps.Clone(parent.attrs)
	if attrs == nil {
		attrs = map[string]*structs.Attribute{}
	}
	// Whole-GPU figures that do not describe a slice.
	delete(attrs, AttrBAR1)
	delete(attrs, AttrCUDACores)
	attrs[AttrMIG] = plugin.BoolAttribute(true)
	attrs[AttrMIGParentName] = plugin.StringAttribute(parent.name)
	if a, r := h.GetAttributes(); r == nvml.SUCCESS {
		if a.MultiprocessorCount > 0 {
			attrs[AttrSMCount] = plugin.IntAttribute(int64(a.MultiprocessorCount), "")
		}
		if a.MemorySizeMB > 0 {
			attrs[AttrMemory] = plugin.IntAttribute(int64(a.MemorySizeMB), plugin.UnitMiB)
		}
		attrs[AttrMIGProfile] = plugin.StringAttribute(fmt.Sprintf("%dg.%dgb", a.GpuInstanceSliceCount, (a.MemorySizeMB+1023)/1024))
	} else if mem, r := h.GetMemoryInfo(); r == nvml.SUCCESS {
		attrs[AttrMemory] = plugin.IntAttribute(int64(mem.Total>>20), plugin.UnitMiB)
	}
	return attrs
}
