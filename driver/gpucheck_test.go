package driver

// The real-GPU check of the task driver (make gpu-check builds these into dist/gpu-check/;
// docs/gpu-check.md): the telemetry sampler, the power-limit path and the MPS control daemon
// of a slot pair, on the node's NVML (HETGPU_GPU_CHECK=real) or on the fake fleet
// (HETGPU_GPU_CHECK=fake, make gpu-check-dry). Without HETGPU_GPU_CHECK they skip. Results go
// as JSON into HETGPU_GPU_CHECK_OUT.

import (
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/hashicorp/go-hclog"

	"github.com/hetgpu/hetgpu/device/fake"
	"github.com/hetgpu/hetgpu/driver/telemetry"
	"github.com/hetgpu/hetgpu/internal/gpucheck"
	"github.com/hetgpu/hetgpu/internal/mpsshare"
)

type driverCheck struct {
	lib   nvml.Interface
	fleet *fake.Fleet
	out   gpucheck.Dir
	opts  Options
}

func newDriverCheck(t *testing.T) *driverCheck {
	t.Helper()
	c := &driverCheck{}
	if gpucheck.Mode(t) == "real" {
		c.lib = nvml.New()
	} else {
		f, err := fake.New(fake.Spec{GPUs: []string{"2x H200-SXM-141GB"}, Seed: "gpu-check"})
		if err != nil {
			t.Fatal(err)
		}
		c.fleet = f
		// The fake refuses power limits (as documented for fake nodes); the dry run checks
		// the path against devices that take them the way NVML does.
		c.lib = &limitLib{Interface: f, limits: map[string]uint32{}}
		c.opts = Options{NVML: c.lib}
	}
	c.out = gpucheck.Open(t, c.lib)
	return c
}

// limitLib hands out devices whose power limit can be set within their constraints, as
// NVML's can (dry run only).
type limitLib struct {
	nvml.Interface
	mu     sync.Mutex
	limits map[string]uint32
}

type limitDevice struct {
	nvml.Device
	lib *limitLib
	key string
}

func (l *limitLib) DeviceGetHandleByIndex(i int) (nvml.Device, nvml.Return) {
	d, r := l.Interface.DeviceGetHandleByIndex(i)
	if r != nvml.SUCCESS {
		return d, r
	}
	u, _ := d.GetUUID()
	return &limitDevice{Device: d, lib: l, key: u}, r
}

func (d *limitDevice) GetPowerManagementLimit() (uint32, nvml.Return) {
	d.lib.mu.Lock()
	defer d.lib.mu.Unlock()
	if mw, ok := d.lib.limits[d.key]; ok {
		return mw, nvml.SUCCESS
	}
	return d.Device.GetPowerManagementLimit()
}

func (d *limitDevice) GetEnforcedPowerLimit() (uint32, nvml.Return) {
	return d.GetPowerManagementLimit()
}

func (d *limitDevice) SetPowerManagementLimit(mw uint32) nvml.Return {
	lo, hi, r := d.GetPowerManagementLimitConstraints()
	if r != nvml.SUCCESS {
		return r
	}
	if mw < lo || mw > hi {
		return nvml.ERROR_INVALID_ARGUMENT
	}
	d.lib.mu.Lock()
	defer d.lib.mu.Unlock()
	d.lib.limits[d.key] = mw
	return nvml.SUCCESS
}

// TestGPUCheckTelemetrySampler: the sampler the driver runs for every task reads every GPU's
// power, energy counter and utilisation for a few seconds: energy from the counters, an
// average power between idle and the GPUs' limits.
func TestGPUCheckTelemetrySampler(t *testing.T) {
	c := newDriverCheck(t)
	gpus, err := telemetry.ResolveGPUs(c.lib, "all")
	if err != nil || len(gpus) == 0 {
		t.Fatalf("ResolveGPUs(all) = %d GPUs, %v", len(gpus), err)
	}
	if c.fleet != nil {
		c.fleet.SetLoad(0, 0.8, 0.5, 4096)
		defer c.fleet.SetLoad(0, 0, 0, 0)
	}
	s := telemetry.NewSampler(gpus)
	for range 13 {
		s.Sample(time.Now())
		time.Sleep(250 * time.Millisecond)
	}
	sum := s.Summary()
	limitW := 0.0
	for i := range len(gpus) {
		d, r := c.lib.DeviceGetHandleByIndex(i)
		if r != nvml.SUCCESS {
			continue
		}
		if mw, r := d.GetEnforcedPowerLimit(); r == nvml.SUCCESS {
			limitW += float64(mw) / 1000
		}
	}
	c.out.Write(t, "driver-telemetry.json", map[string]any{"summary": sum, "power_limit_total_w": limitW})
	t.Logf("sampler: %+v (power limits %g W in all)", sum, limitW)
	if sum.Samples != 13 || sum.EnergyJ <= 0 || sum.AvgPowerW <= 0 || sum.PeakPowerW <= 0 {
		t.Errorf("summary %+v: want 13 samples with energy, average and peak power", sum)
	}
	if sum.EnergySource != "counter" {
		t.Errorf("energy from %q, want the GPUs' energy counters (Volta and newer have them)", sum.EnergySource)
	}
	if limitW > 0 && sum.AvgPowerW > 1.25*limitW {
		t.Errorf("average power %g W above 1.25 x the GPUs' limits %g W: a unit error", sum.AvgPowerW, limitW)
	}
}

