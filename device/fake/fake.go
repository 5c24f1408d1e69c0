// Package fake is an NVML that poses as any mix of NVIDIA GPUs with no GPU present, built on
// go-nvml's mock package (github.com/NVIDIA/go-nvml/pkg/nvml/mock and its server/gpus
// configurations behind dgxa100/dgxh100/dgxh200). The device plugin uses it when its config has
// a `fake` block; tests, demos and the task driver can use it directly:
//
//	fleet, err := fake.New(fake.Spec{GPUs: []string{"4x T4", "2x A100-SXM4-40GB"}})
//	var lib nvml.Interface = fleet
//	fleet.SetLoad(0, 0.8, 0.5, 8192) // GPU 0 at 80 % SM and 50 % memory utilisation, 8 GiB used
//	fleet.InjectXID(1, 79)           // "GPU has fallen off the bus"
//
// Power follows the sidecar's model (gpuspec.Spec.Power): idle + (TDP - idle) x util^alpha, with
// alpha = Spec.PowerAlpha (default 0.7); the energy counter integrates it over time.
package fake

import (
	"crypto/sha256"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"

	"github.com/hetgpu/hetgpu/model/gpuspec"
)

// DefaultPowerAlpha is the exponent of the power curve when Spec.PowerAlpha is 0.
const DefaultPowerAlpha = gpuspec.PowerAlpha

// Spec describes a fake node.
type Spec struct {
	// GPUs are entries "<count>x <model>" (see Models), or "dgxa100"/"dgxh100"/"dgxh200".
	GPUs []string
	// MIG partitions GPUs (by index across the whole node) into MIG devices.
	MIG []MIG
	// Faults are injected after a delay from the first NVML Init.
	Faults []Fault
	// Seed makes UUIDs deterministic per node; different nodes need different seeds.
	Seed string
	// InitFailures makes the first N Init calls fail with ERROR_DRIVER_NOT_LOADED.
	InitFailures int
	// PowerAlpha is the power curve exponent; 0 means DefaultPowerAlpha.
	PowerAlpha float64
	// DriverVersion and CUDADriverVersion (e.g. 12040 for 12.4); defaults "550.54.15", 12040.
	DriverVersion     string
	CUDADriverVersion int
	// Now is the clock for energy integration and faults; nil means time.Now.
	Now func() time.Time
}

// MIG enables MIG mode on one GPU and creates MIG devices of the named profiles ("3g.20gb").
type MIG struct {
	GPU      int
	Profiles []string
}

// Fault is one injected failure on one GPU: an XID event, or NVML queries failing with an error.
type Fault struct {
	GPU   int
	After time.Duration
	XID   uint64 // 0 = none
	// Error is an NVML return name ("GPU_IS_LOST", "UNKNOWN", ...; the ERROR_ prefix is optional).
	Error string
	// Query limits Error to one query family (see Queries); "" or "all" means every query.
	Query string
}

// Queries are the query families Fault.Query and SetError accept.
func Queries() []string {
	return []string{"all", "handle", "identity", "memory", "power", "energy", "temperature", "utilization", "clocks", "ecc", "pcie", "topology"}
}

// Fleet is the fake NVML. It implements nvml.Interface (through go-nvml's mock server) and adds
// methods to drive load and inject faults. It is safe for concurrent use.
type Fleet struct {
	*server.Server

	mu           sync.Mutex
	now          func() time.Time
	alpha        float64
	gpus         []*GPU
	initFailures int
	initErr      nvml.Return
	started      bool
	faults       []Fault
	timers       []*time.Timer
}

