package device

import (
	"strings"
	"testing"
	"time"

	"github.com/hetgpu/hetgpu/device/fake"
	"github.com/hetgpu/hetgpu/plugin"
	"github.com/hetgpu/hetgpu/plugin/proto/device"
)

const sharingConfig = `
fingerprint_period = "200ms"
sharing {
  gpus  = ["1"]
  slots = 4
}
fake {
  gpus = ["2x T4", "1x V100"]
  seed = "share"
}`

func TestSharedSlotFingerprint(t *testing.T) {
	s := serve(t, sharingConfig)
	resp := s.fingerprints(t).next()
	uuids := s.fleet(t).UUIDs()
	whole := groupByName(resp, "Tesla T4")
	if whole == nil || whole.DeviceType != "gpu" || len(whole.Devices) != 1 || whole.Devices[0].ID != uuids[0] {
		t.Fatalf("whole T4 group = %v, want only GPU 0 (%s)", whole, uuids[0])
	}
	slots := groupByName(resp, "Tesla T4 shared 1")
	if slots == nil {
		t.Fatalf("no slot group in %v", resp.DeviceGroup)
	}
	if slots.Vendor != "nvidia" || slots.DeviceType != "gpu-slot" {
		t.Errorf("slot group identity %s/%s", slots.Vendor, slots.DeviceType)
	}
	if err := plugin.ValidateGroup(slots); err != nil {
		t.Error(err)
	}
	var ids []string
	for _, d := range slots.Devices {
		ids = append(ids, d.ID)
		if !d.Healthy || d.HwLocality.GetPciBusId() == "" {
			t.Errorf("slot %+v", d)
		}
	}
	want := []string{uuids[1] + "-slot0", uuids[1] + "-slot1", uuids[1] + "-slot2", uuids[1] + "-slot3"}
	if strings.Join(ids, ",") != strings.Join(want, ",") {
		t.Errorf("slot IDs = %v, want %v", ids, want)
	}
	// A T4 has 15360 MiB (fake model from the datasheet's 16 GB): a quarter each.
	checkAttrs(t, slots, []wantAttr{
		{AttrMemory, int64(15360 / 4), "MiB"},
		{AttrParentMemory, int64(15360), "MiB"},
		{AttrSMShare, int64(25), ""},
		{AttrSlots, int64(4), ""},
		{AttrParentModel, "Tesla T4", ""},
		{AttrParentUUID, uuids[1], ""},
		{AttrSharing, "mps", ""},
		{AttrArchitecture, "turing", ""},
	})
	if v := groupByName(resp, "Tesla V100-SXM2-16GB"); v == nil || v.DeviceType != "gpu" {
		t.Errorf("unshared V100 group = %v", v)
	}
}

func TestSharingAllGPUs(t *testing.T) {
	s := serve(t, `sharing {
  gpus = ["all"]
}
fake {
  gpus = ["2x L4"]
}`)
	resp := s.fingerprints(t).next()
	n := 0
	for _, g := range resp.DeviceGroup {
		if g.DeviceType != SlotDeviceType || len(g.Devices) != 2 {
			t.Errorf("group %s/%s with %d devices, want gpu-slot with 2 (default slots)", g.DeviceType, g.DeviceName, len(g.Devices))
		}
		n++
	}
	if n != 2 {
		t.Errorf("%d groups, want one per GPU", n)
	}
}

func TestSlotHealthFollowsGPU(t *testing.T) {
	s := serve(t, sharingConfig)
	fs := s.fingerprints(t)
	fs.next()
	f := s.fleet(t)
	var got *device.FingerprintResponse
	for i := 0; got == nil && i < 200; i++ {
		f.InjectXID(1, 79)
		got = fs.within(50 * time.Millisecond)
	}
	if got == nil {
		t.Fatal("no new fingerprint after XID 79")
	}
	for _, d := range groupByName(got, "Tesla T4 shared 1").Devices {
		if d.Healthy || !strings.Contains(d.HealthDescription, "XID 79") {
			t.Errorf("slot %s of the failed GPU: healthy %t %q", d.ID, d.Healthy, d.HealthDescription)
		}
	}
	for _, d := range groupByName(got, "Tesla T4").Devices {
		if !d.Healthy {
			t.Errorf("GPU 0 turned unhealthy: %+v", d)
		}
	}
}

