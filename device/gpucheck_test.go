package device

// The real-GPU check of the device plugin (make gpu-check builds these into dist/gpu-check/;
// docs/gpu-check.md). They run only when HETGPU_GPU_CHECK says against what: "real", the
// node's NVML (libnvidia-ml), or "fake", the fake fleet on go-nvml's mock (make gpu-check-dry,
// which make test runs so the kit cannot rot). Each test writes what it measured as JSON into
// HETGPU_GPU_CHECK_OUT (default: the test's temporary directory).

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/hashicorp/go-hclog"

	"github.com/hetgpu/hetgpu/device/arch"
	"github.com/hetgpu/hetgpu/device/fake"
	"github.com/hetgpu/hetgpu/device/gpuload"
	"github.com/hetgpu/hetgpu/internal/gpucheck"
	"github.com/hetgpu/hetgpu/plugin"
	"github.com/hetgpu/hetgpu/plugin/proto/device"
	"github.com/hetgpu/hetgpu/plugin/proto/structs"
)

// EnvGPUCheckLoad is how long each GPU is loaded (a Go duration; default 20s real, 3s fake).
const EnvGPUCheckLoad = "HETGPU_GPU_CHECK_LOAD"

// gpuCheckSpec is the fake node of the dry run: two H200s (this project's lent machine type),
// an A100 and an A100 in MIG mode.
func gpuCheckSpec() fake.Spec {
	return fake.Spec{GPUs: []string{"2x H200-SXM-141GB", "2x A100-SXM4-40GB"}, Seed: "gpu-check",
		MIG: []fake.MIG{{GPU: 3, Profiles: []string{"3g.20gb", "2g.10gb", "1g.5gb"}}}}
}

type gpuCheck struct {
	lib   nvml.Interface
	fleet *fake.Fleet // nil on real GPUs
	out   gpucheck.Dir
}

// newGPUCheck opens the NVML the check runs against, or skips the test.
func newGPUCheck(t *testing.T) *gpuCheck {
	t.Helper()
	c := &gpuCheck{}
	if gpucheck.Mode(t) == "real" {
		c.lib = nvml.New()
	} else {
		f, err := fake.New(gpuCheckSpec())
		if err != nil {
			t.Fatal(err)
		}
		c.fleet, c.lib = f, f
	}
	c.out = gpucheck.Open(t, c.lib)
	return c
}

