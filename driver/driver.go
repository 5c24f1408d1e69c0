// Package driver is the Nomad task driver "hetgpu" (binary nomad-driver-hetgpu): it runs a
// training command on the GPUs Nomad (and the hetgpu sidecar) chose, under a shim that lets
// the task outlive the driver, and measures the run: NVML energy, power and utilisation at
// 1 Hz, throughput from the task's metrics. At exit it reports one run record to the sidecar,
// which is how the predictor learns what each GPU type really delivers.
//
// Layout (after nomad-driver-podman): driver.go holds the gRPC services, handle.go the
// per-task monitor, state.go what survives a driver restart, config.go both config schemas.
package driver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/hetgpu/hetgpu/driver/report"
	"github.com/hetgpu/hetgpu/driver/shim"
	"github.com/hetgpu/hetgpu/driver/telemetry"
	"github.com/hetgpu/hetgpu/internal/version"
	"github.com/hetgpu/hetgpu/plugin"
	"github.com/hetgpu/hetgpu/plugin/proto/base"
	"github.com/hetgpu/hetgpu/plugin/proto/drivers"
)

// Name is the driver's PluginInfo name: jobs say driver = "hetgpu".
const Name = "hetgpu"

// fingerprintPeriod is how often the fingerprint is recomputed (and re-sent on change).
const fingerprintPeriod = 30 * time.Second

// Options are process-level settings, mostly for tests.
type Options struct {
	// NVML replaces the configured NVML backend (e.g. a go-nvml mock).
	NVML nvml.Interface
	// FakeNVML builds the backend for nvml = "fake" from fake_gpus and fake_seed; nil makes
	// that mode an error. The binary wires in the device plugin's fake backend. A backend
	// that also implements LoadSimulator has the task's GPUs marked busy while it runs.
	FakeNVML func(gpus []string, seed string, mig map[int][]string) (nvml.Interface, error)
	// ShimExe and ShimArgs start the shim: default this executable with [shim.Command].
	ShimExe  string
	ShimArgs []string
	// CgroupRoot is the cgroup v2 mount (default /sys/fs/cgroup); ProcRoot is /proc.
	CgroupRoot string
	ProcRoot   string
	// PluginPath is the path Nomad ran the plugin binary as (default os.Args[0], made
	// absolute, symlinks kept): its directory, the client's plugin_dir, keys the default
	// state_dir so that clients on one host do not share it. StateBase is the parent of the
	// clients' default state directories (default defaultStateDir()).
	PluginPath string
	StateBase  string
}

// Driver implements Nomad's Driver service; BaseServer returns its BasePlugin service.
type Driver struct {
	drivers.UnimplementedDriverServer
	logger hclog.Logger
	opts   Options
	events *eventBus
	ctx    context.Context
	cancel context.CancelFunc

	mu         sync.Mutex
	configured bool
	cfg        PluginConfig
	gpu        *gpuBackend
	reporter   *report.Reporter
	tasks      map[string]*taskHandle
}