// New builds a fake node from spec.
func New(spec Spec) (*Fleet, error) {
	if len(spec.GPUs) == 0 {
		return nil, fmt.Errorf("fake: gpus is empty; expected entries such as \"4x T4\" (models: %s)", strings.Join(Models(), ", "))
	}
	f := &Fleet{now: spec.Now, alpha: spec.PowerAlpha, initFailures: spec.InitFailures, faults: spec.Faults}
	if f.now == nil {
		f.now = time.Now
	}
	if f.alpha == 0 {
		f.alpha = DefaultPowerAlpha
	}
	if f.alpha < 0 || f.alpha > 4 {
		return nil, fmt.Errorf("fake: power_alpha %v, expected a value in (0, 4]", spec.PowerAlpha)
	}
	if spec.InitFailures < 0 {
		return nil, fmt.Errorf("fake: init_failures %d, expected >= 0", spec.InitFailures)
	}
	drv, cuda := spec.DriverVersion, spec.CUDADriverVersion
	if drv == "" {
		drv = "550.54.15"
	}
	if cuda == 0 {
		cuda = 12040
	}
	seed := spec.Seed
	if seed == "" {
		seed = "hetgpu-fake"
	}
	table := gpuspec.Default()
	var entries []Entry
	total := 0
	for i, s := range spec.GPUs {
		e, err := ParseEntry(s)
		if err != nil {
			return nil, fmt.Errorf("fake: gpus[%d]: %w", i, err)
		}
		entries = append(entries, e)
		total += e.Count
	}
	if total > 64 {
		return nil, fmt.Errorf("fake: gpus adds up to %d GPUs, expected at most 64", total)
	}
	var cfgs []gpus.Config
	for _, e := range entries {
		for range e.Count {
			cfgs = append(cfgs, mockConfig(e.Model))
		}
	}
	f.Server = server.NewServerWithGPUs(drv, "12."+drv, cuda, cfgs...)
	idx := 0
	for box, e := range entries {
		ds, ok := specFor(table, e.Model)
		if !ok {
			return nil, fmt.Errorf("fake: no datasheet row %q for %s in gpu-specs.csv", e.Model.SpecModel, e.Model.Key)
		}
		for k := range e.Count {
			dev := f.Server.Devices[idx].(*server.Device)
			g := newGPU(f, dev, e.Model, ds, idx, box, k, e.Count, seed)
			f.gpus = append(f.gpus, g)
			idx++
		}
	}
	for _, g := range f.gpus {
		g.linkPeers()
	}
	for i, m := range spec.MIG {
		if m.GPU < 0 || m.GPU >= len(f.gpus) {
			return nil, fmt.Errorf("fake: mig[%d]: gpu %d, expected 0 to %d", i, m.GPU, len(f.gpus)-1)
		}
		if err := f.gpus[m.GPU].enableMIG(m.Profiles, seed); err != nil {
			return nil, fmt.Errorf("fake: mig[%d]: %w", i, err)
		}
	}
	for i, ft := range spec.Faults {
		if err := f.checkFault(ft); err != nil {
			return nil, fmt.Errorf("fake: fault[%d]: %w", i, err)
		}
	}
	f.setInterfaceFuncs()
	return f, nil
}

func mockConfig(m Model) gpus.Config {
	if m.mock != nil {
		return *m.mock
	}
	return gpus.Config{Name: m.Name, Architecture: m.Arch, Brand: nvml.BRAND_TESLA, CudaMajor: m.CCMajor, CudaMinor: m.CCMinor,
		PciDeviceId: m.PciDeviceID}
}

func specFor(t *gpuspec.Table, m Model) (gpuspec.Spec, bool) {
	for _, s := range t.Specs() {
		if s.Model == m.SpecModel {
			return s, true
		}
	}
	return gpuspec.Spec{}, false
}

// deterministicUUID derives a stable UUID so a restarted plugin reports the same IDs.
func deterministicUUID(prefix, seed string, parts ...any) string {
	h := sha256.Sum256([]byte(fmt.Sprint(append([]any{seed}, parts...)...)))
	return fmt.Sprintf("%s-%x-%x-%x-%x-%x", prefix, h[0:4], h[4:6], h[6:8], h[8:10], h[10:16])
}

func (f *Fleet) checkFault(ft Fault) error {
	if ft.GPU < 0 || ft.GPU >= len(f.gpus) {
		return fmt.Errorf("gpu %d, expected 0 to %d", ft.GPU, len(f.gpus)-1)
	}
	if ft.After < 0 {
		return fmt.Errorf("after %s, expected >= 0", ft.After)
	}
	if ft.XID == 0 && ft.Error == "" {
		return fmt.Errorf("neither xid nor error is set")
	}
	if ft.Error != "" {
		if _, err := ParseReturn(ft.Error); err != nil {
			return err
		}
	}
	if ft.Query != "" && !validQuery(ft.Query) {
		return fmt.Errorf("query %q, expected one of %s", ft.Query, strings.Join(Queries(), ", "))
	}
	return nil
}

func validQuery(q string) bool {
	for _, k := range Queries() {
		if q == k {
			return true
		}
	}
	return false
}

// ParseReturn maps an NVML return name ("GPU_IS_LOST" or "ERROR_GPU_IS_LOST") to its value.
func ParseReturn(name string) (nvml.Return, error) {
	want := strings.ToUpper(strings.TrimSpace(name))
	if !strings.HasPrefix(want, "ERROR_") {
		want = "ERROR_" + want
	}
	for r := nvml.Return(1); r < 30; r++ {
		if r.Error() == want {
			return r, nil
		}
	}
	if want == nvml.ERROR_UNKNOWN.Error() {
		return nvml.ERROR_UNKNOWN, nil
	}
	return 0, fmt.Errorf("error %q is not an NVML error name; expected e.g. GPU_IS_LOST, UNKNOWN, TIMEOUT, NO_PERMISSION", name)
}

