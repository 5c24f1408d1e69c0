// Package driver is the Nomad task driver "hetgpu" (binary nomad-driver-hetgpu): it runs a
// training command on the GPUs Nomad (and the hetgpu sidecar) chose, under a shim that lets
// the task outlive the driver, and measures the run: NVML energy, power and utilisation at
// 1 Hz, throughput from the task's metrics. At exit it reports one run record to the sidecar,
// which is how the predictor learns what each GPU type really delivers.
//
// Layout (after nomad-driver-podman): driver.go holds the plugin lifecycle, its
// configuration and the BasePlugin service; gpu.go the NVML backend; fingerprint.go the
// node attributes; start.go StartTask, step by step; tasks.go the other task RPCs (recover,
// wait, stop, destroy, inspect, signal, stats, events); handle.go the task handle, which owns
// its task's lifecycle and status; state.go what survives a driver restart; config.go both
// config schemas.
package driver

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/hetgpu/hetgpu/driver/report"
	"github.com/hetgpu/hetgpu/driver/shim"
	"github.com/hetgpu/hetgpu/internal/version"
	"github.com/hetgpu/hetgpu/plugin"
	"github.com/hetgpu/hetgpu/plugin/proto/base"
	"github.com/hetgpu/hetgpu/plugin/proto/drivers"
)

// Name is the driver's PluginInfo name: jobs say driver = "hetgpu".
const Name = "hetgpu"

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

// Compile-time checks that both services are complete.
var (
	_ drivers.DriverServer  = (*Driver)(nil)
	_ base.BasePluginServer = (*baseServer)(nil)
)
