package main

import (
	"maps"
	"slices"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/hetgpu/hetgpu/device/fake"
)

// fakeBackend is the device plugin's fake NVML for nvml = "fake": with the same fake_gpus
// and fake_seed as the device plugin's fake block, it has the same UUIDs, so the GPUs Nomad
// assigns are found and sampled. Running tasks mark their GPUs busy.
type fakeBackend struct {
	*fake.Fleet
	index map[string]int
}

func fakeNVML(gpus []string, seed string, mig map[int][]string) (nvml.Interface, error) {
	spec := fake.Spec{GPUs: gpus, Seed: seed}
	for _, gpu := range slices.Sorted(maps.Keys(mig)) {
		spec.MIG = append(spec.MIG, fake.MIG{GPU: gpu, Profiles: mig[gpu]})
	}
	f, err := fake.New(spec)
	if err != nil {
		return nil, err
	}
	b := &fakeBackend{Fleet: f, index: map[string]int{}}
	for i, u := range f.UUIDs() {
		b.index[u] = i
	}
	return b, nil
}

// SetTaskLoad implements driver.LoadSimulator.
func (b *fakeBackend) SetTaskLoad(uuid string, util float64) {
	if i, ok := b.index[uuid]; ok {
		b.SetLoad(i, util, util*0.6, 0)
	}
}

// SetProcessLoad implements driver.ProcessLoadSimulator.
func (b *fakeBackend) SetProcessLoad(uuid string, pid int, smUtil float64) {
	if i, ok := b.index[uuid]; ok && pid > 0 {
		b.Fleet.SetProcessLoad(i, uint32(pid), smUtil)
	}
}
