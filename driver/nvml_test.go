package driver

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/hashicorp/go-hclog"

	"github.com/hetgpu/hetgpu/plugin"
	"github.com/hetgpu/hetgpu/plugin/plugintest"
	"github.com/hetgpu/hetgpu/plugin/proto/base"
	"github.com/hetgpu/hetgpu/plugin/proto/drivers"
)

// mockGPU is a go-nvml mock device drawing a constant power on the wall clock, with an energy
// counter and a settable power limit.
type mockGPU struct {
	mu      sync.Mutex
	t0      time.Time
	watts   float64
	limitMW uint32
}

func (g *mockGPU) device(uuid string) *mock.Device {
	return &mock.Device{
		GetUUIDFunc: func() (string, nvml.Return) { return uuid, nvml.SUCCESS },
		GetNameFunc: func() (string, nvml.Return) { return "NVIDIA A100-SXM4-40GB", nvml.SUCCESS },
		GetPowerUsageFunc: func() (uint32, nvml.Return) {
			return uint32(g.watts * 1000), nvml.SUCCESS
		},
		GetTotalEnergyConsumptionFunc: func() (uint64, nvml.Return) {
			return 1_000_000 + uint64(g.watts*1000*time.Since(g.t0).Seconds()), nvml.SUCCESS
		},
		GetUtilizationRatesFunc: func() (nvml.Utilization, nvml.Return) { return nvml.Utilization{Gpu: 90}, nvml.SUCCESS },
		GetPowerManagementLimitFunc: func() (uint32, nvml.Return) {
			g.mu.Lock()
			defer g.mu.Unlock()
			return g.limitMW, nvml.SUCCESS
		},
		GetPowerManagementLimitConstraintsFunc: func() (uint32, uint32, nvml.Return) { return 100_000, 400_000, nvml.SUCCESS },
		SetPowerManagementLimitFunc: func(mw uint32) nvml.Return {
			g.mu.Lock()
			defer g.mu.Unlock()
			g.limitMW = mw
			return nvml.SUCCESS
		},
	}
}

func (g *mockGPU) limit() uint32 { g.mu.Lock(); defer g.mu.Unlock(); return g.limitMW }

