package fake

import (
	"fmt"
	"sort"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/hetgpu/hetgpu/model/gpuspec"
)

// migDevice is one MIG device handle on a fake GPU.
type migDevice struct {
	dev     *mockDevice
	uuid    string
	profile nvml.GpuInstanceProfileInfo
}

// enableMIG switches MIG mode on and creates the profiles' devices, checking go-nvml's mock
// profile table for names and for the 7-slice budget.
func (g *GPU) enableMIG(profiles []string, seed string) error {
	avail := g.model.migProfiles()
	if avail == nil {
		return fmt.Errorf("gpu %d (%s) does not support MIG; MIG models: A100-SXM4-40GB, A100-SXM4-80GB, H100-SXM5-80GB, H200-SXM-141GB", g.index, g.model.Key)
	}
	if len(profiles) == 0 {
		return fmt.Errorf("gpu %d: profiles is empty; expected e.g. [\"3g.20gb\", \"3g.20gb\"]", g.index)
	}
	var types []string
	for i, name := range profiles {
		p, ok := avail[strings.ToLower(strings.TrimSpace(name))]
		if !ok {
			var names []string
			for n := range avail {
				names = append(names, n)
			}
			sort.Strings(names)
			return fmt.Errorf("gpu %d: profile %q is not a %s MIG profile; expected one of %s", g.index, name, g.model.Key, strings.Join(names, ", "))
		}
		// The layout rule is the sidecar's (gpuspec.MIGLayout): compute and memory slices.
		typ, ok := gpuspec.MIGType(g.model.Name + " MIG " + ProfileName(p))
		if !ok {
			return fmt.Errorf("gpu %d: profile %q of %s is not a MIG type the sidecar knows", g.index, name, g.model.Key)
		}
		types = append(types, typ)
		use, _ := gpuspec.MIGLayout(types)
		switch {
		case use.Compute > gpuspec.MIGComputeSlices:
			return fmt.Errorf("gpu %d: profiles use %d slices, more than the %d a GPU has", g.index, use.Compute, gpuspec.MIGComputeSlices)
		case use.Memory > gpuspec.MIGMemorySlices:
			return fmt.Errorf("gpu %d: profiles use %d memory slices, more than the %d a GPU has", g.index, use.Memory, gpuspec.MIGMemorySlices)
		}
		g.addMIG(p, i, seed)
	}
	g.dev.SetMigMode(nvml.DEVICE_MIG_ENABLE)
	return nil
}

func (g *GPU) addMIG(p nvml.GpuInstanceProfileInfo, i int, seed string) {
	md := &migDevice{dev: &mockDevice{}, profile: p, uuid: deterministicUUID("MIG", seed, g.index, i, ProfileName(p))}
	parent := g.h
	name := g.model.Name + " MIG " + ProfileName(p)
	d := md.dev
	d.IsMigDeviceHandleFunc = func() (bool, nvml.Return) { return true, nvml.SUCCESS }
	d.GetDeviceHandleFromMigDeviceHandleFunc = func() (nvml.Device, nvml.Return) { return parent, nvml.SUCCESS }
	d.GetUUIDFunc = answer(g, "identity", func() string { return md.uuid })
	d.GetNameFunc = answer(g, "identity", func() string { return name })
	d.GetGpuInstanceIdFunc = func() (int, nvml.Return) { return i, nvml.SUCCESS }
	d.GetComputeInstanceIdFunc = func() (int, nvml.Return) { return 0, nvml.SUCCESS }
	d.GetAttributesFunc = answer(g, "identity", func() nvml.DeviceAttributes {
		return nvml.DeviceAttributes{MultiprocessorCount: p.MultiprocessorCount, GpuInstanceSliceCount: p.SliceCount,
			ComputeInstanceSliceCount: p.SliceCount, MemorySizeMB: p.MemorySizeMB}
	})
	d.GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) {
		unlock, r := g.lock("memory")
		defer unlock()
		total := p.MemorySizeMB << 20
		return nvml.Memory{Total: total, Free: total}, r
	}
	// Per-MIG utilisation, power and temperature are not available from NVML.
	d.GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) { return nvml.Utilization{}, nvml.ERROR_NOT_SUPPORTED }
	g.migs = append(g.migs, md)
}