// newGPUCheckInventory is newGPUCheck and the plugin's inventory of its GPUs (nothing ignored).
func newGPUCheckInventory(t *testing.T) (*gpuCheck, *inventory) {
	t.Helper()
	c := newGPUCheck(t)
	inv, err := enumerate(c.lib, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return c, inv
}

// checkAttr is one attribute as the plugin fingerprints it and as NVML reports it.
type checkAttr struct {
	Plugin string `json:"plugin"`
	NVML   string `json:"nvml"`
	OK     bool   `json:"ok"`
}

func attrText(a *structs.Attribute) string {
	if a == nil {
		return "(none)"
	}
	var v string
	switch x := a.Value.(type) {
	case *structs.Attribute_IntVal:
		v = fmt.Sprint(x.IntVal)
	case *structs.Attribute_FloatVal:
		v = fmt.Sprint(x.FloatVal)
	case *structs.Attribute_StringVal:
		v = fmt.Sprintf("%q", x.StringVal)
	case *structs.Attribute_BoolVal:
		v = fmt.Sprint(x.BoolVal)
	}
	if a.Unit != "" {
		v += " " + a.Unit
	}
	return v
}

// nvmlAttributes derives every fingerprint attribute of a device straight from NVML queries,
// independently of attributes.go: what the plugin must report, value and unit. phys is the
// device's physical GPU (itself unless it is a MIG device).
func nvmlAttributes(lib nvml.Interface, h, phys nvml.Device, isMIG bool) map[string]*structs.Attribute {
	b := map[string]*structs.Attribute{}
	i := func(k string, v int64, unit string) { b[k] = plugin.IntAttribute(v, unit) }
	if isMIG {
		if a, r := h.GetAttributes(); r == nvml.SUCCESS {
			i(AttrMemory, int64(a.MemorySizeMB), "MiB")
			i(AttrSMCount, int64(a.MultiprocessorCount), "")
			b[AttrMIGProfile] = plugin.StringAttribute(fmt.Sprintf("%dg.%dgb", a.GpuInstanceSliceCount, (a.MemorySizeMB+1023)/1024))
		}
		if n, r := phys.GetName(); r == nvml.SUCCESS {
			b[AttrMIGParentName] = plugin.StringAttribute(n)
		}
	} else {
		if m, r := h.GetMemoryInfo(); r == nvml.SUCCESS {
			i(AttrMemory, int64(m.Total/(1<<20)), "MiB")
		}
		if m, r := h.GetBAR1MemoryInfo(); r == nvml.SUCCESS && m.Bar1Total > 0 {
			i(AttrBAR1, int64(m.Bar1Total/(1<<20)), "MiB")
		}
	}
	major, minor, r := phys.GetCudaComputeCapability()
	if r == nvml.SUCCESS {
		b[AttrComputeCapability] = plugin.StringAttribute(fmt.Sprintf("%d.%d", major, minor))
	}
	if a, r := phys.GetArchitecture(); r == nvml.SUCCESS {
		b[AttrArchitecture] = plugin.StringAttribute(archName(a))
	}
	if cores, r := phys.GetNumGpuCores(); r == nvml.SUCCESS && cores > 0 {
		if !isMIG {
			i(AttrCUDACores, int64(cores), "")
			if major > 0 {
				i(AttrSMCount, int64(cores/arch.CoresPerSM(major, minor)), "")
			}
		}
	}
	clocks := map[string]nvml.ClockType{AttrCoresClock: nvml.CLOCK_GRAPHICS, AttrMaxSMClock: nvml.CLOCK_SM, AttrMemoryClock: nvml.CLOCK_MEM}
	for k, ct := range clocks {
		if mhz, r := phys.GetMaxClockInfo(ct); r == nvml.SUCCESS && mhz > 0 {
			i(k, int64(mhz), "MHz")
		}
	}
	if bits, r := phys.GetMemoryBusWidth(); r == nvml.SUCCESS && bits > 0 {
		i(AttrMemoryBusWidth, int64(bits), "")
		if mhz, r := phys.GetMaxClockInfo(nvml.CLOCK_MEM); r == nvml.SUCCESS && mhz > 0 {
			// GB/s = 2 (double data rate) x MHz x bits / 8 / 1000, rounded.
			i(AttrMemoryBandwidth, int64(math.Round(2*float64(mhz)*float64(bits)/8/1000)), "GB/s")
		}
	}
	gen, rg := phys.GetMaxPcieLinkGeneration()
	width, rw := phys.GetMaxPcieLinkWidth()
	if rg == nvml.SUCCESS && gen > 0 {
		i(AttrPCIeGeneration, int64(gen), "")
	}
	if rw == nvml.SUCCESS && width > 0 {
		i(AttrPCIeWidth, int64(width), "")
	}
	// Usable MB/s per lane and direction after line coding: 8b/10b for gen 1-2, 128b/130b after.
	perLane := map[int]int64{1: 250, 2: 500, 3: 985, 4: 1969, 5: 3938, 6: 7563}
	if rg == nvml.SUCCESS && rw == nvml.SUCCESS && perLane[gen] > 0 {
		i(AttrPCIBandwidth, perLane[gen]*int64(width), "MB/s")
	}
	links := 0
	for l := range nvml.NVLINK_MAX_LINKS {
		st, r := phys.GetNvLinkState(l)
		if r != nvml.SUCCESS {
			break
		}
		if st == nvml.FEATURE_ENABLED {
			links++
		}
	}
	i(AttrNVLinkLinks, int64(links), "")
	if mw, r := phys.GetEnforcedPowerLimit(); r == nvml.SUCCESS && mw > 0 {
		i(AttrPowerLimit, int64(mw/1000), "W")
		i(AttrPower, int64(mw/1000), "W")
	}
	if mw, r := phys.GetPowerManagementDefaultLimit(); r == nvml.SUCCESS && mw > 0 {
		i(AttrPowerLimitDefault, int64(mw/1000), "W")
	}
	if lo, hi, r := phys.GetPowerManagementLimitConstraints(); r == nvml.SUCCESS && hi > 0 {
		i(AttrPowerLimitMin, int64(lo/1000), "W")
		i(AttrPowerLimitMax, int64(hi/1000), "W")
	}
	if v, r := lib.SystemGetDriverVersion(); r == nvml.SUCCESS {
		b[AttrDriverVersion] = plugin.StringAttribute(v)
	}
	if v, r := lib.SystemGetCudaDriverVersion(); r == nvml.SUCCESS {
		b[AttrCUDADriverVersion] = plugin.StringAttribute(fmt.Sprintf("%d.%d", v/1000, v%1000/10))
	}
	if cur, _, r := phys.GetEccMode(); r == nvml.SUCCESS {
		b[AttrECC] = plugin.BoolAttribute(cur == nvml.FEATURE_ENABLED)
	}
	b[AttrMIG] = plugin.BoolAttribute(isMIG)
	return b
}

// TestGPUCheckFingerprint: through the plugin's gRPC Fingerprint, every attribute of every
// device group, value and unit, is what NVML itself reports for each of its devices, and
// every attribute NVML can give is there; groups pass Nomad's validation.
func TestGPUCheckFingerprint(t *testing.T) {
	c := newGPUCheck(t)
	s := serve(t, `fingerprint_period = "1m"`, WithOpen(func(Config) (nvml.Interface, error) { return c.lib, nil }))
	resp := s.fingerprints(t).next()
	if len(resp.DeviceGroup) == 0 {
		t.Fatal("the plugin fingerprinted no GPU")
	}
	type devResult struct {
		Group, ID, PCIBusID string
		Healthy             bool
		Attributes          map[string]checkAttr
	}
	var results []devResult
	for _, g := range resp.DeviceGroup {
		if err := plugin.ValidateGroup(g); err != nil {
			t.Errorf("group %s fails Nomad's validation: %v", g.DeviceName, err)
		}
		for _, d := range g.Devices {
			h, r := c.lib.DeviceGetHandleByUUID(d.ID)
			if r != nvml.SUCCESS {
				t.Errorf("%s: NVML has no device %s: %s", g.DeviceName, d.ID, r.Error())
				continue
			}
			isMIG, _ := h.IsMigDeviceHandle()
			phys := h
			if isMIG {
				if p, r := h.GetDeviceHandleFromMigDeviceHandle(); r == nvml.SUCCESS {
					phys = p
				}
			}
			if name, r := phys.GetName(); r == nvml.SUCCESS && !strings.HasPrefix(g.DeviceName, name) {
				t.Errorf("device %s in group %q; NVML names it %q", d.ID, g.DeviceName, name)
			}
			want := nvmlAttributes(c.lib, h, phys, isMIG)
			res := devResult{Group: g.DeviceName, ID: d.ID, PCIBusID: d.GetHwLocality().GetPciBusId(), Healthy: d.Healthy, Attributes: map[string]checkAttr{}}
			keys := map[string]bool{}
			for k := range g.Attributes {
				keys[k] = true
			}
			for k := range want {
				keys[k] = true
			}
			for k := range keys {
				got, exp := attrText(g.Attributes[k]), attrText(want[k])
				res.Attributes[k] = checkAttr{Plugin: got, NVML: exp, OK: got == exp}
				if got != exp {
					t.Errorf("%s %s: attribute %s = %s, NVML says %s", g.DeviceName, d.ID, k, got, exp)
				}
			}
			if !d.Healthy {
				t.Errorf("%s %s unhealthy: %s", g.DeviceName, d.ID, d.HealthDescription)
			}
			results = append(results, res)
		}
	}
	c.out.Write(t, "device-fingerprint.json", results)
	t.Logf("%d devices in %d groups compared attribute by attribute with NVML", len(results), len(resp.DeviceGroup))
}

// statFloat reads a float stat.
func statFloat(s *device.DeviceStats, name string) (float64, bool) {
	v := s.GetStats().GetAttributes()[name]
	if v == nil || v.GetFloatNumeratorVal() == nil {
		return 0, false
	}
	return v.GetFloatNumeratorVal().GetValue(), true
}

// TestGPUCheckPowerAndEnergyUnderLoad: every whole GPU's power_draw and energy stats read, and
// under a load (gpuload on real GPUs, the fleet's load on the fake) the energy counter moves by
// what the power draw says and the power rises above idle.
func TestGPUCheckPowerAndEnergyUnderLoad(t *testing.T) {
	c, inv := newGPUCheckInventory(t)
	d := 20 * time.Second
	if c.fleet != nil {
		d = 3 * time.Second
	}
	if v := os.Getenv(EnvGPUCheckLoad); v != "" {
		var err error
		if d, err = time.ParseDuration(v); err != nil {
			t.Fatalf("%s = %q: expected a duration such as 20s", EnvGPUCheckLoad, v)
		}
	}
	var gpus []*instance
	for _, g := range inv.physical {
		if !g.migMode && g.fault == "" {
			gpus = append(gpus, g)
		}
	}
	if len(gpus) == 0 {
		t.Skip("no whole GPU outside MIG mode to load")
	}
	type reading struct {
		T       time.Time `json:"t"`
		PowerW  float64   `json:"power_w"`
		EnergyJ float64   `json:"energy_j"`
	}
	read := func() map[string]reading {
		out := map[string]reading{}
		now := time.Now()
		for _, g := range gpus {
			st := deviceStats(g, nil)
			p, pok := statFloat(st, StatPowerDraw)
			e, eok := statFloat(st, StatEnergy)
			if !pok || !eok {
				t.Errorf("GPU %s: power_draw %v (%v), energy %v (%v): want both readable", g.uuid, p, pok, e, eok)
			}
			out[g.uuid] = reading{T: now, PowerW: p, EnergyJ: e}
		}
		return out
	}
	idle := read()
	loadNote := "none"
	var wg sync.WaitGroup
	var loadErr error
	var mu sync.Mutex
	if c.fleet != nil {
		for i := range c.fleet.Len() {
			c.fleet.SetLoad(i, 0.95, 0.9, 1024)
		}
		loadNote = "fake fleet at 95 % SM"
	} else {
		loadNote = "gpuload: cuMemsetD32 over 1 GiB per GPU"
		for _, g := range gpus {
			wg.Add(1)
			go func(bus string) {
				defer wg.Done()
				if _, err := gpuload.Run(bus, d, 1<<30); err != nil {
					mu.Lock()
					loadErr = err
					mu.Unlock()
				}
			}(g.pciBusID)
		}
	}
	var during []map[string]reading
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		time.Sleep(min(time.Second, time.Until(deadline)))
		during = append(during, read())
	}
	wg.Wait()
	if c.fleet != nil {
		for i := range c.fleet.Len() {
			c.fleet.SetLoad(i, 0, 0, 0)
		}
	}
	if loadErr != nil {
		loadNote = "no load: " + loadErr.Error()
		if !errors.Is(loadErr, gpuload.ErrNoDriver) {
			t.Errorf("GPU load failed: %v", loadErr)
		}
	}
	end := read()
	type result struct {
		UUID        string    `json:"uuid"`
		IdleW       float64   `json:"idle_w"`
		PeakLoadW   float64   `json:"peak_load_w"`
		MeanLoadW   float64   `json:"mean_load_w"`
		EnergyJ     float64   `json:"energy_j"`
		CounterAvgW float64   `json:"counter_avg_w"`
		Readings    []reading `json:"readings"`
	}
	var results []result
	for _, g := range gpus {
		r := result{UUID: g.uuid, IdleW: idle[g.uuid].PowerW}
		sum := 0.0
		for _, m := range during {
			x := m[g.uuid]
			r.Readings = append(r.Readings, x)
			r.PeakLoadW = max(r.PeakLoadW, x.PowerW)
			sum += x.PowerW
		}
		if len(during) > 0 {
			r.MeanLoadW = sum / float64(len(during))
		}
		r.EnergyJ = end[g.uuid].EnergyJ - idle[g.uuid].EnergyJ
		dt := end[g.uuid].T.Sub(idle[g.uuid].T).Seconds()
		r.CounterAvgW = r.EnergyJ / dt
		results = append(results, r)
		if r.EnergyJ <= 0 {
			t.Errorf("GPU %s: the energy counter did not move in %.1f s (%.3f J to %.3f J)", g.uuid, dt, idle[g.uuid].EnergyJ, end[g.uuid].EnergyJ)
			continue
		}
		// The counter's average power and the sampled power agree in magnitude: a unit error
		// (mJ for J, mW for W) is a factor of 1000.
		if r.MeanLoadW > 0 && (r.CounterAvgW < r.MeanLoadW/3 || r.CounterAvgW > 3*r.MeanLoadW) {
			t.Errorf("GPU %s: energy counter says %.1f W on average, the power draw %.1f W", g.uuid, r.CounterAvgW, r.MeanLoadW)
		}
		if loadErr == nil && r.PeakLoadW < 1.1*r.IdleW {
			t.Errorf("GPU %s: power %.1f W under load (peak), %.1f W idle: want at least 10 %% more under load", g.uuid, r.PeakLoadW, r.IdleW)
		}
	}
	c.out.Write(t, "device-power-energy.json", map[string]any{"load": loadNote, "load_seconds": d.Seconds(), "gpus": results})
	for _, r := range results {
		t.Logf("GPU %s (load: %s): idle %.1f W, under load %.1f W mean / %.1f W peak, energy counter +%.1f J (%.1f W average)",
			r.UUID, loadNote, r.IdleW, r.MeanLoadW, r.PeakLoadW, r.EnergyJ, r.CounterAvgW)
	}
}