// inProcessDriver serves a Driver with an injected NVML over an in-memory gRPC connection;
// its shim is this test binary (see TestMain).
func inProcessDriver(t *testing.T, lib nvml.Interface, configHCL string) (drivers.DriverClient, string) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	d := New(hclog.NewNullLogger(), Options{NVML: lib, ShimExe: exe})
	t.Cleanup(func() { _, _ = d.Shutdown(context.Background(), &drivers.ShutdownRequest{}) })
	rawBase, rawDriver := plugintest.Dial(t, plugin.ServeConfig{Base: d.BaseServer(), Driver: d}, plugin.KeyDriver)
	stateDir := t.TempDir()
	cfg, err := plugin.EncodeHCLConfig(pluginConfigSpec(), []byte(fmt.Sprintf("state_dir = %q\nsample_interval = \"100ms\"\n%s", stateDir, configHCL)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rawBase.SetConfig(context.Background(), &base.SetConfigRequest{MsgpackConfig: cfg}); err != nil {
		t.Fatal(err)
	}
	return rawDriver.(drivers.DriverClient), stateDir
}

// Power limit, MPS environment, energy and the run record, on two mock A100s.
func TestGPUTaskPowerLimitEnergyAndRecord(t *testing.T) {
	_, toy := binaries(t)
	now := time.Now()
	a := &mockGPU{t0: now, watts: 180, limitMW: 400_000}
	b := &mockGPU{t0: now, watts: 220, limitMW: 350_000}
	devs := map[string]*mock.Device{"GPU-aaaa": a.device("GPU-aaaa"), "GPU-bbbb": b.device("GPU-bbbb")}
	lib := &mock.Interface{
		DeviceGetCountFunc: func() (int, nvml.Return) { return 2, nvml.SUCCESS },
		DeviceGetHandleByUUIDFunc: func(u string) (nvml.Device, nvml.Return) {
			if d, ok := devs[u]; ok {
				return d, nvml.SUCCESS
			}
			return nil, nvml.ERROR_NOT_FOUND
		},
		SystemGetDriverVersionFunc: func() (string, nvml.Return) { return "550.54.15", nvml.SUCCESS },
	}
	sc := newFakeSidecar(t)
	c, _ := inProcessDriver(t, lib, fmt.Sprintf("sidecar_addr = %q\n", sc.srv.URL))
	events := collectEvents(t, c)
	ctx := context.Background()

	fp, err := c.Fingerprint(ctx, &drivers.FingerprintRequest{})
	first := plugintest.First(t, fp, err)
	attrs := first.GetAttributes()
	if !attrs["driver.hetgpu.nvml"].GetBoolVal() || attrs["driver.hetgpu.gpus"].GetIntVal() != 2 ||
		attrs["driver.hetgpu.nvidia_driver"].GetStringVal() != "550.54.15" || first.GetHealthDescription() != "Healthy" {
		t.Fatalf("fingerprint = %v", first)
	}

	cfg := testTask(t, "gpu", encodeTask(t, fmt.Sprintf(`
command = "/bin/sh"
args    = ["-c", "echo mps=$CUDA_MPS_ACTIVE_THREAD_PERCENTAGE pipe=$CUDA_MPS_PIPE_DIRECTORY; exec %s -steps 12 -step-time 100ms -batch 64"]
sharing {
  mps               = true
  active_thread_pct = 40
}
power_limit = 250
`, toy)))
	cfg.DeviceEnv = map[string]string{"NVIDIA_VISIBLE_DEVICES": "GPU-aaaa,GPU-bbbb"}
	if _, err := c.StartTask(ctx, &drivers.StartTaskRequest{Task: cfg}); err != nil {
		t.Fatal(err)
	}
	if a.limit() != 250_000 || b.limit() != 250_000 {
		t.Fatalf("power limits during the task = %d, %d mW, want 250000", a.limit(), b.limit())
	}
	events.waitMessage(t, "power limit 250 W per GPU on 2x A100-SXM4-40GB (was 400 W)")
	events.waitMessage(t, "started sh on 2x A100-SXM4-40GB")
	measured := events.waitMessage(t, "samples/s on 2x A100-SXM4-40GB")
	if !strings.HasPrefix(measured.GetMessage(), "measured ") {
		t.Errorf("measured event = %q", measured.GetMessage())
	}

	res := waitTask(t, c, cfg.Id, 20*time.Second)
	if res.GetResult().GetExitCode() != 0 {
		t.Fatalf("result = %v", res)
	}
	if a.limit() != 400_000 || b.limit() != 350_000 {
		t.Fatalf("power limits after the task = %d, %d mW, want 400000, 350000 restored", a.limit(), b.limit())
	}
	out, _ := os.ReadFile(cfg.StdoutPath)
	if !strings.Contains(string(out), "mps=40 pipe=/tmp/nvidia-mps") {
		t.Errorf("MPS environment did not reach the task: %q", out)
	}

	obs := sc.waitFor(t, 1)[0]
	t.Logf("observation: %+v", obs)
	if obs.GPUs != 2 || obs.GPUType != "a100" || obs.GPUName != "NVIDIA A100-SXM4-40GB" || obs.Nodes != 1 {
		t.Errorf("observation GPUs = %+v", obs)
	}
	// Constant 400 W in total, read from the energy counters: the average is exact, and the
	// energy is 400 W over the sampled span, which is about the runtime.
	if math.Abs(obs.AvgPowerW-400) > 2 || obs.PeakPowerW != 400 {
		t.Errorf("power avg %.2f peak %.2f W, want 400", obs.AvgPowerW, obs.PeakPowerW)
	}
	if want := 400 * obs.RuntimeS; math.Abs(obs.EnergyJ-want)/want > 0.25 {
		t.Errorf("energy = %.0f J over %.2f s, want about %.0f J", obs.EnergyJ, obs.RuntimeS, want)
	}
	if obs.SamplesPerSec < 400 || obs.SamplesPerSec > 800 {
		t.Errorf("throughput = %.1f samples/s, want about 640", obs.SamplesPerSec)
	}
	// The catalog counts steps (per-GPU batches): samples/s over the annotated batch size.
	if want := obs.SamplesPerSec / float64(obs.BatchSize); obs.BatchSize == 0 || math.Abs(obs.Throughput-want) > 1e-9 {
		t.Errorf("throughput = %v steps/s with batch %d, want %v", obs.Throughput, obs.BatchSize, want)
	}
	fin := events.waitMessage(t, "finished after")
	if fin.GetAnnotations()["energy_source"] != "counter" || !strings.Contains(fin.GetMessage(), "kJ") {
		t.Errorf("finished event = %v", fin)
	}
	if _, err := c.DestroyTask(ctx, &drivers.DestroyTaskRequest{TaskId: cfg.Id}); err != nil {
		t.Fatal(err)
	}
}

// Power limits outside what the GPU accepts fail the task with the field named and leave the
// GPUs alone.
func TestGPUTaskPowerLimitOutOfRange(t *testing.T) {
	g := &mockGPU{t0: time.Now(), watts: 100, limitMW: 300_000}
	dev := g.device("GPU-cccc")
	lib := &mock.Interface{
		DeviceGetCountFunc: func() (int, nvml.Return) { return 1, nvml.SUCCESS },
		DeviceGetHandleByUUIDFunc: func(u string) (nvml.Device, nvml.Return) {
			return dev, nvml.SUCCESS
		},
	}
	c, stateDir := inProcessDriver(t, lib, "")
	cfg := testTask(t, "cap", encodeTask(t, `
command     = "/bin/true"
power_limit = 600
`))
	cfg.DeviceEnv = map[string]string{"NVIDIA_VISIBLE_DEVICES": "GPU-cccc"}
	_, err := c.StartTask(context.Background(), &drivers.StartTaskRequest{Task: cfg})
	if err == nil || !strings.Contains(err.Error(), "power_limit = 600 W is outside") {
		t.Fatalf("err = %v", err)
	}
	if g.limit() != 300_000 {
		t.Errorf("limit changed to %d", g.limit())
	}
	if _, err := os.Stat(filepath.Join(stateDir, "tasks")); err == nil {
		entries, _ := os.ReadDir(filepath.Join(stateDir, "tasks"))
		if len(entries) != 0 {
			t.Errorf("state left behind: %v", entries)
		}
	}
}
