package fake

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"

	"github.com/hetgpu/hetgpu/device/arch"
	"github.com/hetgpu/hetgpu/model/gpuspec"
)

// GPU is one fake physical GPU. Its state is guarded by the fleet's mutex.
type GPU struct {
	fleet *Fleet
	dev   *server.Device
	h     *handle // what NVML callers get
	model Model
	ds    gpuspec.Spec

	index, box, inBox, boxSize int
	memTotalMiB, memUsedMiB    uint64
	util, memUtil              float64
	energyMJ                   float64
	lastT                      time.Time
	powerLimitW                uint32
	errs                       map[string]nvml.Return
	eventSets                  []*eventSet
	peers                      []*GPU // direct NVLink peers (no NVSwitch)
	migs                       []*migDevice
	// procUtil is the SM utilisation (0..1) of each process on the GPU (MPS clients), by PID.
	procUtil map[uint32]float64
}

// UUID is the GPU's NVML UUID.
func (g *GPU) UUID() string { return g.dev.UUID }

// Model is the product the GPU poses as.
func (g *GPU) Model() Model { return g.model }

// MIGUUIDs lists the UUIDs of the GPU's MIG devices.
func (g *GPU) MIGUUIDs() []string {
	out := make([]string, len(g.migs))
	for i, m := range g.migs {
		out[i] = m.uuid
	}
	return out
}

func newGPU(f *Fleet, dev *server.Device, m Model, ds gpuspec.Spec, idx, box, inBox, boxSize int, seed string) *GPU {
	g := &GPU{fleet: f, dev: dev, model: m, ds: ds, index: idx, box: box, inBox: inBox, boxSize: boxSize,
		memTotalMiB: m.memoryMiB(ds.MemoryGiB), powerLimitW: uint32(ds.TDPW), errs: map[string]nvml.Return{}, lastT: f.now(),
		procUtil: map[uint32]float64{}}
	g.h = &handle{Device: dev}
	dev.UUID = deterministicUUID("GPU", seed, idx, m.Key)
	// Boxes sit on their own PCI bus ranges: bus = 0x10 * (box+1) + index in box, like sysfs names.
	dev.PciBusID = fmt.Sprintf("0000:%02x:00.0", 0x10*(box+1)+inBox)
	dev.MemoryInfo = nvml.Memory{Total: g.memTotalMiB << 20}
	g.setFuncs()
	return g
}

// linkPeers wires direct NVLinks (V100-style hybrid mesh, here a full mesh up to the link count)
// inside a box; NVSwitch models connect every link to the switch instead.
func (g *GPU) linkPeers() {
	if g.model.NVLinks == 0 || g.model.NVSwitch {
		return
	}
	for _, o := range g.fleet.gpus {
		if o != g && o.box == g.box && len(g.peers) < g.model.NVLinks {
			g.peers = append(g.peers, o)
		}
	}
}

// errFor returns the injected error for a query family, if any. Called with f.mu held.
func (g *GPU) errFor(query string) nvml.Return {
	if r, ok := g.errs[query]; ok {
		return r
	}
	if r, ok := g.errs["all"]; ok {
		return r
	}
	return nvml.SUCCESS
}

func (g *GPU) powerW() float64 { return g.ds.Power(g.util, g.fleet.alpha) }

// integrate advances the energy counter to t at the current power.
func (g *GPU) integrate(t time.Time) {
	if dt := t.Sub(g.lastT); dt > 0 {
		g.energyMJ += g.powerW() * dt.Seconds() * 1000
	}
	g.lastT = t
}

func busID(s string) [32]int8 {
	var out [32]int8
	for i := 0; i < len(s) && i < 31; i++ {
		out[i] = int8(s[i])
	}
	return out
}