// TestGPUCheckXIDRegistration: the plugin's XID watcher registers for critical XID events on
// every GPU that supports them (NVML answers its waits); on the fake an injected XID 79
// reaches it.
func TestGPUCheckXIDRegistration(t *testing.T) {
	c, inv := newGPUCheckInventory(t)
	type support struct {
		UUID      string `json:"uuid"`
		Supported string `json:"supported_event_types"`
		XID       bool   `json:"xid_critical_error"`
	}
	var sup []support
	var whole []*instance
	for _, g := range inv.physical {
		whole = append(whole, g)
		s := support{UUID: g.uuid}
		if types, r := g.handle.GetSupportedEventTypes(); r == nvml.SUCCESS {
			s.Supported, s.XID = fmt.Sprintf("0x%x", types), types&nvml.EventTypeXidCriticalError != 0
		} else {
			s.Supported = r.Error()
		}
		sup = append(sup, s)
	}
	var logs bytes.Buffer
	var mu sync.Mutex
	logger := hclog.New(&hclog.LoggerOptions{Level: hclog.Debug, Output: &lockedWriter{w: &logs, mu: &mu}})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	got := make(chan xidEvent, 16)
	done := make(chan struct{})
	go func() {
		defer close(done)
		watchXIDs(ctx, c.lib, whole, logger, func(e xidEvent) { got <- e })
	}()
	injected := ""
	if c.fleet != nil {
		// The watcher registers asynchronously: inject until it reports.
		injected = c.fleet.UUIDs()[0]
		tick := time.NewTicker(100 * time.Millisecond)
	wait:
		for {
			select {
			case e := <-got:
				if e.uuid != injected || e.xid != 79 {
					t.Errorf("XID event %+v, want 79 on %s", e, injected)
				}
				break wait
			case <-tick.C:
				c.fleet.InjectXID(0, 79)
			case <-ctx.Done():
				t.Error("an injected XID 79 never reached the watcher")
				break wait
			}
		}
		tick.Stop()
	}
	<-done
	mu.Lock()
	out := logs.String()
	mu.Unlock()
	for _, bad := range []string{"cannot register XID events", "XID health events unavailable", "waiting for XID events failed"} {
		if strings.Contains(out, bad) {
			t.Errorf("XID watcher: %s\n%s", bad, out)
		}
	}
	n := 0
	for _, s := range sup {
		if s.XID {
			n++
		}
	}
	c.out.Write(t, "device-xid.json", map[string]any{"gpus": sup, "watcher_log": out, "injected_on": injected})
	if n == 0 {
		t.Skipf("no GPU supports XID critical-error events (%+v): health comes from failing queries only", sup)
	}
}