func TestReserveSlots(t *testing.T) {
	f, inv := fakeInventory(t, fake.Spec{GPUs: []string{"2x A100-SXM4-40GB"}})
	applySharing(inv, &SharingConfig{GPUs: []string{"all"}, Slots: 4})
	u := f.UUIDs()
	present := map[string]bool{"/dev/nvidiactl": true}
	tests := []struct {
		name string
		ids  []string
		want map[string]string
	}{
		{"one slot", []string{u[0] + "-slot2"}, map[string]string{
			EnvNvidiaVisibleDevices: u[0], EnvCUDAVisibleDevices: u[0],
			EnvMPSThreadPercentage: "25", EnvMPSPinnedMemLimit: "0=10240MB",
			EnvSlotIDs: u[0] + "-slot2", EnvMPSGPUs: u[0]}},
		{"two slots of one GPU", []string{u[1] + "-slot0", u[1] + "-slot3"}, map[string]string{
			EnvNvidiaVisibleDevices: u[1], EnvCUDAVisibleDevices: u[1],
			EnvMPSThreadPercentage: "50", EnvMPSPinnedMemLimit: "0=20480MB",
			EnvSlotIDs: u[1] + "-slot0," + u[1] + "-slot3", EnvMPSGPUs: u[1]}},
		{"slots of two GPUs", []string{u[1] + "-slot0", u[0] + "-slot0", u[0] + "-slot1"}, map[string]string{
			EnvNvidiaVisibleDevices: u[1] + "," + u[0], EnvCUDAVisibleDevices: u[1] + "," + u[0],
			EnvMPSThreadPercentage: "25", EnvMPSPinnedMemLimit: "0=10240MB,1=20480MB",
			EnvSlotIDs: u[1] + "-slot0," + u[0] + "-slot0," + u[0] + "-slot1", EnvMPSGPUs: u[1] + "," + u[0]}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res, err := reserve(inv, tc.ids, func(p string) bool { return present[p] })
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Envs) != len(tc.want) {
				t.Errorf("envs = %v, want %v", res.Envs, tc.want)
			}
			for k, v := range tc.want {
				if res.Envs[k] != v {
					t.Errorf("%s = %q, want %q", k, res.Envs[k], v)
				}
			}
			if len(res.Devices) != 1 || res.Devices[0].HostPath != "/dev/nvidiactl" {
				t.Errorf("devices = %v", res.Devices)
			}
		})
	}
	if _, err := reserve(inv, []string{u[0]}, func(string) bool { return false }); err == nil || !strings.Contains(err.Error(), "unknown device IDs "+u[0]) {
		t.Errorf("a shared GPU's own UUID must not be reservable: %v", err)
	}
}

func TestReserveRejectsMixedSlotsAndGPUs(t *testing.T) {
	f, inv := fakeInventory(t, fake.Spec{GPUs: []string{"2x T4"}})
	applySharing(inv, &SharingConfig{GPUs: []string{"0"}, Slots: 2})
	u := f.UUIDs()
	_, err := reserve(inv, []string{u[0] + "-slot0", u[1]}, func(string) bool { return false })
	if err == nil || !strings.Contains(err.Error(), "mix GPU slots and whole GPUs") {
		t.Errorf("mixed reservation error = %v", err)
	}
}

func TestSharingConfigErrors(t *testing.T) {
	tests := []struct{ hcl, want string }{
		{`sharing {
  gpus = ["all"]
  slots = 1
}`, `config field "sharing.slots": got 1, want 2..48`},
		{`sharing {
  gpus = ["first"]
}`, `config field "sharing.gpus[0]": got "first"`},
		{`sharing {
  gpus = []
}`, `config field "sharing.gpus": empty`},
	}
	for _, tc := range tests {
		_, err := ParseConfig(encodeConfig(t, tc.hcl))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", tc.hcl, err, tc.want)
		}
	}
}
