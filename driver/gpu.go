package driver

import (
	"fmt"
	"os/exec"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/hashicorp/go-hclog"

	"github.com/hetgpu/hetgpu/driver/telemetry"
)

// gpuBackend is the driver's NVML, if any.
type gpuBackend struct {
	lib       nvml.Interface
	mode      string
	reason    string // why lib is nil
	version   string // NVIDIA driver version
	mps       bool
	mpsReason string
	// slots runs the per-GPU MPS daemons of slot tasks (nil: MPS unavailable, see mpsReason).
	slots *mpsManager
}

func (g *gpuBackend) describe() string {
	if g.lib == nil {
		return "unavailable: " + g.reason
	}
	return g.mode
}

func openGPUBackend(cfg PluginConfig, opts Options, logger hclog.Logger) *gpuBackend {
	g := &gpuBackend{mode: cfg.NVML}
	switch {
	case opts.NVML != nil:
		g.lib, g.mode = opts.NVML, "injected"
	case cfg.NVML == nvmlOff:
		g.reason = `nvml = "off"`
	case cfg.NVML == nvmlFake:
		if opts.FakeNVML == nil {
			g.reason = "this build has no fake NVML backend"
			break
		}
		mig, _ := ParseFakeMIG(cfg.FakeMIG) // validated with the config
		lib, err := opts.FakeNVML(cfg.Fake, cfg.FakeSeed, mig)
		if err != nil {
			g.reason = fmt.Sprintf("fake_gpus: %v", err)
			break
		}
		if ret := safeRet(lib.Init); ret != nvml.SUCCESS {
			g.reason = "fake NVML did not initialise: " + nvml.ErrorString(ret)
			break
		}
		g.lib = lib
	default:
		lib := nvml.New()
		if ret := lib.Init(); ret != nvml.SUCCESS {
			g.reason = "NVML did not initialise: " + nvml.ErrorString(ret)
			break
		}
		g.lib = lib
	}
	if g.lib == nil {
		logger.Warn("no NVML: tasks run without GPU telemetry or power limits", "reason", g.reason)
		g.mpsReason = "no NVML"
		return g
	}
	if v, ret := safeSystemString(g.lib.SystemGetDriverVersion); ret == nvml.SUCCESS {
		g.version = v
	}
	mpsLog := logger.Named("mps")
	switch {
	case g.mode == nvmlFake || g.mode == "injected":
		// Fake GPUs: MPS is simulated (the environment is set, no daemon is started).
		g.mps = true
		g.slots = newMPSManager(mpsLog, cfg.MPSPipeDir, cfg.MPSLogDir, fakeMPS{})
	default:
		if exe, err := exec.LookPath("nvidia-cuda-mps-control"); err != nil {
			g.mpsReason = "nvidia-cuda-mps-control not in PATH"
		} else {
			g.mps = true
			g.slots = newMPSManager(mpsLog, cfg.MPSPipeDir, cfg.MPSLogDir, realMPS{exe: exe})
		}
	}
	return g
}

func safeRet(f func() nvml.Return) (ret nvml.Return) {
	defer func() {
		if recover() != nil {
			ret = nvml.ERROR_NOT_SUPPORTED
		}
	}()
	return f()
}

// LoadSimulator is implemented by fake NVML backends: the driver marks a task's GPUs busy
// (utilisation 0..1) while it runs, so the fake power model draws task power, and idle after.
type LoadSimulator interface {
	SetTaskLoad(uuid string, util float64)
}

// fakeTaskUtil is the utilisation a fake GPU shows while a task runs on it.
const fakeTaskUtil = 0.85

func (g *gpuBackend) setLoad(gpus []telemetry.GPU, util float64) {
	ls, ok := g.lib.(LoadSimulator)
	if !ok {
		return
	}
	for _, gp := range gpus {
		ls.SetTaskLoad(gp.UUID, util)
	}
}

func safeSystemString(f func() (string, nvml.Return)) (s string, ret nvml.Return) {
	defer func() {
		if recover() != nil {
			s, ret = "", nvml.ERROR_NOT_SUPPORTED
		}
	}()
	return f()
}
