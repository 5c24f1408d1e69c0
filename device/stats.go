package device

import (
	"strings"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/hetgpu/hetgpu/plugin"
	"github.com/hetgpu/hetgpu/plugin/proto/device"
	"github.com/hetgpu/hetgpu/plugin/proto/structs"
)

// Stat names under DeviceStats.stats.attributes (and the nested "topology" object). The sidecar
// reads them from /v1/client/stats and allocation stats; the README lists them.
const (
	StatPowerDraw            = "power_draw"             // float W (also the summary, over the power limit)
	StatPowerLimit           = "power_limit"            // int W, enforced
	StatEnergy               = "energy"                 // float J since the driver loaded
	StatGPUUtilization       = "gpu_utilization"        // int %
	StatMemoryUtilization    = "memory_utilization"     // int % (memory controller busy)
	StatMemory               = "memory"                 // int MiB used / total
	StatTemperature          = "temperature"            // int C
	StatSMClock              = "sm_clock"               // int MHz, current
	StatMemoryClock          = "memory_clock"           // int MHz, current
	StatThrottleReasons      = "throttle_reasons"       // string, comma-separated ("none", "idle", "sw_power_cap", ...)
	StatECCErrorsCorrected   = "ecc_errors_corrected"   // int #, volatile counter
	StatECCErrorsUncorrected = "ecc_errors_uncorrected" // int #, volatile counter

	StatTopology    = "topology"     // nested StatObject with the string attributes below
	StatNVLinkPeers = "nvlink_peers" // comma-separated UUIDs of NVLink-connected GPUs ("" if none)
	StatNUMANode    = "numa_node"    // "0", "1", ... ("" if unknown)
	StatPCIeSwitch  = "pcie_switch"  // "pcie-<lowest bus id>" shared by GPUs behind one switch ("" if none)
	StatPCIBusID    = "pci_bus_id"   // "0000:3b:00.0"
	StatParentUUID  = "parent_uuid"  // MIG devices: the physical GPU's UUID
)

// notAvailable is what a failed or unsupported reading reports (as nomad-device-nvidia does).
const notAvailable = "N/A"

type throttleName struct {
	bit  uint64
	name string
}

// throttleNames are NVML's clock event reasons in a fixed order.
func throttleNames() [9]throttleName {
	return [9]throttleName{
		{nvml.ClocksEventReasonGpuIdle, "idle"},
		{nvml.ClocksEventReasonApplicationsClocksSetting, "applications_clocks"},
		{nvml.ClocksEventReasonSwPowerCap, "sw_power_cap"},
		{nvml.ClocksThrottleReasonHwSlowdown, "hw_slowdown"},
		{nvml.ClocksEventReasonSyncBoost, "sync_boost"},
		{nvml.ClocksEventReasonSwThermalSlowdown, "sw_thermal"},
		{nvml.ClocksThrottleReasonHwThermalSlowdown, "hw_thermal"},
		{nvml.ClocksThrottleReasonHwPowerBrakeSlowdown, "hw_power_brake"},
		{nvml.ClocksEventReasonDisplayClockSetting, "display_clocks"},
	}
}

func throttleString(mask uint64) string {
	if mask == 0 {
		return "none"
	}
	var parts []string
	for _, t := range throttleNames() {
		if mask&t.bit != 0 {
			parts = append(parts, t.name)
		}
	}
	if len(parts) == 0 {
		return "other"
	}
	return strings.Join(parts, ",")
}

// collectStats reads every schedulable device once. Failed readings become "N/A"; nothing here
// fails the stream.
func collectStats(inv *inventory, now time.Time) *device.StatsResponse {
	resp := &device.StatsResponse{}
	if inv == nil {
		return resp
	}
	ts := timestamppb.New(now)
	byName := map[string]*device.DeviceGroupStats{}
	for _, d := range inv.ordered() {
		g, ok := byName[d.name]
		if !ok {
			g = &device.DeviceGroupStats{Vendor: Vendor, Type: d.deviceType(), Name: d.name, InstanceStats: map[string]*device.DeviceStats{}}
			byName[d.name] = g
			resp.Groups = append(resp.Groups, g)
		}
		g.InstanceStats[d.uuid] = deviceStats(d, ts)
	}
	return resp
}

