package device

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/hetgpu/hetgpu/plugin"
	"github.com/hetgpu/hetgpu/plugin/proto/device"
	"github.com/hetgpu/hetgpu/plugin/proto/structs"
)

// Nomad identity of every group (drop-in for nomad-device-nvidia).
const (
	Vendor     = "nvidia"
	DeviceType = "gpu"
)

// instance is one schedulable device: a whole GPU, or a MIG device of a GPU in MIG mode.
type instance struct {
	uuid     string
	name     string // group name: NVML product name, "<name> MIG <profile>" for MIG
	index    int    // NVML index of the (parent) GPU
	gi       int    // GPU instance ID for MIG devices, -1 otherwise
	minor    int    // /dev/nvidia<minor> of the (parent) GPU, -1 if unknown
	pciBusID string // sysfs form, lowercase
	handle   nvml.Device
	parent   *instance // physical GPU of a MIG device
	migMode  bool      // physical GPU with MIG enabled (not itself schedulable)
	attrs    map[string]*structs.Attribute
	topo     topology
	// fault is set when a query that must work failed (e.g. ERROR_GPU_IS_LOST).
	fault string
	// slot is set on a shared GPU's slot (sharing.go); parent is then the GPU.
	slot *slotInfo
}

// inventory is one enumeration of the node.
type inventory struct {
	physical []*instance          // every GPU, MIG-mode parents included
	devices  []*instance          // schedulable: non-MIG GPUs and MIG devices
	byUUID   map[string]*instance // schedulable devices by UUID
	system   systemInfo
}

type systemInfo struct {
	driverVersion string
	cudaVersion   string
}

// hardErr reports whether an NVML return means the device is broken rather than the query
// unsupported on this model.
func hardErr(r nvml.Return) bool {
	return r != nvml.SUCCESS && r != nvml.ERROR_NOT_SUPPORTED && r != nvml.ERROR_FUNCTION_NOT_FOUND
}

// errNVML wraps an NVML return with the query that produced it.
type errNVML struct {
	query string
	ret   nvml.Return
}

func (e *errNVML) Error() string { return fmt.Sprintf("NVML %s: %s", e.query, e.ret.Error()) }

// enumerate lists the node's GPUs. prev (may be nil) keeps GPUs whose handle or UUID query fails
// in the list, marked faulty, so a failing GPU turns unhealthy instead of vanishing.
func enumerate(lib nvml.Interface, ignored map[string]bool, prev *inventory) (*inventory, error) {
	inv := &inventory{byUUID: map[string]*instance{}}
	if v, r := lib.SystemGetDriverVersion(); r == nvml.SUCCESS {
		inv.system.driverVersion = v
	}
	if v, r := lib.SystemGetCudaDriverVersion(); r == nvml.SUCCESS {
		inv.system.cudaVersion = fmt.Sprintf("%d.%d", v/1000, v%1000/10)
	}
	count, r := lib.DeviceGetCount()
	if r != nvml.SUCCESS {
		return nil, &errNVML{"device count", r}
	}
	for i := range count {
		gpu, err := probeGPU(lib, i, inv.system)
		if err != nil {
			old := prev.physicalAt(i)
			if old == nil {
				continue // never seen: nothing to keep
			}
			kept := *old
			kept.fault = err.Error()
			gpu = &kept
		}
		if ignored[gpu.uuid] {
			continue
		}
		inv.physical = append(inv.physical, gpu)
		if !gpu.migMode {
			inv.devices = append(inv.devices, gpu)
			continue
		}
		for _, m := range probeMIG(gpu) {
			if !ignored[m.uuid] {
				inv.devices = append(inv.devices, m)
			}
		}
	}
	for _, d := range inv.devices {
		inv.byUUID[d.uuid] = d
	}
	computeTopology(lib, inv.physical)
	return inv, nil
}

func (inv *inventory) physicalAt(index int) *instance {
	if inv == nil {
		return nil
	}
	for _, p := range inv.physical {
		if p.index == index {
			return p
		}
	}
	return nil
}

// probeGPU reads one GPU's identity and stable attributes.
func probeGPU(lib nvml.Interface, index int, sys systemInfo) (*instance, error) {
	h, r := lib.DeviceGetHandleByIndex(index)
	if r != nvml.SUCCESS {
		return nil, &errNVML{fmt.Sprintf("handle of GPU %d", index), r}
	}
	uuid, r := h.GetUUID()
	if r != nvml.SUCCESS || uuid == "" {
		return nil, &errNVML{fmt.Sprintf("UUID of GPU %d", index), r}
	}
	g := &instance{uuid: uuid, index: index, gi: -1, minor: -1, handle: h}
	var faults []string
	fail := func(query string, r nvml.Return) {
		if hardErr(r) {
			faults = append(faults, (&errNVML{query, r}).Error())
		}
	}
	name, r := h.GetName()
	fail("name", r)
	g.name = strings.TrimSpace(name)
	if g.name == "" {
		g.name = "N/A" // Nomad rejects empty names; nomad-device-nvidia uses the same placeholder
	}
	if m, r := h.GetMinorNumber(); r == nvml.SUCCESS {
		g.minor = m
	}
	pci, r := h.GetPciInfo()
	fail("PCI info", r)
	if r == nvml.SUCCESS {
		g.pciBusID = normalizeBusID(pci)
	}
	if cur, _, r := h.GetMigMode(); r == nvml.SUCCESS && cur == nvml.DEVICE_MIG_ENABLE {
		g.migMode = true
	}
	g.attrs = gpuAttributes(h, sys, g.migMode, fail)
	if len(faults) > 0 {
		g.fault = strings.Join(faults, "; ")
	}
	return g, nil
}

