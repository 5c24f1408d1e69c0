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

	"github.com/hetgpu/hetgpu/internal/mpsshare"
	"github.com/hetgpu/hetgpu/plugin/proto/drivers"
)

// countingMPS is fakeMPS that counts starts and stops.
type countingMPS struct {
	fakeMPS
	mu            sync.Mutex
	starts, stops int
}

func (c *countingMPS) Start(uuid, pipe, log string) error {
	c.mu.Lock()
	c.starts++
	c.mu.Unlock()
	return c.fakeMPS.Start(uuid, pipe, log)
}

func (c *countingMPS) Stop(pipe, log string) error {
	c.mu.Lock()
	c.stops++
	c.mu.Unlock()
	return c.fakeMPS.Stop(pipe, log)
}

func (c *countingMPS) counts() (int, int) { c.mu.Lock(); defer c.mu.Unlock(); return c.starts, c.stops }

func TestMPSDaemonPerGPULifecycle(t *testing.T) {
	root := t.TempDir()
	l := &countingMPS{}
	m := newMPSManager(hclog.NewNullLogger(), filepath.Join(root, "pipe"), filepath.Join(root, "log"), l)
	envA, err := m.Attach("GPU-1", mpsshare.Client{TaskID: "a", ThreadPct: 50, ModelName: "ResNet-50"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Attach("GPU-1", mpsshare.Client{TaskID: "b", ThreadPct: 50, ModelName: "LM"}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Attach("GPU-2", mpsshare.Client{TaskID: "c", ThreadPct: 25}); err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(root, "pipe", "GPU-1"); envA["CUDA_MPS_PIPE_DIRECTORY"] != want || envA["CUDA_MPS_LOG_DIRECTORY"] != filepath.Join(root, "log", "GPU-1") {
		t.Errorf("env = %v, want the GPU's own pipe dir %s", envA, want)
	}
	if s, _ := l.counts(); s != 2 {
		t.Errorf("daemon starts = %d, want one per GPU (2)", s)
	}
	if co := m.CoRunners("GPU-1", "a"); len(co) != 1 || co[0].TaskID != "b" || co[0].ModelName != "LM" {
		t.Errorf("co-runners of a = %+v", co)
	}
	// A crashed daemon with clients left is restarted by the supervisor.
	if err := os.Remove(filepath.Join(root, "pipe", "GPU-1", mpsPidFile)); err != nil {
		t.Fatal(err)
	}
	m.check()
	if s, _ := l.counts(); s != 3 || m.Restarts("GPU-1") != 1 || !l.Alive(filepath.Join(root, "pipe", "GPU-1")) {
		t.Errorf("after a crash: starts %d, restarts %d", s, m.Restarts("GPU-1"))
	}
	m.Detach("GPU-1", "a")
	if _, stops := l.counts(); stops != 0 {
		t.Errorf("daemon stopped while client b remains")
	}
	m.Detach("GPU-1", "b")
	if _, stops := l.counts(); stops != 1 || l.Alive(filepath.Join(root, "pipe", "GPU-1")) {
		t.Errorf("daemon of GPU-1 still up after its last client (stops %d)", stops)
	}
	if len(m.Clients("GPU-1")) != 0 || len(m.Clients("GPU-2")) != 1 {
		t.Errorf("registries: GPU-1 %v, GPU-2 %v", m.Clients("GPU-1"), m.Clients("GPU-2"))
	}
}

func TestEnergyShare(t *testing.T) {
	tests := []struct {
		name    string
		clients []mpsshare.Client
		task    string
		want    float64
		shared  bool
	}{
		{"alone", []mpsshare.Client{{TaskID: "a", ThreadPct: 50}}, "a", 1, false},
		{"equal pair", []mpsshare.Client{{TaskID: "a", ThreadPct: 50}, {TaskID: "b", ThreadPct: 50}}, "a", 0.5, true},
		{"unequal", []mpsshare.Client{{TaskID: "a", ThreadPct: 25}, {TaskID: "b", ThreadPct: 75}}, "a", 0.25, true},
		{"uncapped counts as 100", []mpsshare.Client{{TaskID: "a", ThreadPct: 0}, {TaskID: "b", ThreadPct: 25}, {TaskID: "c", ThreadPct: 75}}, "a", 0.5, true},
		{"not listed", []mpsshare.Client{{TaskID: "b", ThreadPct: 50}, {TaskID: "c", ThreadPct: 50}}, "a", 1, false},
	}
	for _, tc := range tests {
		got, shared := energyShare(tc.clients, tc.task)
		if math.Abs(got-tc.want) > 1e-12 || shared != tc.shared {
			t.Errorf("%s: share %v %t, want %v %t", tc.name, got, shared, tc.want, tc.shared)
		}
	}
}

// Two tasks on slots of one mock GPU: each is an MPS client of the GPU's daemon with the
// slot's limits, sees the other as co-runner, and is charged its share of the GPU's energy
// while both run: by the per-process utilisation NVML reports for the tasks' PIDs, or by the
// thread caps (50/50) when the GPU answers no per-process query.
func TestSlotTasksShareOneGPU(t *testing.T) {
	tests := []struct {
		name string
		// smUtil is the per-process SM utilisation the GPU reports for each task's PID, by
		// model (nil: the GPU does not answer the query).
		smUtil map[string]uint32
		// wantW is each task's expected average power of the GPU's 200 W, by model.
		wantW map[string]float64
	}{
		{"no per-process samples: thread caps", nil, map[string]float64{"ResNet-50": 100, "LM": 100}},
		{"measured 75/25", map[string]uint32{"ResNet-50": 60, "LM": 20}, map[string]float64{"ResNet-50": 150, "LM": 50}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { testSlotTasksShareOneGPU(t, tc.smUtil, tc.wantW) })
	}
}

func testSlotTasksShareOneGPU(t *testing.T, smUtil map[string]uint32, wantW map[string]float64) {
	_, toy := binaries(t)
	g := &mockGPU{t0: time.Now(), watts: 200, limitMW: 300_000}
	dev := g.device("GPU-ssss")
	pipeRoot := filepath.Join(t.TempDir(), "mps")
	if smUtil != nil {
		// The clients' PIDs come from the driver's registry: the samples name the very
		// processes the driver started.
		dev.GetProcessUtilizationFunc = func(uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
			var out []nvml.ProcessUtilizationSample
			for _, c := range mpsshare.Clients(filepath.Join(pipeRoot, "GPU-ssss")) {
				if c.PID > 0 {
					out = append(out, nvml.ProcessUtilizationSample{Pid: uint32(c.PID), TimeStamp: uint64(time.Now().UnixMicro()), SmUtil: smUtil[c.ModelName]})
				}
			}
			return out, nvml.SUCCESS
		}
	}
	lib := &mock.Interface{
		DeviceGetCountFunc: func() (int, nvml.Return) { return 1, nvml.SUCCESS },
		DeviceGetHandleByUUIDFunc: func(u string) (nvml.Device, nvml.Return) {
			if u == "GPU-ssss" {
				return dev, nvml.SUCCESS
			}
			return nil, nvml.ERROR_NOT_FOUND
		},
		SystemGetDriverVersionFunc: func() (string, nvml.Return) { return "550.54.15", nvml.SUCCESS },
	}
	sc := newFakeSidecar(t)
	c, _ := inProcessDriver(t, lib, fmt.Sprintf("sidecar_addr = %q\nmps_pipe_dir = %q\n", sc.srv.URL, pipeRoot))
	events := collectEvents(t, c)
	ctx := context.Background()
	var cfgs []*drivers.TaskConfig
	for i, model := range []string{"resnet/ResNet-50", "lm/LM"} {
		cfg := testTask(t, fmt.Sprintf("slot%d", i), encodeTask(t, fmt.Sprintf(`
command = "/bin/sh"
args    = ["-c", "echo threads=$CUDA_MPS_ACTIVE_THREAD_PERCENTAGE mem=$CUDA_MPS_PINNED_DEVICE_MEM_LIMIT pipe=$CUDA_MPS_PIPE_DIRECTORY; exec %s -steps 15 -step-time 100ms -batch 32"]
`, toy)))
		cfg.Env["NOMAD_META_hetgpu_model"] = model
		cfg.DeviceEnv = map[string]string{"NVIDIA_VISIBLE_DEVICES": "GPU-ssss", "CUDA_VISIBLE_DEVICES": "GPU-ssss",
			"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "50", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=20480MB",
			"HETGPU_SLOT_IDS": fmt.Sprintf("GPU-ssss-slot%d", i), "HETGPU_MPS_GPUS": "GPU-ssss"}
		if _, err := c.StartTask(ctx, &drivers.StartTaskRequest{Task: cfg}); err != nil {
			t.Fatal(err)
		}
		cfgs = append(cfgs, cfg)
	}
	events.waitMessage(t, "MPS client of GPU GPU-ssss (slots GPU-ssss-slot1; active threads 50%, pinned memory 0=20480MB)")
	if n := len(mpsshare.Clients(filepath.Join(pipeRoot, "GPU-ssss"))); n != 2 {
		t.Errorf("%d MPS clients registered on the GPU, want 2", n)
	}
	for _, cfg := range cfgs {
		if res := waitTask(t, c, cfg.Id, 30*time.Second); res.GetResult().GetExitCode() != 0 {
			t.Fatalf("result = %v", res)
		}
		out, _ := os.ReadFile(cfg.StdoutPath)
		want := "threads=50 mem=0=20480MB pipe=" + filepath.Join(pipeRoot, "GPU-ssss")
		if !strings.Contains(string(out), want) {
			t.Errorf("task %s output %q, want %q", cfg.Id, out, want)
		}
	}
	obs := sc.waitFor(t, 2)
	names := map[string]string{}
	for _, o := range obs {
		names[o.ModelName] = o.CoRunner
		// 200 W for the GPU: both run the whole time but for start-up skew (the first task
		// alone is charged all of it).
		if want := wantW[o.ModelName]; math.Abs(o.AvgPowerW-want) > 25 {
			t.Errorf("%s: average power %.1f W, want about %.0f of the GPU's 200 W", o.ModelName, o.AvgPowerW, want)
		}
	}
	if names["ResNet-50"] != "LM" || names["LM"] != "ResNet-50" {
		t.Errorf("co-runners = %v, want each naming the other", names)
	}
	for _, cfg := range cfgs {
		if _, err := c.DestroyTask(ctx, &drivers.DestroyTaskRequest{TaskId: cfg.Id}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.Stat(filepath.Join(pipeRoot, "GPU-ssss", mpsPidFile)); !os.IsNotExist(err) {
		t.Errorf("the GPU's MPS daemon still runs after its last client: %v", err)
	}
}

func TestSlotTaskOnTwoGPUsFails(t *testing.T) {
	g := &gpuBackend{slots: newMPSManager(hclog.NewNullLogger(), t.TempDir(), t.TempDir(), fakeMPS{})}
	cfg := &drivers.TaskConfig{Id: "x", Env: map[string]string{}}
	_, _, err := attachSlots(g, cfg, map[string]string{"HETGPU_MPS_GPUS": "GPU-1,GPU-2", "HETGPU_SLOT_IDS": "GPU-1-slot0,GPU-2-slot0"})
	if err == nil || !strings.Contains(err.Error(), "slots of 2 GPUs") {
		t.Errorf("error = %v", err)
	}
	gpu, _, err := attachSlots(g, cfg, map[string]string{"NVIDIA_VISIBLE_DEVICES": "GPU-1"})
	if gpu != "" || err != nil {
		t.Errorf("a whole-GPU task: %q %v, want no MPS", gpu, err)
	}
	none := &gpuBackend{mpsReason: "nvidia-cuda-mps-control not in PATH"}
	if _, _, err := attachSlots(none, cfg, map[string]string{"HETGPU_MPS_GPUS": "GPU-1", "HETGPU_SLOT_IDS": "GPU-1-slot0"}); err == nil ||
		!strings.Contains(err.Error(), "MPS is not available on this node (nvidia-cuda-mps-control not in PATH)") {
		t.Errorf("error without MPS = %v", err)
	}
}

func TestParseFakeMIG(t *testing.T) {
	got, err := ParseFakeMIG([]string{"0=3g.20gb, 3g.20gb", "4=1g.5gb"})
	if err != nil || len(got) != 2 || strings.Join(got[0], "|") != "3g.20gb|3g.20gb" || got[4][0] != "1g.5gb" {
		t.Fatalf("ParseFakeMIG = %v, %v", got, err)
	}
	for _, bad := range []string{"3g.20gb", "x=3g.20gb", "0=", "-1=1g.5gb"} {
		if _, err := ParseFakeMIG([]string{bad}); err == nil || !strings.Contains(err.Error(), `config field "fake_mig[0]"`) {
			t.Errorf("%q: %v", bad, err)
		}
	}
	if _, err := ParseFakeMIG([]string{"0=1g.5gb", "0=2g.10gb"}); err == nil || !strings.Contains(err.Error(), "listed twice") {
		t.Errorf("duplicate GPU: %v", err)
	}
}
