package device

import (
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/hetgpu/hetgpu/device/fake"
	"github.com/hetgpu/hetgpu/plugin/proto/device"
)

func TestReserve(t *testing.T) {
	f, inv := fakeInventory(t, fake.Spec{GPUs: []string{"4x T4"}})
	ids := f.UUIDs()
	present := map[string]bool{"/dev/nvidiactl": true, "/dev/nvidia-uvm": true, "/dev/nvidia1": true, "/dev/nvidia3": true}
	res, err := reserve(inv, []string{ids[3], ids[1]}, func(p string) bool { return present[p] })
	if err != nil {
		t.Fatal(err)
	}
	want := ids[3] + "," + ids[1]
	if res.Envs[EnvNvidiaVisibleDevices] != want || res.Envs[EnvCUDAVisibleDevices] != want {
		t.Errorf("envs = %v", res.Envs)
	}
	var paths []string
	for _, d := range res.Devices {
		if d.HostPath != d.TaskPath || d.Permissions != "rw" {
			t.Errorf("device spec %+v", d)
		}
		paths = append(paths, d.HostPath)
	}
	if !slices.Equal(paths, []string{"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia1", "/dev/nvidia3"}) {
		t.Errorf("device nodes = %v", paths)
	}
	if _, err := reserve(inv, []string{ids[0], "GPU-nope", "MIG-nope"}, func(string) bool { return false }); err == nil ||
		!strings.Contains(err.Error(), "unknown device IDs GPU-nope, MIG-nope") {
		t.Errorf("unknown IDs: %v", err)
	}
	if res, err := reserve(inv, nil, nil); err != nil || len(res.Envs) != 0 {
		t.Errorf("empty request: %v %v", res, err)
	}
}

func TestReserveOverGRPC(t *testing.T) {
	s := serve(t, `fake {
  gpus = ["2x T4"]
}`, WithDeviceExists(func(string) bool { return false }))
	fp := s.fingerprints(t).next()
	id := fp.DeviceGroup[0].Devices[1].ID
	res, err := s.device.Reserve(t.Context(), &device.ReserveRequest{DeviceIds: []string{id}})
	if err != nil || res.ContainerRes.Envs[EnvNvidiaVisibleDevices] != id || len(res.ContainerRes.Devices) != 0 {
		t.Fatalf("reserve = %v, %v", res, err)
	}
	_, err = s.device.Reserve(t.Context(), &device.ReserveRequest{DeviceIds: []string{"GPU-missing"}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "GPU-missing") {
		t.Errorf("unknown ID error = %v", err)
	}
}