type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// TestGPUCheckMIGListing: for every GPU in MIG mode the plugin lists exactly the MIG devices
// NVML enumerates (by UUID), and not the parent; GPUs not in MIG mode are recorded.
func TestGPUCheckMIGListing(t *testing.T) {
	c, inv := newGPUCheckInventory(t)
	type gpu struct {
		UUID       string   `json:"uuid"`
		MIGMode    string   `json:"mig_mode"`
		NVMLMIG    []string `json:"nvml_mig_devices"`
		PluginMIG  []string `json:"plugin_mig_devices"`
		ParentUsed bool     `json:"parent_offered"`
	}
	var gpus []gpu
	inMIG := 0
	for _, p := range inv.physical {
		g := gpu{UUID: p.uuid}
		cur, _, r := p.handle.GetMigMode()
		switch {
		case r != nvml.SUCCESS:
			g.MIGMode = r.Error()
		case cur == nvml.DEVICE_MIG_ENABLE:
			g.MIGMode = "enabled"
		default:
			g.MIGMode = "disabled"
		}
		if g.MIGMode == "enabled" {
			inMIG++
			maxN, r := p.handle.GetMaxMigDeviceCount()
			if r != nvml.SUCCESS {
				t.Errorf("GPU %s in MIG mode: max MIG device count: %s", p.uuid, r.Error())
			}
			for i := range maxN {
				m, r := p.handle.GetMigDeviceHandleByIndex(i)
				if r != nvml.SUCCESS {
					continue // an unused slot
				}
				if u, r := m.GetUUID(); r == nvml.SUCCESS {
					g.NVMLMIG = append(g.NVMLMIG, u)
				}
			}
		}
		for _, d := range inv.devices {
			if d.parent == p {
				g.PluginMIG = append(g.PluginMIG, d.uuid)
			}
			if d == p && g.MIGMode == "enabled" {
				g.ParentUsed = true
			}
		}
		sort.Strings(g.NVMLMIG)
		sort.Strings(g.PluginMIG)
		if strings.Join(g.NVMLMIG, ",") != strings.Join(g.PluginMIG, ",") || g.ParentUsed {
			t.Errorf("GPU %s (MIG %s): plugin lists %v (parent offered %v), NVML %v", p.uuid, g.MIGMode, g.PluginMIG, g.ParentUsed, g.NVMLMIG)
		}
		gpus = append(gpus, g)
	}
	c.out.Write(t, "device-mig.json", gpus)
	if inMIG == 0 {
		t.Skipf("no GPU is in MIG mode (%+v): enable it on a MIG-capable GPU (nvidia-smi -i 0 -mig 1, then create instances) to check MIG listing", gpus)
	}
}
