package device

import (
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/hetgpu/hetgpu/plugin/proto/device"
)

// Env variables set by Reserve. NVIDIA_VISIBLE_DEVICES drives the NVIDIA container runtime (and
// makes Nomad's docker driver pick it); CUDA_VISIBLE_DEVICES restricts CUDA in exec-style tasks.
// Both take UUIDs, which stay correct when indexes differ between host and task.
const (
	EnvNvidiaVisibleDevices = "NVIDIA_VISIBLE_DEVICES"
	EnvCUDAVisibleDevices   = "CUDA_VISIBLE_DEVICES"
)

// controlDevices are the driver-wide nodes every CUDA process opens.
func controlDevices() []string {
	return []string{"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"}
}

// reserve builds the container reservation for ids. Device nodes are listed only if present on
// the host (a fake node has none), so exec-style drivers can bind exactly what exists.
func reserve(inv *inventory, ids []string, exists func(string) bool) (*device.ContainerReservation, error) {
	if len(ids) == 0 {
		return &device.ContainerReservation{}, nil
	}
	var unknown []string
	var devs []*instance
	nodes := map[string]bool{}
	for _, id := range ids {
		d := inv.lookup(id)
		if d == nil {
			unknown = append(unknown, id)
			continue
		}
		devs = append(devs, d)
		if d.minor >= 0 {
			nodes[fmt.Sprintf("/dev/nvidia%d", d.minor)] = true
		}
	}
	if len(unknown) > 0 {
		return nil, fmt.Errorf("unknown device IDs %s: not in the latest fingerprint (known: %s)",
			strings.Join(unknown, ", "), strings.Join(inv.ids(), ", "))
	}
	shared, err := splitSlots(devs)
	if err != nil {
		return nil, err
	}
	res := &device.ContainerReservation{Envs: map[string]string{
		EnvNvidiaVisibleDevices: strings.Join(ids, ","),
		EnvCUDAVisibleDevices:   strings.Join(ids, ","),
	}}
	if shared {
		res.Envs = slotEnvs(devs)
	}
	paths := controlDevices()
	var gpuNodes []string
	for p := range nodes {
		gpuNodes = append(gpuNodes, p)
	}
	slices.Sort(gpuNodes)
	for _, p := range append(paths, gpuNodes...) {
		if exists(p) {
			res.Devices = append(res.Devices, &device.DeviceSpec{TaskPath: p, HostPath: p, Permissions: "rw"})
		}
	}
	return res, nil
}

func (inv *inventory) lookup(id string) *instance {
	if inv == nil {
		return nil
	}
	return inv.byUUID[id]
}

func (inv *inventory) ids() []string {
	if inv == nil || len(inv.devices) == 0 {
		return []string{"none"}
	}
	out := make([]string, 0, len(inv.devices))
	for _, d := range inv.devices {
		out = append(out, d.uuid)
	}
	return out
}

// hostDeviceExists reports whether a character device node exists.
func hostDeviceExists(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