func (g *GPU) pciInfo() nvml.PciInfo {
	var dom, bus, dev uint32
	fmt.Sscanf(g.dev.PciBusID, "%x:%x:%x", &dom, &bus, &dev)
	// NVML reports upper-case 8-digit-domain IDs ("00000000:3B:00.0"); the plugin must normalise.
	nv := strings.ToUpper(fmt.Sprintf("%08x:%02x:%02x.0", dom, bus, dev))
	return nvml.PciInfo{Domain: dom, Bus: bus, Device: dev, PciDeviceId: g.model.PciDeviceID, BusId: busID(nv)}
}

// lock takes the fleet's lock for an NVML query of kind and says what the query returns
// (SetError's error for kind, else SUCCESS); the caller unlocks.
func (g *GPU) lock(kind string) (unlock func(), r nvml.Return) {
	g.fleet.mu.Lock()
	return g.fleet.mu.Unlock, g.errFor(kind)
}

// answer is an NVML query of kind that returns what reads, under the fleet's lock.
func answer[T any](g *GPU, kind string, what func() T) func() (T, nvml.Return) {
	return func() (T, nvml.Return) {
		unlock, r := g.lock(kind)
		defer unlock()
		return what(), r
	}
}

func (g *GPU) setFuncs() {
	f, d, m := g.fleet, g.dev, g.model
	d.GetNameFunc = answer(g, "identity", func() string { return m.Name })
	d.GetUUIDFunc = answer(g, "identity", func() string { return d.UUID })
	d.GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) {
		unlock, r := g.lock("memory")
		defer unlock()
		total := g.memTotalMiB << 20
		used := g.memUsedMiB << 20
		return nvml.Memory{Total: total, Used: used, Free: total - used}, r
	}
	d.GetBAR1MemoryInfoFunc = answer(g, "memory", func() nvml.BAR1Memory {
		return nvml.BAR1Memory{Bar1Total: m.BAR1MiB << 20, Bar1Free: m.BAR1MiB << 20}
	})
	d.GetPciInfoFunc = answer(g, "pcie", func() nvml.PciInfo { return g.pciInfo() })
	d.GetNumGpuCoresFunc = answer(g, "identity", func() int { return m.SMs * arch.CoresPerSM(m.CCMajor, m.CCMinor) })
	d.GetMaxClockInfoFunc = func(c nvml.ClockType) (uint32, nvml.Return) {
		unlock, r := g.lock("clocks")
		defer unlock()
		if c == nvml.CLOCK_MEM {
			return m.MaxMemMHz, r
		}
		return m.MaxSMMHz, r
	}
	d.GetClockInfoFunc = func(c nvml.ClockType) (uint32, nvml.Return) {
		unlock, r := g.lock("clocks")
		defer unlock()
		if c == nvml.CLOCK_MEM {
			return m.MaxMemMHz, r
		}
		// Idle GPUs drop to a base clock; busy ones boost.
		return uint32(float64(m.MaxSMMHz) * (0.3 + 0.7*min(1, g.util*4))), r
	}
	d.GetMemoryBusWidthFunc = answer(g, "identity", func() uint32 { return m.BusWidth })
	pcie := func(v int) func() (int, nvml.Return) { return answer(g, "pcie", func() int { return v }) }
	d.GetMaxPcieLinkGenerationFunc = pcie(m.PCIeGen)
	d.GetCurrPcieLinkGenerationFunc = pcie(m.PCIeGen)
	d.GetMaxPcieLinkWidthFunc = pcie(m.PCIeWidth)
	d.GetCurrPcieLinkWidthFunc = pcie(m.PCIeWidth)
	d.GetNvLinkStateFunc = func(link int) (nvml.EnableState, nvml.Return) {
		unlock, r := g.lock("topology")
		defer unlock()
		if r != nvml.SUCCESS {
			return 0, r
		}
		if link < 0 || link >= m.NVLinks {
			return 0, nvml.ERROR_NOT_SUPPORTED
		}
		if !m.NVSwitch && link >= len(g.peers) {
			return nvml.FEATURE_DISABLED, nvml.SUCCESS
		}
		return nvml.FEATURE_ENABLED, nvml.SUCCESS
	}
	d.GetNvLinkRemoteDeviceTypeFunc = func(link int) (nvml.IntNvLinkDeviceType, nvml.Return) {
		unlock, r := g.lock("topology")
		defer unlock()
		if m.NVSwitch {
			return nvml.NVLINK_DEVICE_TYPE_SWITCH, r
		}
		return nvml.NVLINK_DEVICE_TYPE_GPU, r
	}
	d.GetNvLinkRemotePciInfoFunc = func(link int) (nvml.PciInfo, nvml.Return) {
		unlock, r := g.lock("topology")
		defer unlock()
		if r != nvml.SUCCESS {
			return nvml.PciInfo{}, r
		}
		if m.NVSwitch {
			// One NVSwitch fabric per box.
			sw := fmt.Sprintf("00000000:%02X:00.0", 0x10*(g.box+1)+0x0E)
			return nvml.PciInfo{BusId: busID(sw)}, nvml.SUCCESS
		}
		if link < 0 || link >= len(g.peers) {
			return nvml.PciInfo{}, nvml.ERROR_INVALID_ARGUMENT
		}
		return g.peers[link].pciInfo(), nvml.SUCCESS
	}
	d.GetNumaNodeIdFunc = func() (int, nvml.Return) {
		unlock, r := g.lock("topology")
		defer unlock()
		// The first half of a box hangs off socket 0, the second half off socket 1.
		if g.boxSize > 1 && g.inBox >= (g.boxSize+1)/2 {
			return 1, r
		}
		return 0, r
	}
	d.GetTopologyCommonAncestorFunc = func(other nvml.Device) (nvml.GpuTopologyLevel, nvml.Return) {
		unlock, r := g.lock("topology")
		defer unlock()
		var o *GPU
		for _, x := range f.gpus {
			if x.h == other {
				o = x
			}
		}
		switch {
		case r != nvml.SUCCESS:
			return 0, r
		case o == nil:
			return 0, nvml.ERROR_INVALID_ARGUMENT
		case o == g:
			return nvml.TOPOLOGY_INTERNAL, nvml.SUCCESS
		case o.box == g.box && o.inBox/2 == g.inBox/2:
			return nvml.TOPOLOGY_SINGLE, nvml.SUCCESS // pairs of GPUs share a PCIe switch
		case o.box == g.box && (o.inBox >= (g.boxSize+1)/2) == (g.inBox >= (g.boxSize+1)/2):
			return nvml.TOPOLOGY_NODE, nvml.SUCCESS
		}
		return nvml.TOPOLOGY_SYSTEM, nvml.SUCCESS
	}
	limit := func(get func() uint32) func() (uint32, nvml.Return) {
		return answer(g, "power", func() uint32 { return get() * 1000 })
	}
	d.GetPowerManagementLimitFunc = limit(func() uint32 { return g.powerLimitW })
	d.GetEnforcedPowerLimitFunc = limit(func() uint32 { return g.powerLimitW })
	d.GetPowerManagementDefaultLimitFunc = limit(func() uint32 { return uint32(g.ds.TDPW) })
	d.GetPowerManagementLimitConstraintsFunc = func() (uint32, uint32, nvml.Return) {
		unlock, r := g.lock("power")
		defer unlock()
		return m.MinPowerW * 1000, uint32(g.ds.TDPW) * 1000, r
	}
	d.GetPowerUsageFunc = answer(g, "power", func() uint32 { return uint32(g.powerW() * 1000) })
	d.GetTotalEnergyConsumptionFunc = func() (uint64, nvml.Return) {
		unlock, r := g.lock("energy")
		defer unlock()
		g.integrate(f.now())
		return uint64(g.energyMJ), r
	}
	d.GetTemperatureFunc = func(nvml.TemperatureSensors) (uint32, nvml.Return) {
		unlock, r := g.lock("temperature")
		defer unlock()
		return uint32(32 + 45*g.util), r
	}
	d.GetUtilizationRatesFunc = answer(g, "utilization", func() nvml.Utilization {
		return nvml.Utilization{Gpu: uint32(g.util*100 + 0.5), Memory: uint32(g.memUtil*100 + 0.5)}
	})
	d.GetProcessUtilizationFunc = func(lastSeen uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
		unlock, r := g.lock("utilization")
		defer unlock()
		if r != nvml.SUCCESS {
			return nil, r
		}
		// One sample per busy process at the time of the query, like NVML's newest sample;
		// nothing newer than lastSeen (or no busy process) is NOT_FOUND, as in NVML.
		ts := uint64(f.now().UnixMicro())
		if ts <= lastSeen || len(g.procUtil) == 0 {
			return nil, nvml.ERROR_NOT_FOUND
		}
		out := make([]nvml.ProcessUtilizationSample, 0, len(g.procUtil))
		for pid, u := range g.procUtil {
			out = append(out, nvml.ProcessUtilizationSample{Pid: pid, TimeStamp: ts,
				SmUtil: uint32(u*100 + 0.5), MemUtil: uint32(u*60 + 0.5)})
		}
		slices.SortFunc(out, func(a, b nvml.ProcessUtilizationSample) int { return cmp.Compare(a.Pid, b.Pid) })
		return out, nvml.SUCCESS
	}
	reasons := func() (uint64, nvml.Return) {
		unlock, r := g.lock("clocks")
		defer unlock()
		if g.util == 0 {
			return nvml.ClocksEventReasonGpuIdle, r
		}
		if g.util >= 0.95 {
			return nvml.ClocksEventReasonSwPowerCap, r
		}
		return nvml.ClocksEventReasonNone, r
	}
	d.GetCurrentClocksEventReasonsFunc = reasons
	d.GetCurrentClocksThrottleReasonsFunc = reasons
	d.GetEccModeFunc = func() (nvml.EnableState, nvml.EnableState, nvml.Return) {
		unlock, r := g.lock("ecc")
		defer unlock()
		// Consumer-class memory (GDDR on T4/A10/L4) ships with ECC off by default.
		if m.Key == "T4" || m.Key == "A10" || m.Key == "L4" {
			return nvml.FEATURE_DISABLED, nvml.FEATURE_DISABLED, r
		}
		return nvml.FEATURE_ENABLED, nvml.FEATURE_ENABLED, r
	}
	d.GetTotalEccErrorsFunc = func(nvml.MemoryErrorType, nvml.EccCounterType) (uint64, nvml.Return) {
		unlock, r := g.lock("ecc")
		defer unlock()
		return 0, r
	}
	d.GetSupportedEventTypesFunc = func() (uint64, nvml.Return) {
		return nvml.EventTypeXidCriticalError, nvml.SUCCESS
	}
	d.RegisterEventsFunc = func(types uint64, set nvml.EventSet) nvml.Return {
		es, ok := set.(*eventSet)
		if !ok {
			return nvml.ERROR_INVALID_ARGUMENT
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		if types&nvml.EventTypeXidCriticalError != 0 {
			g.eventSets = append(g.eventSets, es)
		}
		return nvml.SUCCESS
	}
	d.IsMigDeviceHandleFunc = func() (bool, nvml.Return) { return false, nvml.SUCCESS }
	d.GetMaxMigDeviceCountFunc = func() (int, nvml.Return) {
		if m.mock == nil || len(m.mock.MIGProfiles.GpuInstanceProfiles) == 0 {
			return 0, nvml.ERROR_NOT_SUPPORTED
		}
		return 7, nvml.SUCCESS
	}
	d.GetMigDeviceHandleByIndexFunc = func(i int) (nvml.Device, nvml.Return) {
		unlock, r := g.lock("handle")
		defer unlock()
		if r != nvml.SUCCESS {
			return nil, r
		}
		if i < 0 || i >= len(g.migs) {
			return nil, nvml.ERROR_NOT_FOUND
		}
		return g.migs[i].dev, nvml.SUCCESS
	}
	base := d.GetMigModeFunc
	d.GetMigModeFunc = func() (int, int, nvml.Return) {
		if m.mock == nil {
			return 0, 0, nvml.ERROR_NOT_SUPPORTED
		}
		return base()
	}
}
