package device

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/hetgpu/hetgpu/plugin"
	"github.com/hetgpu/hetgpu/plugin/proto/structs"
)

// GPU sharing: the `sharing { gpus = ["all"]  slots = 4 }` block turns each chosen physical GPU
// into `slots` schedulable instances of type "gpu-slot", one device group per GPU. A job asks
// for a slot with `device "nvidia/gpu-slot" { count = 1 }`; a job asking for "nvidia/gpu"
// matches only type "gpu" and so never lands on a shared GPU. One device request is served
// from one group, so a request for several slots gets them all on one GPU.
//
// Reserve maps slots to their GPU: NVIDIA_VISIBLE_DEVICES/CUDA_VISIBLE_DEVICES name the
// parent UUID, and the MPS limits of the slots (thread percentage, pinned memory) come along
// for the task driver, which runs the task as a client of the GPU's MPS daemon.

// SlotDeviceType is the Nomad device type of a GPU slot.
const SlotDeviceType = "gpu-slot"

// Slot group attributes (besides the parent's, with memory replaced by the slot's share).
const (
	AttrSMShare      = "sm_share"      // int percent of the GPU's SMs one slot may use (MPS active threads)
	AttrSlots        = "slots"         // int slots of the parent GPU
	AttrParentModel  = "parent_model"  // string product name of the parent GPU
	AttrParentUUID   = "parent_uuid"   // string UUID of the parent GPU
	AttrParentMemory = "parent_memory" // int MiB of the parent GPU
	AttrSharing      = "sharing"       // string "mps": how shares are enforced
)

// Envs Reserve sets for slots. The two CUDA_MPS_ ones are MPS's own client variables; the
// HETGPU_ ones tell the task driver which slots and GPUs the task holds.
const (
	EnvMPSThreadPercentage = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
	EnvMPSPinnedMemLimit   = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"
	EnvSlotIDs             = "HETGPU_SLOT_IDS"
	EnvMPSGPUs             = "HETGPU_MPS_GPUS"
)

// maxSlots is MPS's client limit per GPU on Volta and newer.
const maxSlots = 48

// SharingConfig is the `sharing { ... }` block.
type SharingConfig struct {
	// GPUs selects the shared GPUs: "all", NVML indexes ("0") or GPU UUIDs.
	GPUs  []string `msgpack:"gpus"`
	Slots int      `msgpack:"slots"`
}

// validate checks the block; errors name the field.
func (s *SharingConfig) validate() error {
	if s.Slots < 2 || s.Slots > maxSlots {
		return fmt.Errorf("config field \"sharing.slots\": got %d, want 2..%d (MPS clients per GPU)", s.Slots, maxSlots)
	}
	if len(s.GPUs) == 0 {
		return fmt.Errorf("config field \"sharing.gpus\": empty, want \"all\", GPU indexes (\"0\") or GPU UUIDs")
	}
	for i, g := range s.GPUs {
		switch {
		case g == "all", strings.HasPrefix(g, "GPU-"):
		default:
			if n, err := strconv.Atoi(g); err != nil || n < 0 {
				return fmt.Errorf("config field \"sharing.gpus[%d]\": got %q, want \"all\", a GPU index such as \"0\" or a GPU UUID (GPU-...)", i, g)
			}
		}
	}
	return nil
}

// chooses reports whether the block shares a physical GPU.
func (s *SharingConfig) chooses(g *instance) bool {
	for _, sel := range s.GPUs {
		if sel == "all" || sel == g.uuid || sel == strconv.Itoa(g.index) {
			return true
		}
	}
	return false
}

// SlotID is the device ID of slot k of a GPU: the parent UUID stays a prefix so logs and
// allocations show which GPU a slot belongs to.
func SlotID(parentUUID string, k int) string { return fmt.Sprintf("%s-slot%d", parentUUID, k) }

// slotInfo is what one slot instance carries.
type slotInfo struct {
	k, of   int
	smPct   int
	memMiB  int64
	phys    *instance
	groupNm string
}

// applySharing replaces each chosen whole GPU in inv.devices by its slots. MIG-mode GPUs are
// never shared (their slices are already partitions).
func applySharing(inv *inventory, s *SharingConfig) {
	if inv == nil || s == nil {
		return
	}
	var out []*instance
	for _, d := range inv.devices {
		if d.parent != nil || d.migMode || !s.chooses(d) {
			out = append(out, d)
			continue
		}
		out = append(out, slotsOf(d, s.Slots)...)
	}
	inv.devices = out
	inv.byUUID = map[string]*instance{}
	for _, d := range inv.devices {
		inv.byUUID[d.uuid] = d
	}
}