func deviceStats(d *instance, ts *timestamppb.Timestamp) *device.DeviceStats {
	attrs := make(map[string]*structs.StatValue, 12)
	phys := d
	parentDesc := ""
	if d.parent != nil {
		phys = d.parent
		parentDesc = " (whole GPU)"
	}
	h := phys.handle
	na := func(desc string) *structs.StatValue { return plugin.StringStat(notAvailable, desc) }

	limitW := int64(0)
	if a := phys.attrs[AttrPowerLimit]; a != nil {
		limitW = a.GetIntVal()
		attrs[StatPowerLimit] = plugin.IntStat(limitW, "W", "Enforced power limit"+parentDesc)
	}
	var summary *structs.StatValue
	if mw, r := h.GetPowerUsage(); r == nvml.SUCCESS {
		w := float64(mw) / 1000
		attrs[StatPowerDraw] = plugin.FloatStat(w, "W", "Power draw"+parentDesc)
		if limitW > 0 {
			summary = plugin.FloatRatioStat(w, float64(limitW), "W", "Power draw / power limit"+parentDesc)
		} else {
			summary = attrs[StatPowerDraw]
		}
	} else {
		attrs[StatPowerDraw] = na("Power draw" + parentDesc)
		summary = attrs[StatPowerDraw]
	}
	if mj, r := h.GetTotalEnergyConsumption(); r == nvml.SUCCESS {
		attrs[StatEnergy] = plugin.FloatStat(float64(mj)/1000, "J", "Energy since driver load"+parentDesc)
	} else {
		attrs[StatEnergy] = na("Energy since driver load" + parentDesc)
	}
	if u, r := d.handle.GetUtilizationRates(); r == nvml.SUCCESS {
		attrs[StatGPUUtilization] = plugin.IntStat(int64(u.Gpu), "%", "GPU utilization")
		attrs[StatMemoryUtilization] = plugin.IntStat(int64(u.Memory), "%", "Memory utilization")
	} else {
		attrs[StatGPUUtilization] = na("GPU utilization")
		attrs[StatMemoryUtilization] = na("Memory utilization")
	}
	if m, r := d.handle.GetMemoryInfo(); r == nvml.SUCCESS {
		attrs[StatMemory] = plugin.IntRatioStat(int64(m.Used>>20), int64(m.Total>>20), "MiB", "Memory used / total")
	} else {
		attrs[StatMemory] = na("Memory used / total")
	}
	if c, r := h.GetTemperature(nvml.TEMPERATURE_GPU); r == nvml.SUCCESS {
		attrs[StatTemperature] = plugin.IntStat(int64(c), "C", "GPU temperature"+parentDesc)
	} else {
		attrs[StatTemperature] = na("GPU temperature" + parentDesc)
	}
	if mhz, r := h.GetClockInfo(nvml.CLOCK_SM); r == nvml.SUCCESS {
		attrs[StatSMClock] = plugin.IntStat(int64(mhz), "MHz", "SM clock"+parentDesc)
	} else {
		attrs[StatSMClock] = na("SM clock" + parentDesc)
	}
	if mhz, r := h.GetClockInfo(nvml.CLOCK_MEM); r == nvml.SUCCESS {
		attrs[StatMemoryClock] = plugin.IntStat(int64(mhz), "MHz", "Memory clock"+parentDesc)
	} else {
		attrs[StatMemoryClock] = na("Memory clock" + parentDesc)
	}
	if mask, r := h.GetCurrentClocksThrottleReasons(); r == nvml.SUCCESS {
		attrs[StatThrottleReasons] = plugin.StringStat(throttleString(mask), "Clock throttle reasons"+parentDesc)
	} else {
		attrs[StatThrottleReasons] = na("Clock throttle reasons" + parentDesc)
	}
	if n, r := h.GetTotalEccErrors(nvml.MEMORY_ERROR_TYPE_CORRECTED, nvml.VOLATILE_ECC); r == nvml.SUCCESS {
		attrs[StatECCErrorsCorrected] = plugin.IntStat(int64(n), "#", "Corrected ECC errors since boot"+parentDesc)
	} else {
		attrs[StatECCErrorsCorrected] = na("Corrected ECC errors since boot" + parentDesc)
	}
	if n, r := h.GetTotalEccErrors(nvml.MEMORY_ERROR_TYPE_UNCORRECTED, nvml.VOLATILE_ECC); r == nvml.SUCCESS {
		attrs[StatECCErrorsUncorrected] = plugin.IntStat(int64(n), "#", "Uncorrected ECC errors since boot"+parentDesc)
	} else {
		attrs[StatECCErrorsUncorrected] = na("Uncorrected ECC errors since boot" + parentDesc)
	}
	topo := deviceTopology(d)
	topoAttrs := map[string]*structs.StatValue{
		StatNVLinkPeers: plugin.StringStat(strings.Join(topo.nvlinkPeers, ","), "UUIDs of NVLink-connected GPUs"),
		StatNUMANode:    plugin.StringStat(topo.numaNode, "NUMA node"),
		StatPCIeSwitch:  plugin.StringStat(topo.pcieSwitch, "PCIe switch shared with other GPUs"),
		StatPCIBusID:    plugin.StringStat(d.pciBusID, "PCI bus ID"),
	}
	if d.parent != nil {
		topoAttrs[StatParentUUID] = plugin.StringStat(d.parent.uuid, "Physical GPU of this MIG device")
	}
	return &device.DeviceStats{
		Summary:   summary,
		Stats:     &structs.StatObject{Attributes: attrs, Nested: map[string]*structs.StatObject{StatTopology: {Attributes: topoAttrs}}},
		Timestamp: ts,
	}
}