// New creates a driver; Nomad configures it with SetConfig.
func New(logger hclog.Logger, opts Options) *Driver {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	if opts.ShimExe == "" {
		if exe, err := os.Executable(); err == nil {
			opts.ShimExe = exe
		}
	}
	if opts.CgroupRoot == "" {
		opts.CgroupRoot = shim.DefaultCgroupRoot
	}
	if opts.ProcRoot == "" {
		opts.ProcRoot = "/proc"
	}
	if opts.PluginPath == "" {
		// Not os.Executable: a plugin_dir may hold a symlink to a binary that several
		// clients share; the path Nomad ran is the client's own.
		opts.PluginPath = defaultPluginPath()
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Driver{logger: logger.Named(Name), opts: opts, events: newEventBus(), ctx: ctx, cancel: cancel,
		tasks: map[string]*taskHandle{}}
}

// defaultStateDir is this client's default state_dir.
func (d *Driver) defaultStateDir() string {
	base := d.opts.StateBase
	if base == "" {
		base = defaultStateDir()
	}
	return clientStateDir(base, d.opts.PluginPath)
}

// baseServer is the BasePlugin service of the driver.
type baseServer struct {
	base.UnimplementedBasePluginServer
	d *Driver
}

// BaseServer returns the BasePlugin half of the plugin.
func (d *Driver) BaseServer() base.BasePluginServer { return &baseServer{d: d} }

func (b *baseServer) PluginInfo(context.Context, *base.PluginInfoRequest) (*base.PluginInfoResponse, error) {
	return plugin.Info(base.PluginType_DRIVER, Name, version.Version), nil
}

func (b *baseServer) ConfigSchema(context.Context, *base.ConfigSchemaRequest) (*base.ConfigSchemaResponse, error) {
	return &base.ConfigSchemaResponse{Spec: pluginConfigSpec()}, nil
}

func (b *baseServer) SetConfig(_ context.Context, req *base.SetConfigRequest) (*base.SetConfigResponse, error) {
	cfg, err := decodePluginConfig(req.GetMsgpackConfig(), b.d.defaultStateDir())
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if err := b.d.configure(cfg); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	return &base.SetConfigResponse{}, nil
}

// configure applies a plugin config. Nomad sends it once per driver process.
func (d *Driver) configure(cfg PluginConfig) error {
	if err := ensurePrivateDir(cfg.StateDir); err != nil {
		return fmt.Errorf("state_dir: %w", err)
	}
	if base := d.opts.StateBase; cfg.StateDir == d.defaultStateDir() {
		if base == "" {
			base = defaultStateDir()
		}
		if err := ensurePrivateDir(cfg.SpoolDir); err != nil {
			return fmt.Errorf("spool_dir: %w", err)
		}
		adoptLegacySpool(filepath.Join(base, "spool"), cfg.SpoolDir, d.logger)
	}
	var rep *report.Reporter
	if cfg.SidecarAddr != "" || cfg.SidecarService != "" {
		rc, err := reportConfig(cfg, d.logger)
		if err != nil {
			return err
		}
		if rep, err = report.New(rc); err != nil {
			return err
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.configured {
		// NVML and the spool stay as first configured; only note the new config.
		d.logger.Debug("SetConfig again; keeping the first NVML backend and reporter")
		d.cfg = cfg
		return nil
	}
	d.cfg, d.configured = cfg, true
	d.gpu = openGPUBackend(cfg, d.opts, d.logger)
	d.reporter = rep
	if rep != nil {
		go rep.Run(d.ctx)
	}
	if d.gpu.slots != nil {
		go d.gpu.slots.supervise(d.ctx, mpsSuperviseInterval)
	}
	d.logger.Info("configured", "state_dir", cfg.StateDir, "sidecar", cfg.SidecarAddr, "sidecar_service", cfg.SidecarService, "nvml", d.gpu.describe())
	return nil
}

// adoptLegacySpool moves run records that a driver before per-client state directories
// spooled in the shared <base>/spool into this client's spool, so an upgrade loses none. A
// rename is atomic, so with several clients on the host each record lands in exactly one
// spool; any client can deliver it, since the record names its job and allocation.
func adoptLegacySpool(legacy, spool string, log hclog.Logger) {
	if filepath.Clean(legacy) == filepath.Clean(spool) {
		return
	}
	files, _ := filepath.Glob(filepath.Join(legacy, "*.json"))
	moved := 0
	for _, f := range files {
		if err := os.Rename(f, filepath.Join(spool, filepath.Base(f))); err == nil {
			moved++
		} else if !os.IsNotExist(err) {
			log.Warn("run record in the shared spool of an earlier version not moved; move it into spool_dir by hand", "file", f, "error", err)
		}
	}
	if moved > 0 {
		log.Info("moved run records from the shared spool of an earlier version", "records", moved, "from", legacy, "to", spool)
	}
}

// config returns the plugin config, applying the defaults if Nomad never sent one.
func (d *Driver) config() (PluginConfig, *gpuBackend, error) {
	d.mu.Lock()
	ok := d.configured
	d.mu.Unlock()
	if !ok {
		cfg, err := decodePluginConfig(nil, d.defaultStateDir())
		if err != nil {
			return cfg, nil, err
		}
		if err := d.configure(cfg); err != nil {
			return cfg, nil, err
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.cfg, d.gpu, nil
}

func (d *Driver) reporterOrNil() *report.Reporter {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.reporter
}

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

// Shutdown stops watching tasks (they keep running) so their telemetry is checkpointed.
func (d *Driver) Shutdown(context.Context, *drivers.ShutdownRequest) (*drivers.ShutdownResponse, error) {
	d.cancel()
	d.mu.Lock()
	tasks := make([]*taskHandle, 0, len(d.tasks))
	for _, h := range d.tasks {
		tasks = append(tasks, h)
	}
	d.mu.Unlock()
	for _, h := range tasks {
		<-h.monitorDone
	}
	return &drivers.ShutdownResponse{}, nil
}

func (d *Driver) TaskConfigSchema(context.Context, *drivers.TaskConfigSchemaRequest) (*drivers.TaskConfigSchemaResponse, error) {
	return &drivers.TaskConfigSchemaResponse{Spec: taskConfigSpec()}, nil
}

func (d *Driver) Capabilities(context.Context, *drivers.CapabilitiesRequest) (*drivers.CapabilitiesResponse, error) {
	return &drivers.CapabilitiesResponse{Capabilities: &drivers.DriverCapabilities{
		SendSignals:           true,
		Exec:                  false,
		FsIsolation:           drivers.DriverCapabilities_NONE,
		NetworkIsolationModes: []drivers.NetworkIsolationSpec_NetworkIsolationMode{drivers.NetworkIsolationSpec_HOST},
		MountConfigs:          drivers.DriverCapabilities_NO_MOUNTS,
	}}, nil
}

// fingerprint is the driver's node attributes and health.
func (d *Driver) fingerprint() *drivers.FingerprintResponse {
	cfg, g, err := d.config()
	if err != nil {
		return &drivers.FingerprintResponse{Health: drivers.FingerprintResponse_UNHEALTHY, HealthDescription: err.Error()}
	}
	_, cgErr := shim.CgroupV2Controllers(d.opts.CgroupRoot)
	b := plugin.NewAttributes().
		String("driver.hetgpu.version", plugin.SanitizeVersion(version.Version)).
		Bool("driver.hetgpu.nvml", g.lib != nil).
		Bool("driver.hetgpu.mps", g.mps).
		Bool("driver.hetgpu.cgroup_v2", cgErr == nil)
	if g.version != "" {
		b.String("driver.hetgpu.nvidia_driver", g.version)
	}
	if g.lib != nil {
		if n, ret := g.lib.DeviceGetCount(); ret == nvml.SUCCESS {
			b.Int("driver.hetgpu.gpus", int64(n), "")
		}
	}
	attrs, err := b.Build()
	if err != nil {
		return &drivers.FingerprintResponse{Health: drivers.FingerprintResponse_UNHEALTHY, HealthDescription: err.Error()}
	}
	resp := &drivers.FingerprintResponse{Attributes: attrs, Health: drivers.FingerprintResponse_HEALTHY, HealthDescription: "Healthy"}
	if g.lib == nil {
		if cfg.NVML == nvmlRequired || cfg.NVML == nvmlFake {
			resp.Health = drivers.FingerprintResponse_UNHEALTHY
			resp.HealthDescription = "NVML required but unavailable: " + g.reason
		} else {
			resp.HealthDescription = "Healthy; no GPU telemetry: " + g.reason
		}
	}
	return resp
}

func (d *Driver) Fingerprint(_ *drivers.FingerprintRequest, stream grpc.ServerStreamingServer[drivers.FingerprintResponse]) error {
	last := d.fingerprint()
	if err := stream.Send(last); err != nil {
		return err
	}
	t := time.NewTicker(fingerprintPeriod)
	defer t.Stop()
	for {
		select {
		case <-stream.Context().Done():
			return nil
		case <-d.ctx.Done():
			return nil
		case <-t.C:
			fp := d.fingerprint()
			if fingerprintEqual(fp, last) {
				continue
			}
			if err := stream.Send(fp); err != nil {
				return err
			}
			last = fp
		}
	}
}

func fingerprintEqual(a, b *drivers.FingerprintResponse) bool {
	if a.Health != b.Health || a.HealthDescription != b.HealthDescription || len(a.Attributes) != len(b.Attributes) {
		return false
	}
	for k, v := range a.Attributes {
		w, ok := b.Attributes[k]
		if !ok || v.String() != w.String() {
			return false
		}
	}
	return true
}

func (d *Driver) lookup(id string) (*taskHandle, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	h, ok := d.tasks[id]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "task %q not found", id)
	}
	return h, nil
}

// unrecoverable marks a StartTask failure Nomad should not retry (bad config).
func unrecoverable(err error) error { return plugin.RecoverableError(err, false) }

func (d *Driver) StartTask(ctx context.Context, req *drivers.StartTaskRequest) (*drivers.StartTaskResponse, error) {
	cfg := req.GetTask()
	if cfg == nil || cfg.GetId() == "" {
		return nil, status.Error(codes.InvalidArgument, "StartTask: task config or task ID missing")
	}
	d.mu.Lock()
	_, dup := d.tasks[cfg.GetId()]
	d.mu.Unlock()
	if dup {
		return nil, status.Errorf(codes.AlreadyExists, "task %q is already started", cfg.GetId())
	}
	pcfg, g, err := d.config()
	if err != nil {
		return nil, plugin.RecoverableError(err, true)
	}
	tc, err := decodeTaskConfig(cfg.GetMsgpackDriverConfig())
	if err != nil {
		return nil, unrecoverable(err)
	}
	logger := d.logger.With("task_id", cfg.GetId(), "task", cfg.GetName(), "alloc_id", cfg.GetAllocId())

	// Undo on failure, newest first.
	var undo []func()
	success := false
	defer func() {
		if !success {
			for i := len(undo) - 1; i >= 0; i-- {
				undo[i]()
			}
		}
	}()

	cred, err := resolveUser(cfg.GetUser())
	if err != nil {
		return nil, unrecoverable(err)
	}
	dir := taskShimDir(pcfg.StateDir, cfg.GetId())
	if err := os.RemoveAll(dir); err != nil {
		return nil, plugin.RecoverableError(fmt.Errorf("clean task state dir: %w", err), true)
	}
	if err := ensurePrivateDir(dir); err != nil {
		return nil, plugin.RecoverableError(err, true)
	}
	undo = append(undo, func() { _ = os.RemoveAll(dir) })

	taskDir, workDir := dir, "/"
	if ad := cfg.GetAllocDir(); ad != "" {
		taskDir, workDir = filepath.Join(ad, cfg.GetName()), ad
		if fi, err := os.Stat(taskDir); err == nil && fi.IsDir() {
			workDir = taskDir
		}
	}
	metricsFile := tc.metricsPath(taskDir)

	// The task's GPUs: Nomad merges the device plugin's env into env and also passes it as
	// device_env; the latter wins.
	env := map[string]string{}
	for k, v := range cfg.GetEnv() {
		env[k] = v
	}
	for k, v := range cfg.GetDeviceEnv() {
		env[k] = v
	}
	env[telemetry.MetricsFileEnv] = metricsFile
	var events []string
	var gpus []telemetry.GPU
	visible := env["NVIDIA_VISIBLE_DEVICES"]
	if visible == "" {
		visible = env["CUDA_VISIBLE_DEVICES"]
	}
	if g.lib != nil {
		gpus, err = telemetry.ResolveGPUs(g.lib, visible)
		if err != nil {
			logger.Warn("task GPUs not found in NVML; no GPU telemetry", "error", err)
			events = append(events, "no GPU telemetry: "+err.Error())
			gpus = nil
		}
	}
	g.setLoad(gpus, fakeTaskUtil)
	undo = append(undo, func() { g.setLoad(gpus, 0) })
	gpuIDs := visibleIDs(visible)
	if len(gpus) > 0 {
		gpuIDs = gpuIDs[:0]
		for _, gp := range gpus {
			gpuIDs = append(gpuIDs, gp.UUID)
		}
	}

	mpsGPU, mpsEvent, err := attachSlots(g, cfg, env)
	if err != nil {
		return nil, err
	}
	if mpsGPU != "" {
		undo = append(undo, func() { g.slots.Detach(mpsGPU, cfg.GetId()) })
		events = append(events, mpsEvent)
	}
	if s := tc.Sharing; s != nil && s.MPS && mpsGPU == "" {
		if !g.mps {
			return nil, unrecoverable(fmt.Errorf(`task config field "sharing.mps": true, but MPS is not available on this node (%s)`, g.mpsReason))
		}
		env["CUDA_MPS_PIPE_DIRECTORY"] = pcfg.MPSPipeDir
		env["CUDA_MPS_LOG_DIRECTORY"] = pcfg.MPSLogDir
		if s.ActiveThreadPct > 0 {
			env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = strconv.Itoa(s.ActiveThreadPct)
		}
		if g.mode != nvmlFake && g.mode != "injected" {
			if err := ensureMPSDaemon(pcfg.MPSPipeDir, pcfg.MPSLogDir); err != nil {
				return nil, plugin.RecoverableError(fmt.Errorf("sharing.mps: start the MPS control daemon: %w", err), true)
			}
		}
		events = append(events, fmt.Sprintf("CUDA MPS on (active threads %s)", pctLabel(s.ActiveThreadPct)))
	}

	if tc.PowerLimit > 0 {
		if len(gpus) == 0 {
			return nil, unrecoverable(fmt.Errorf(`task config field "power_limit": %g W requested, but the task has no GPUs NVML can control (%s)`, tc.PowerLimit, g.describe()))
		}
		saved, err := telemetry.ApplyPowerLimit(gpus, tc.PowerLimit)
		if err != nil {
			return nil, unrecoverable(err)
		}
		// Written right after applying; a crash in between leaves the cap until the next
		// driver restart sets another. The restore is keyed by the value we applied.
		if err := writeJSONFile(filepath.Join(dir, powerFile), saved); err != nil {
			_ = telemetry.RestorePowerLimits(gpus, saved)
			return nil, plugin.RecoverableError(fmt.Errorf("record power limits: %w", err), true)
		}
		undo = append(undo, func() { _ = telemetry.RestorePowerLimits(gpus, saved) })
		events = append(events, fmt.Sprintf("power limit %g W per GPU on %s (was %g W)", tc.PowerLimit, gpuLabel(gpuNames(gpus)), float64(saved[0].PreviousMW)/1000))
	}

	if err := prepareMetricsFile(metricsFile, cred); err != nil {
		return nil, unrecoverable(fmt.Errorf(`task config field "metrics.file": %w`, err))
	}

	cgDir, cgWarn := d.setupCgroup(cfg, logger)
	if cgDir != "" {
		undo = append(undo, func() { _ = shim.KillCgroup(cgDir); _ = shim.RemoveCgroup(cgDir) })
	}
	if cgWarn != "" {
		events = append(events, cgWarn)
	}

	spec := &shim.Spec{
		Command:      tc.Command,
		Args:         tc.Args,
		Env:          envList(env),
		Dir:          workDir,
		StdoutPath:   cfg.GetStdoutPath(),
		StderrPath:   cfg.GetStderrPath(),
		Credential:   cred,
		CgroupDir:    cgDir,
		MetricsFile:  metricsFile,
		MetricsRegex: tc.metricsRegex(),
	}
	sh, err := shim.Launch(ctx, shim.LaunchOptions{Exe: d.opts.ShimExe, Args: d.opts.ShimArgs, Dir: dir, StartTimeout: pcfg.StartTimeout}, spec)
	if err != nil {
		// A missing command or unreadable log path will not fix itself on retry.
		return nil, unrecoverable(fmt.Errorf("start task: %w%s", err, shimLogTail(dir, err)))
	}
	// The shim dir must survive from here on: the task runs.
	success = true

	st := &driverState{Shim: *sh, Config: *tc, GPUs: gpuIDs, MetricsFile: metricsFile, StartedAt: sh.StartedAt, MPSGPU: mpsGPU}
	blob, err := encodeDriverState(st)
	if err != nil {
		_ = sh.Kill()
		return nil, status.Errorf(codes.Internal, "encode driver state: %v", err)
	}
	h := d.newHandle(cfg, st, sh, gpus, logger)
	d.mu.Lock()
	d.tasks[cfg.GetId()] = h
	d.mu.Unlock()

	h.event(fmt.Sprintf("started %s on %s", filepath.Base(tc.Command), gpuLabel(gpuNames(gpus))),
		map[string]string{"pid": strconv.Itoa(sh.TaskPID), "gpus": strings.Join(gpuIDs, ",")})
	for _, e := range events {
		h.event(e, nil)
	}
	d.startMonitor(h, pcfg.SampleInterval)

	return &drivers.StartTaskResponse{
		Result: drivers.StartTaskResponse_SUCCESS,
		Handle: &drivers.TaskHandle{Version: taskHandleVersion, Config: cfg, State: drivers.TaskState_RUNNING, DriverState: blob},
	}, nil
}

func (d *Driver) newHandle(cfg *drivers.TaskConfig, st *driverState, sh *shim.Handle, gpus []telemetry.GPU, logger hclog.Logger) *taskHandle {
	d.mu.Lock()
	g := d.gpu
	d.mu.Unlock()
	sampler := telemetry.NewSampler(gpus)
	if st.MPSGPU != "" && g != nil && g.slots != nil {
		mgr, gpu, id := g.slots, st.MPSGPU, cfg.GetId()
		sampler.SetShare(func(uuid string) (float64, bool) {
			if uuid != gpu {
				return 1, false
			}
			return energyShare(mgr.Clients(gpu), id)
		})
	}
	return &taskHandle{
		d: d, gpu: g, logger: logger, cfg: cfg, st: st, shim: sh, ann: parseAnnotations(cfg.GetEnv()),
		gpus: gpus, sampler: sampler, tail: telemetry.NewTail(st.MetricsFile),
		progress: telemetry.NewProgress(st.StartedAt), state: drivers.TaskState_RUNNING,
		done: make(chan struct{}), monitorDone: make(chan struct{}),
	}
}

func (d *Driver) startMonitor(h *taskHandle, interval time.Duration) {
	for _, p := range h.ann.Problems {
		h.logger.Warn("hetgpu annotation ignored", "problem", p)
	}
	go h.monitor(d.ctx, interval)
}

// shimLogTail quotes the end of the shim's log for an error message (the directory is
// removed after a failed start).
func shimLogTail(dir string, err error) string {
	if !strings.Contains(err.Error(), shim.LogFile) {
		return "" // the error already says it all
	}
	b, err := os.ReadFile(filepath.Join(dir, shim.LogFile))
	if err != nil || len(b) == 0 {
		return ""
	}
	if len(b) > 400 {
		b = b[len(b)-400:]
	}
	return " (shim log: " + strings.TrimSpace(string(b)) + ")"
}

func gpuNames(gpus []telemetry.GPU) []string {
	out := make([]string, len(gpus))
	for i, g := range gpus {
		out[i] = g.Name
	}
	return out
}

func pctLabel(p int) string {
	if p <= 0 {
		return "uncapped"
	}
	return strconv.Itoa(p) + "%"
}

// visibleIDs splits NVIDIA_VISIBLE_DEVICES into IDs ("all", "none", "void" and "" give none
// we can name).
func visibleIDs(v string) []string {
	switch strings.TrimSpace(v) {
	case "", "all", "none", "void":
		return nil
	}
	var out []string
	for id := range strings.SplitSeq(v, ",") {
		if id = strings.TrimSpace(id); id != "" {
			out = append(out, id)
		}
	}
	return out
}

func envList(env map[string]string) []string {
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	slices.Sort(out)
	return out
}

// resolveUser maps the task's user to uid, gid and groups. Switching users needs root.
func resolveUser(name string) (*shim.Credential, error) {
	if name == "" {
		return nil, nil
	}
	if os.Geteuid() != 0 {
		if cur, err := user.Current(); err == nil && cur.Username == name {
			return nil, nil
		}
		return nil, fmt.Errorf("task field \"user\" = %q: the driver runs as uid %d, not root, and cannot run tasks as another user; remove user or run the Nomad client as root", name, os.Geteuid())
	}
	u, err := user.Lookup(name)
	if err != nil {
		return nil, fmt.Errorf("task field \"user\" = %q: %w", name, err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		return nil, fmt.Errorf("task field \"user\" = %q: non-numeric uid %q or gid %q", name, u.Uid, u.Gid)
	}
	c := &shim.Credential{Username: name, UID: uint32(uid), GID: uint32(gid)}
	if ids, err := u.GroupIds(); err == nil {
		for _, s := range ids {
			if g, err := strconv.ParseUint(s, 10, 32); err == nil {
				c.Groups = append(c.Groups, uint32(g))
			}
		}
	}
	return c, nil
}

// prepareMetricsFile creates the metrics file (and its directory) so the task, possibly
// running as another user, can append to it.
func prepareMetricsFile(path string, cred *shim.Credential) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	f.Close()
	if cred != nil {
		return os.Chown(path, int(cred.UID), int(cred.GID))
	}
	return nil
}

// ensureMPSDaemon starts nvidia-cuda-mps-control in daemon mode unless its control pipe
// exists.
func ensureMPSDaemon(pipeDir, logDir string) error {
	if _, err := os.Stat(filepath.Join(pipeDir, "control")); err == nil {
		return nil
	}
	for _, dir := range []string{pipeDir, logDir} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	cmd := exec.Command("nvidia-cuda-mps-control", "-d")
	cmd.Env = append(os.Environ(), "CUDA_MPS_PIPE_DIRECTORY="+pipeDir, "CUDA_MPS_LOG_DIRECTORY="+logDir)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%w: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// setupCgroup creates the task's cgroup v2 with Nomad's limits. Without cgroup v2 (or root)
// the task runs without limits and the returned warning says why.
func (d *Driver) setupCgroup(cfg *drivers.TaskConfig, logger hclog.Logger) (dir, warning string) {
	root := d.opts.CgroupRoot
	if _, err := shim.CgroupV2Controllers(root); err != nil {
		return "", "memory and CPU limits not enforced: " + err.Error()
	}
	if os.Geteuid() != 0 {
		return "", "memory and CPU limits not enforced: the driver is not root"
	}
	d.mu.Lock()
	parent := d.cfg.CgroupParent
	d.mu.Unlock()
	dir = filepath.Join(root, parent, sanitizeID(cfg.GetId())+".scope")
	lr := cfg.GetResources().GetLinuxResources()
	if p := lr.GetCpusetCgroup(); p != "" && filepath.IsAbs(p) {
		if rel, err := filepath.Rel(root, p); err == nil && rel != "." && !strings.HasPrefix(rel, "..") {
			dir = p // the cgroup Nomad reserved for this task (its cpuset partition)
		}
	}
	ar := cfg.GetResources().GetAllocatedResources()
	var l shim.CgroupLimits
	memMB, maxMB := ar.GetMemory().GetMemoryMb(), ar.GetMemory().GetMemoryMaxMb()
	switch {
	case maxMB > memMB && memMB > 0:
		l.MemoryMaxBytes, l.MemoryLowBytes = maxMB<<20, memMB<<20
	case memMB > 0:
		l.MemoryMaxBytes = memMB << 20
	case lr.GetMemoryLimitBytes() > 0:
		l.MemoryMaxBytes = lr.GetMemoryLimitBytes()
	}
	shares := ar.GetCpu().GetCpuShares()
	if shares == 0 {
		shares = lr.GetCpuShares()
	}
	l.CPUWeight = shim.CPUWeightFromShares(shares)
	l.CPUQuotaUS, l.CPUPeriodUS = lr.GetCpuQuota(), lr.GetCpuPeriod()
	l.Cpuset = lr.GetCpusetCpus()
	warns, err := shim.CreateCgroup(root, dir, l)
	if err != nil {
		logger.Warn("cgroup not created; running without limits", "error", err)
		return "", "memory and CPU limits not enforced: " + err.Error()
	}
	for _, w := range warns {
		logger.Warn("cgroup limit not applied", "detail", w)
	}
	if len(warns) > 0 {
		return dir, "some cgroup limits not applied: " + strings.Join(warns, "; ")
	}
	return dir, ""
}

func (d *Driver) RecoverTask(_ context.Context, req *drivers.RecoverTaskRequest) (*drivers.RecoverTaskResponse, error) {
	id := req.GetTaskId()
	if id == "" {
		id = req.GetHandle().GetConfig().GetId()
	}
	d.mu.Lock()
	_, known := d.tasks[id]
	d.mu.Unlock()
	if known {
		return &drivers.RecoverTaskResponse{}, nil
	}
	hd := req.GetHandle()
	if hd == nil || hd.GetConfig() == nil {
		return nil, status.Error(codes.InvalidArgument, "RecoverTask: no task handle")
	}
	st, err := decodeDriverState(hd.GetDriverState())
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "RecoverTask %s: %v", id, err)
	}
	pcfg, g, err := d.config()
	if err != nil {
		return nil, status.Error(codes.FailedPrecondition, err.Error())
	}
	sh := st.Shim
	// The task is recoverable while its shim runs, or when the shim already recorded the
	// exit (the task ended while the driver was down).
	if !sh.ShimAlive() {
		if s, err := sh.State(); err != nil || !s.Exited {
			return nil, status.Errorf(codes.NotFound, "RecoverTask %s: shim pid %d is gone and recorded no exit", id, sh.ShimPID)
		}
	}
	cfg := hd.GetConfig()
	logger := d.logger.With("task_id", id, "task", cfg.GetName(), "alloc_id", cfg.GetAllocId())
	var gpus []telemetry.GPU
	if g.lib != nil && len(st.GPUs) > 0 {
		if gpus, err = telemetry.ResolveGPUs(g.lib, strings.Join(st.GPUs, ",")); err != nil {
			logger.Warn("task GPUs not found in NVML after restart; no GPU telemetry", "error", err)
			gpus = nil
		}
	}
	if st.MPSGPU != "" && g.slots != nil {
		// Registers the client again and restarts the GPU's daemon if it went with the driver.
		if _, err := g.slots.Attach(st.MPSGPU, slotClient(cfg)); err != nil {
			logger.Warn("MPS daemon of the task's GPU not restored", "gpu", st.MPSGPU, "error", err)
		}
	}
	h := d.newHandle(cfg, st, &sh, gpus, logger)
	h.restoreCheckpoint()
	g.setLoad(gpus, fakeTaskUtil)
	d.mu.Lock()
	if _, raced := d.tasks[id]; raced {
		d.mu.Unlock()
		return &drivers.RecoverTaskResponse{}, nil
	}
	d.tasks[id] = h
	d.mu.Unlock()
	// Nomad registers the restored allocation for events only after RecoverTask returned:
	// the monitor sends this a little later.
	h.deferredEvent = "reattached to the task after a driver or client restart"
	h.logger.Info("recovered task", "pid", sh.TaskPID, "shim_pid", sh.ShimPID)
	d.startMonitor(h, pcfg.SampleInterval)
	return &drivers.RecoverTaskResponse{}, nil
}

func (d *Driver) WaitTask(ctx context.Context, req *drivers.WaitTaskRequest) (*drivers.WaitTaskResponse, error) {
	h, err := d.lookup(req.GetTaskId())
	if err != nil {
		return nil, err
	}
	select {
	case <-h.done:
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	case <-h.monitorDone:
		// The driver is shutting down before the task ended.
		select {
		case <-h.done:
		default:
			return nil, status.Error(codes.Unavailable, "driver shutting down; the task keeps running")
		}
	}
	res, werr := h.result()
	resp := &drivers.WaitTaskResponse{Result: res}
	if werr != nil {
		resp.Err = werr.Error()
	}
	return resp, nil
}

// parseSignal accepts "SIGTERM", "TERM" and numbers.
func parseSignal(s string) (syscall.Signal, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return syscall.SIGINT, nil // Nomad's default kill_signal outside docker
	}
	if n, err := strconv.Atoi(s); err == nil && n > 0 && n < 65 {
		return syscall.Signal(n), nil
	}
	name := strings.ToUpper(s)
	if !strings.HasPrefix(name, "SIG") {
		name = "SIG" + name
	}
	if sig := unix.SignalNum(name); sig != 0 {
		return sig, nil
	}
	return 0, fmt.Errorf("unknown signal %q", s)
}

func (d *Driver) StopTask(ctx context.Context, req *drivers.StopTaskRequest) (*drivers.StopTaskResponse, error) {
	h, err := d.lookup(req.GetTaskId())
	if err != nil {
		return nil, err
	}
	if h.exited() {
		return &drivers.StopTaskResponse{}, nil
	}
	sig, err := parseSignal(req.GetSignal())
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	h.stopRequested.Store(true)
	timeout := req.GetTimeout().AsDuration()
	if req.GetTimeout() == nil || timeout < 0 {
		timeout = 5 * time.Second
	}
	if err := h.shim.Signal(sig); err != nil {
		h.logger.Debug("stop signal not delivered", "signal", sig, "error", err)
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-h.done:
		return &drivers.StopTaskResponse{}, nil
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	case <-t.C:
	}
	h.event(fmt.Sprintf("task did not exit %v after %v; sending SIGKILL", timeout, sig), nil)
	if err := h.shim.Kill(); err != nil {
		h.logger.Warn("SIGKILL failed", "error", err)
	}
	select {
	case <-h.done:
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	case <-time.After(10 * time.Second):
		return nil, status.Errorf(codes.DeadlineExceeded, "task %s still running 10s after SIGKILL", req.GetTaskId())
	}
	return &drivers.StopTaskResponse{}, nil
}

func (d *Driver) DestroyTask(ctx context.Context, req *drivers.DestroyTaskRequest) (*drivers.DestroyTaskResponse, error) {
	h, err := d.lookup(req.GetTaskId())
	if err != nil {
		if status.Code(err) == codes.NotFound {
			return &drivers.DestroyTaskResponse{}, nil // nothing to clean up
		}
		return nil, err
	}
	if !h.exited() {
		if !req.GetForce() {
			return nil, status.Errorf(codes.FailedPrecondition, "task %s is still running; stop it first or destroy with force", req.GetTaskId())
		}
		h.stopRequested.Store(true)
		_ = h.shim.Kill()
		select {
		case <-h.done:
		case <-ctx.Done():
			return nil, status.FromContextError(ctx.Err()).Err()
		case <-time.After(10 * time.Second):
			return nil, status.Errorf(codes.DeadlineExceeded, "task %s still running 10s after SIGKILL", req.GetTaskId())
		}
	}
	<-h.monitorDone
	if cg := h.st.Shim.CgroupDir; cg != "" {
		for range 20 {
			if err := shim.RemoveCgroup(cg); err == nil || !errors.Is(err, syscall.EBUSY) {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	if err := os.RemoveAll(h.dir()); err != nil {
		h.logger.Warn("task state dir not removed", "dir", h.dir(), "error", err)
	}
	d.mu.Lock()
	delete(d.tasks, req.GetTaskId())
	d.mu.Unlock()
	return &drivers.DestroyTaskResponse{}, nil
}

func (d *Driver) InspectTask(_ context.Context, req *drivers.InspectTaskRequest) (*drivers.InspectTaskResponse, error) {
	h, err := d.lookup(req.GetTaskId())
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	ts := &drivers.TaskStatus{
		Id:        h.cfg.GetId(),
		Name:      h.cfg.GetName(),
		State:     h.state,
		StartedAt: timestamppb.New(h.st.StartedAt),
	}
	attrs := map[string]string{
		"pid":          strconv.Itoa(h.st.Shim.TaskPID),
		"shim_pid":     strconv.Itoa(h.st.Shim.ShimPID),
		"gpus":         strings.Join(h.st.GPUs, ","),
		"metrics_file": h.st.MetricsFile,
	}
	if tp, ok := h.progress.Throughput(); ok {
		attrs["throughput"] = strconv.FormatFloat(tp, 'f', 3, 64)
	}
	if h.state == drivers.TaskState_EXITED {
		ts.CompletedAt = timestamppb.New(h.completedAt)
		ts.Result = h.exit
		attrs["energy_j"] = strconv.FormatFloat(h.summary.EnergyJ, 'f', 1, 64)
	} else {
		sum := h.sampler.Summary()
		attrs["energy_j"] = strconv.FormatFloat(sum.EnergyJ, 'f', 1, 64)
	}
	return &drivers.InspectTaskResponse{Task: ts, Driver: &drivers.TaskDriverStatus{Attributes: attrs}}, nil
}

func (d *Driver) SignalTask(_ context.Context, req *drivers.SignalTaskRequest) (*drivers.SignalTaskResponse, error) {
	h, err := d.lookup(req.GetTaskId())
	if err != nil {
		return nil, err
	}
	sig, err := parseSignal(req.GetSignal())
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if h.exited() {
		return nil, status.Errorf(codes.FailedPrecondition, "task %s has exited", req.GetTaskId())
	}
	if err := h.shim.Signal(sig); err != nil {
		return nil, status.Errorf(codes.Internal, "signal %v: %v", sig, err)
	}
	return &drivers.SignalTaskResponse{}, nil
}

func (d *Driver) TaskStats(req *drivers.TaskStatsRequest, stream grpc.ServerStreamingServer[drivers.TaskStatsResponse]) error {
	h, err := d.lookup(req.GetTaskId())
	if err != nil {
		return err
	}
	interval := req.GetCollectionInterval().AsDuration()
	if interval <= 0 {
		interval = time.Second
	}
	ps := newProcStats(d.opts.ProcRoot)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if h.exited() {
			return nil
		}
		stats := ps.sample(h.cfg.GetId(), h.st.Shim.TaskPID, h.st.Shim.CgroupDir, time.Now())
		if err := stream.Send(&drivers.TaskStatsResponse{Stats: stats}); err != nil {
			return err
		}
		select {
		case <-stream.Context().Done():
			return nil
		case <-h.done:
			return nil
		case <-t.C:
		}
	}
}

func (d *Driver) TaskEvents(_ *drivers.TaskEventsRequest, stream grpc.ServerStreamingServer[drivers.DriverTaskEvent]) error {
	ch, cancel := d.events.subscribe()
	defer cancel()
	for {
		select {
		case <-stream.Context().Done():
			return nil
		case <-d.ctx.Done():
			return nil
		case ev := <-ch:
			if err := stream.Send(ev); err != nil {
				return err
			}
		}
	}
}

// Compile-time checks that both services are complete.
var (
	_ drivers.DriverServer  = (*Driver)(nil)
	_ base.BasePluginServer = (*baseServer)(nil)
)