// slotsOf builds n slot instances of a physical GPU. Slots share the GPU's handle (stats and
// health are the GPU's) and its minor number (Reserve binds the GPU's device node).
func slotsOf(g *instance, n int) []*instance {
	memMiB := int64(0)
	if a := g.attrs[AttrMemory]; a != nil {
		memMiB = a.GetIntVal()
	}
	info := slotInfo{of: n, smPct: 100 / n, memMiB: memMiB / int64(n), phys: g,
		groupNm: fmt.Sprintf("%s shared %d", g.name, g.index)}
	attrs := slotAttributes(g, info, memMiB)
	out := make([]*instance, 0, n)
	for k := range n {
		si := info
		si.k = k
		out = append(out, &instance{uuid: SlotID(g.uuid, k), name: info.groupNm, index: g.index, gi: -1,
			minor: g.minor, pciBusID: g.pciBusID, handle: g.handle, parent: g, attrs: attrs, topo: g.topo,
			fault: g.fault, slot: &si})
	}
	return out
}

func slotAttributes(g *instance, info slotInfo, memMiB int64) map[string]*structs.Attribute {
	b := plugin.NewAttributes()
	b.Int(AttrMemory, info.memMiB, plugin.UnitMiB)
	b.Int(AttrParentMemory, memMiB, plugin.UnitMiB)
	b.Int(AttrSMShare, int64(info.smPct), "")
	b.Int(AttrSlots, int64(info.of), "")
	b.String(AttrParentModel, g.name)
	b.String(AttrParentUUID, g.uuid)
	b.String(AttrSharing, "mps")
	own, err := b.Build()
	if err != nil {
		own = map[string]*structs.Attribute{}
	}
	attrs := maps.Clone(g.attrs)
	if attrs == nil {
		attrs = map[string]*structs.Attribute{}
	}
	maps.Copy(attrs, own)
	return attrs
}

// slotEnvs are the env variables of a reservation of slots: the parent GPUs (in the order
// of first mention), the MPS thread percentage (the least over the GPUs: MPS takes one value
// per client) and the pinned memory limit per visible GPU ordinal. k slots of one GPU give
// k times one slot's share.
func slotEnvs(devs []*instance) map[string]string {
	var parents []*instance
	count := map[*instance]int{}
	var slotIDs []string
	for _, d := range devs {
		p := d.slot.phys
		if count[p] == 0 {
			parents = append(parents, p)
		}
		count[p]++
		slotIDs = append(slotIDs, d.uuid)
	}
	pct := 100
	var uuids, limits []string
	for i, p := range parents {
		var one slotInfo
		for _, d := range devs {
			if d.slot.phys == p {
				one = *d.slot
				break
			}
		}
		pct = min(pct, min(100, one.smPct*count[p]))
		uuids = append(uuids, p.uuid)
		if one.memMiB > 0 {
			limits = append(limits, fmt.Sprintf("%d=%dMB", i, one.memMiB*int64(count[p])))
		}
	}
	vis := strings.Join(uuids, ",")
	env := map[string]string{
		EnvNvidiaVisibleDevices: vis,
		EnvCUDAVisibleDevices:   vis,
		EnvMPSThreadPercentage:  strconv.Itoa(pct),
		EnvSlotIDs:              strings.Join(slotIDs, ","),
		EnvMPSGPUs:              vis,
	}
	if len(limits) > 0 {
		env[EnvMPSPinnedMemLimit] = strings.Join(limits, ",")
	}
	return env
}

// splitSlots reports whether every device is a slot; a mix is an error (one Nomad device
// request is one group, so Nomad never asks for both at once).
func splitSlots(devs []*instance) (bool, error) {
	slots := 0
	for _, d := range devs {
		if d.slot != nil {
			slots++
		}
	}
	if slots > 0 && slots < len(devs) {
		var ids []string
		for _, d := range devs {
			ids = append(ids, d.uuid)
		}
		slices.Sort(ids)
		return false, fmt.Errorf("device IDs %s mix GPU slots and whole GPUs; reserve them in separate requests", strings.Join(ids, ", "))
	}
	return slots > 0, nil
}