// TestGPUCheckPowerLimit: the driver's power_limit path caps a GPU at a lower limit, which
// NVML then reports, and restores the previous one.
func TestGPUCheckPowerLimit(t *testing.T) {
	c := newDriverCheck(t)
	gpus, err := telemetry.ResolveGPUs(c.lib, "0")
	if err != nil || len(gpus) != 1 {
		t.Fatalf("ResolveGPUs(0) = %v, %v", gpus, err)
	}
	d, _ := c.lib.DeviceGetHandleByIndex(0)
	lo, hi, r := d.GetPowerManagementLimitConstraints()
	cur, r2 := d.GetPowerManagementLimit()
	if r != nvml.SUCCESS || r2 != nvml.SUCCESS {
		t.Skipf("GPU 0 does not report its power-limit range (%s) or limit (%s)", r.Error(), r2.Error())
	}
	// 10 % below the current limit, in whole watts, within the settable range.
	target := max(lo, cur/1000*900)
	if target >= cur {
		target = lo
	}
	res := map[string]any{"uuid": gpus[0].UUID, "min_mw": lo, "max_mw": hi, "before_mw": cur, "target_mw": target}
	defer func() { c.out.Write(t, "driver-power-limit.json", res) }()
	saved, err := telemetry.ApplyPowerLimit(gpus, float64(target)/1000)
	if err != nil {
		res["error"] = err.Error()
		if strings.Contains(err.Error(), "Insufficient Permissions") || strings.Contains(err.Error(), "Not Supported") {
			t.Skipf("setting power limits is not allowed here: %v", err)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = telemetry.RestorePowerLimits(gpus, saved) })
	got, _ := d.GetPowerManagementLimit()
	enforced, _ := d.GetEnforcedPowerLimit()
	res["applied_mw"], res["enforced_mw"] = got, enforced
	if got != target || enforced != target {
		t.Errorf("after capping at %d mW NVML reports limit %d mW, enforced %d mW", target, got, enforced)
	}
	if err := telemetry.RestorePowerLimits(gpus, saved); err != nil {
		t.Fatal(err)
	}
	back, _ := d.GetPowerManagementLimit()
	res["restored_mw"] = back
	if back != cur {
		t.Errorf("restored limit %d mW, want the previous %d mW", back, cur)
	}
}

// TestGPUCheckMPSSlotPair: two slot tasks on one GPU share one MPS control daemon, started
// with the first and stopped with the last (nvidia-cuda-mps-control on real GPUs; the
// simulated daemon on the fake).
func TestGPUCheckMPSSlotPair(t *testing.T) {
	c := newDriverCheck(t)
	dir := t.TempDir()
	cfg := defaultPluginConfig()
	cfg.MPSPipeDir, cfg.MPSLogDir = filepath.Join(dir, "mps"), filepath.Join(dir, "mps-log")
	g := openGPUBackend(cfg, c.opts, hclog.NewNullLogger())
	if !g.mps {
		t.Skipf("no MPS on this machine: %s", g.mpsReason)
	}
	gpus, err := telemetry.ResolveGPUs(g.lib, "0")
	if err != nil || len(gpus) != 1 {
		t.Fatalf("ResolveGPUs(0) = %v, %v", gpus, err)
	}
	uuid := gpus[0].UUID
	pipe, _ := g.slots.dirs(uuid)
	res := map[string]any{"uuid": uuid, "pipe_dir": pipe}
	defer func() { c.out.Write(t, "driver-mps.json", res) }()
	a, b := mpsshare.Client{TaskID: "slot-0", ThreadPct: 50}, mpsshare.Client{TaskID: "slot-1", ThreadPct: 50}
	envA, err := g.slots.Attach(uuid, a)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.slots.Detach(uuid, a.TaskID); g.slots.Detach(uuid, b.TaskID) })
	envB, err := g.slots.Attach(uuid, b)
	if err != nil {
		t.Fatal(err)
	}
	res["env"] = envA
	if fmt.Sprint(envA) != fmt.Sprint(envB) || envA[envPipeDir] != pipe {
		t.Errorf("the slot pair got different daemons: %v and %v", envA, envB)
	}
	if !g.slots.launch.Alive(pipe) || len(g.slots.Clients(uuid)) != 2 {
		t.Fatalf("after two attaches: daemon alive %v, clients %+v", g.slots.launch.Alive(pipe), g.slots.Clients(uuid))
	}
	g.slots.Detach(uuid, a.TaskID)
	res["alive_with_one"] = g.slots.launch.Alive(pipe)
	if !g.slots.launch.Alive(pipe) {
		t.Error("the daemon quit while a slot still uses it")
	}
	g.slots.Detach(uuid, b.TaskID)
	stopped := false
	for range 50 {
		if stopped = !g.slots.launch.Alive(pipe); stopped {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	res["stopped_after_last"] = stopped
	if !stopped {
		t.Error("the daemon still runs after the last slot left")
	}
}