func (f *Fleet) setInterfaceFuncs() {
	f.InitFunc = func() nvml.Return {
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.initErr != nvml.SUCCESS {
			return f.initErr
		}
		if f.initFailures > 0 {
			f.initFailures--
			return nvml.ERROR_DRIVER_NOT_LOADED
		}
		if !f.started {
			f.started = true
			f.armFaults()
		}
		return nvml.SUCCESS
	}
	f.DeviceGetHandleByIndexFunc = func(i int) (nvml.Device, nvml.Return) {
		f.mu.Lock()
		defer f.mu.Unlock()
		if i < 0 || i >= len(f.gpus) {
			return nil, nvml.ERROR_INVALID_ARGUMENT
		}
		if r := f.gpus[i].errFor("handle"); r != nvml.SUCCESS {
			return nil, r
		}
		return f.gpus[i].h, nvml.SUCCESS
	}
	f.DeviceGetHandleByUUIDFunc = func(uuid string) (nvml.Device, nvml.Return) {
		for _, g := range f.gpus {
			if g.dev.UUID == uuid {
				return g.h, nvml.SUCCESS
			}
			// NVML finds MIG devices by their UUID too (driver R470 and later).
			for _, m := range g.migs {
				if m.uuid == uuid {
					return m.dev, nvml.SUCCESS
				}
			}
		}
		return nil, nvml.ERROR_NOT_FOUND
	}
	f.EventSetCreateFunc = func() (nvml.EventSet, nvml.Return) {
		return newEventSet(), nvml.SUCCESS
	}
	f.ErrorStringFunc = func(r nvml.Return) string { return r.Error() }
}

// armFaults starts the configured fault timers; called with f.mu held.
func (f *Fleet) armFaults() {
	for _, ft := range f.faults {
		ft := ft
		f.timers = append(f.timers, time.AfterFunc(ft.After, func() {
			if ft.XID != 0 {
				f.InjectXID(ft.GPU, ft.XID)
			}
			if ft.Error != "" {
				r, _ := ParseReturn(ft.Error)
				f.SetError(ft.GPU, ft.Query, r)
			}
		}))
	}
}

// Close stops pending fault timers.
func (f *Fleet) Close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, t := range f.timers {
		t.Stop()
	}
}

// Len is the number of physical GPUs.
func (f *Fleet) Len() int { return len(f.gpus) }

// GPU returns the i-th physical GPU.
func (f *Fleet) GPU(i int) *GPU { return f.gpus[i] }

// UUIDs lists the physical GPUs' UUIDs in index order.
func (f *Fleet) UUIDs() []string {
	out := make([]string, len(f.gpus))
	for i, g := range f.gpus {
		out[i] = g.dev.UUID
	}
	return out
}

// SetInitError makes every later Init fail with r (SUCCESS clears it).
func (f *Fleet) SetInitError(r nvml.Return) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.initErr = r
}

// SetLoad sets GPU i's SM and memory utilisation (0..1) and used memory (MiB). Power, energy,
// temperature, clocks and throttle reasons follow.
func (f *Fleet) SetLoad(i int, gpuUtil, memUtil float64, memUsedMiB uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	g := f.gpus[i]
	g.integrate(f.now())
	g.util, g.memUtil = clamp01(gpuUtil), clamp01(memUtil)
	g.memUsedMiB = min(memUsedMiB, g.memTotalMiB)
}

// SetProcessLoad sets the SM utilisation (0..1) that process pid shows on GPU i in
// GetProcessUtilization, as one MPS client among others; 0 removes the process.
func (f *Fleet) SetProcessLoad(i int, pid uint32, smUtil float64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	g := f.gpus[i]
	if smUtil <= 0 {
		delete(g.procUtil, pid)
		return
	}
	g.procUtil[pid] = clamp01(smUtil)
}

// InjectXID delivers an XID critical-error event for GPU i to every registered event set.
func (f *Fleet) InjectXID(i int, xid uint64) {
	f.mu.Lock()
	g := f.gpus[i]
	sets := append([]*eventSet(nil), g.eventSets...)
	f.mu.Unlock()
	for _, s := range sets {
		s.push(nvml.EventData{Device: g.h, EventType: nvml.EventTypeXidCriticalError, EventData: xid,
			GpuInstanceId: 0xFFFFFFFF, ComputeInstanceId: 0xFFFFFFFF})
	}
}

// SetError makes GPU i's queries of one family (see Queries; "" = all) fail with r; SUCCESS clears.
func (f *Fleet) SetError(i int, query string, r nvml.Return) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if query == "" {
		query = "all"
	}
	g := f.gpus[i]
	if r == nvml.SUCCESS {
		delete(g.errs, query)
		return
	}
	g.errs[query] = r
}

// PowerW is GPU i's current modelled draw in watts.
func (f *Fleet) PowerW(i int) float64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.gpus[i].powerW()
}

func clamp01(v float64) float64 { return max(0, min(1, v)) }

// mockDevice is the go-nvml mock type our MIG devices use.
type mockDevice = mock.Device