// probeMIG lists a MIG-mode GPU's MIG devices. Attributes are the slice's own where NVML has
// them (memory, SMs) and the parent's otherwise (clocks, power limits, PCIe).
func probeMIG(parent *instance) []*instance {
	n, r := parent.handle.GetMaxMigDeviceCount()
	if r != nvml.SUCCESS {
		return nil
	}
	var out []*instance
	for j := range n {
		h, r := parent.handle.GetMigDeviceHandleByIndex(j)
		if r != nvml.SUCCESS {
			continue
		}
		uuid, r := h.GetUUID()
		if r != nvml.SUCCESS || uuid == "" {
			continue
		}
		m := &instance{uuid: uuid, index: parent.index, gi: j, minor: parent.minor, pciBusID: parent.pciBusID,
			handle: h, parent: parent, fault: parent.fault}
		if gi, r := h.GetGpuInstanceId(); r == nvml.SUCCESS {
			m.gi = gi
		}
		name, r := h.GetName()
		if r != nvml.SUCCESS || strings.TrimSpace(name) == "" {
			name = parent.name + " MIG"
		}
		m.name = strings.TrimSpace(name)
		m.attrs = migAttributes(h, parent)
		out = append(out, m)
	}
	return out
}

// normalizeBusID turns NVML's "00000000:3B:00.0" into sysfs's "0000:3b:00.0", which Nomad
// compares case-sensitively; NUL padding is dropped.
func normalizeBusID(p nvml.PciInfo) string {
	var b strings.Builder
	for _, c := range p.BusId {
		if c == 0 {
			break
		}
		b.WriteByte(byte(c))
	}
	s := b.String()
	fn := uint64(0)
	if dom, rest, ok := strings.Cut(s, ":"); ok {
		if bus, rest, ok := strings.Cut(rest, ":"); ok {
			if dev, f, ok := strings.Cut(rest, "."); ok {
				d, e1 := strconv.ParseUint(dom, 16, 32)
				bb, e2 := strconv.ParseUint(bus, 16, 8)
				dd, e3 := strconv.ParseUint(dev, 16, 8)
				ff, e4 := strconv.ParseUint(f, 16, 8)
				if errors.Join(e1, e2, e3, e4) == nil {
					return fmt.Sprintf("%04x:%02x:%02x.%x", d, bb, dd, ff)
				}
			}
		}
	}
	return fmt.Sprintf("%04x:%02x:%02x.%x", p.Domain, p.Bus&0xff, p.Device&0xff, fn)
}

// groups builds the fingerprint: one group per (vendor, type, name), devices ordered by index,
// attributes from the group's first device. health maps UUIDs to an unhealthy description.
// Groups failing Nomad's validation are dropped (and returned as errors) so one bad group never
// makes Nomad kill the plugin.
// deviceType is the Nomad device type the instance is fingerprinted under: a slot of a shared
// GPU is its own type, so that jobs ask for a slot or a whole GPU explicitly.
func (d *instance) deviceType() string {
	if d.slot != nil {
		return SlotDeviceType
	}
	return DeviceType
}

// ordered is the inventory's devices by GPU index, then GPU instance, so that fingerprints
// and stats list them in the same order.
func (inv *inventory) ordered() []*instance {
	devs := slices.Clone(inv.devices)
	slices.SortStableFunc(devs, func(a, b *instance) int {
		return cmp.Or(cmp.Compare(a.index, b.index), cmp.Compare(a.gi, b.gi))
	})
	return devs
}

func (inv *inventory) groups(health func(*instance) string) ([]*device.DeviceGroup, []error) {
	if inv == nil {
		return nil, nil
	}
	byName := map[string]*device.DeviceGroup{}
	var names []string
	for _, d := range inv.ordered() {
		g, ok := byName[d.name]
		if !ok {
			g = &device.DeviceGroup{Vendor: Vendor, DeviceType: d.deviceType(), DeviceName: d.name, Attributes: d.attrs}
			byName[d.name] = g
			names = append(names, d.name)
		}
		desc := health(d)
		g.Devices = append(g.Devices, &device.DetectedDevice{ID: d.uuid, Healthy: desc == "", HealthDescription: desc,
			HwLocality: &device.DeviceLocality{PciBusId: d.pciBusID}})
	}
	slices.Sort(names)
	var out []*device.DeviceGroup
	var errs []error
	for _, n := range names {
		g := byName[n]
		if err := plugin.ValidateGroup(g); err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, g)
	}
	return out, errs
}
