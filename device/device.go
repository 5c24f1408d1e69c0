// Package device is hetgpu's Nomad device plugin, nomad-device-hetgpu: every NVIDIA GPU of a node
// (or MIG device) appears in Nomad as vendor "nvidia", type "gpu", with stable attributes in Nomad
// units, real health from XID events and failing NVML queries, power/energy/topology stats, and
// a fake backend (device/fake) that poses as any GPU mix without hardware.
//
// One file per concern: config.go (schema and decoding), fingerprint.go (enumeration and
// groups), attributes.go, topology.go, health.go (XIDs), monitor.go (the NVML owner loop),
// stats.go, reserve.go; this file implements the gRPC services.
package device

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/hetgpu/hetgpu/device/fake"
	"github.com/hetgpu/hetgpu/internal/version"
	"github.com/hetgpu/hetgpu/plugin"
	"github.com/hetgpu/hetgpu/plugin/proto/base"
	"github.com/hetgpu/hetgpu/plugin/proto/device"
)

// errDisabled is never sent as a stream error (a disabled plugin keeps an empty fingerprint
// stream open); it answers Reserve calls on a disabled plugin.
var errDisabled = errors.New("the nomad-device-hetgpu plugin is disabled by its config (enabled = false)")

// PluginName is PluginInfo.name and the binary's file name (Nomad's plugin block key).
const PluginName = "nomad-device-hetgpu"

// OpenFunc returns the NVML to use for a config: the fake fleet for a `fake` block, else the
// real library (dlopen of libnvidia-ml; Init fails cleanly where there is none).
type OpenFunc func(Config) (nvml.Interface, error)

// DefaultOpen is the production OpenFunc.
func DefaultOpen(cfg Config) (nvml.Interface, error) {
	if cfg.Fake != nil {
		return fake.New(cfg.Fake.Spec())
	}
	return nvml.New(), nil
}

// Plugin implements Nomad's BasePlugin and DevicePlugin services.
type Plugin struct {
	base.UnimplementedBasePluginServer
	device.UnimplementedDevicePluginServer

	logger hclog.Logger
	open   OpenFunc
	now    func() time.Time
	exists func(string) bool
	ctx    context.Context // plugin lifetime; the monitor runs under it

	mu      sync.Mutex
	cfg     *Config
	lib     nvml.Interface
	monitor *monitor
}

// Option customises a Plugin (tests swap the NVML and the host).
type Option func(*Plugin)

// WithOpen replaces how NVML is obtained.
func WithOpen(f OpenFunc) Option { return func(p *Plugin) { p.open = f } }

// WithClock replaces the clock used for stats timestamps.
func WithClock(now func() time.Time) Option { return func(p *Plugin) { p.now = now } }

// WithDeviceExists replaces the host device-node check used by Reserve.
func WithDeviceExists(f func(string) bool) Option { return func(p *Plugin) { p.exists = f } }

// New returns a plugin whose background work stops when ctx ends.
func New(ctx context.Context, logger hclog.Logger, opts ...Option) *Plugin {
	p := &Plugin{logger: logger, open: DefaultOpen, now: time.Now, exists: hostDeviceExists, ctx: ctx}
	for _, o := range opts {
		o(p)
	}
	return p
}

// PluginInfo identifies the plugin to Nomad.
func (p *Plugin) PluginInfo(context.Context, *base.PluginInfoRequest) (*base.PluginInfoResponse, error) {
	return plugin.Info(base.PluginType_DEVICE, PluginName, version.Version), nil
}

// ConfigSchema returns the agent config schema.
func (p *Plugin) ConfigSchema(context.Context, *base.ConfigSchemaRequest) (*base.ConfigSchemaResponse, error) {
	return &base.ConfigSchemaResponse{Spec: ConfigSchema()}, nil
}

// SetConfig validates and stores the config; NVML is opened lazily by the first Fingerprint or
// Stats call, so Nomad's validation launch never touches the GPUs.
func (p *Plugin) SetConfig(_ context.Context, req *base.SetConfigRequest) (*base.SetConfigResponse, error) {
	cfg, err := ParseConfig(req.GetMsgpackConfig())
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "%s: invalid config: %v", PluginName, err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.monitor != nil {
		return nil, status.Errorf(codes.FailedPrecondition, "%s: config cannot change while devices are being fingerprinted; restart the plugin", PluginName)
	}
	p.cfg = &cfg
	p.logger.Info("config set", "enabled", cfg.Enabled, "fingerprint_period", cfg.FingerprintPeriod.String(),
		"ignored_gpu_ids", cfg.IgnoredGPUIDs, "fake", cfg.Fake != nil, "api_version", req.GetPluginApiVersion())
	return &base.SetConfigResponse{}, nil
}

// ensureMonitor starts the NVML owner on first use.
func (p *Plugin) ensureMonitor() (*monitor, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.monitor != nil {
		return p.monitor, nil
	}
	if p.cfg == nil {
		return nil, status.Errorf(codes.FailedPrecondition, "%s: SetConfig has not been called", PluginName)
	}
	lib, err := p.open(*p.cfg)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "%s: open NVML: %v", PluginName, err)
	}
	p.lib = lib
	p.monitor = newMonitor(lib, *p.cfg, p.logger.Named("monitor"))
	go p.monitor.run(p.ctx)
	return p.monitor, nil
}

// Fingerprint sends the device list at once and again on every change. It only returns when
// Nomad cancels the stream or the plugin stops: Nomad treats an ended stream as fatal.
func (p *Plugin) Fingerprint(_ *device.FingerprintRequest, stream device.DevicePlugin_FingerprintServer) error {
	m, err := p.ensureMonitor()
	if err != nil {
		return err
	}
	ctx := stream.Context()
	var sent uint64
	for {
		resp, ver, changed := m.current()
		if resp != nil && ver != sent {
			if err := stream.Send(resp); err != nil {
				return err
			}
			sent = ver
		}
		select {
		case <-ctx.Done():
			return nil
		case <-p.ctx.Done():
			return nil
		case <-changed:
		}
	}
}

// Reserve returns the env and device nodes for a task using ids.
func (p *Plugin) Reserve(_ context.Context, req *device.ReserveRequest) (*device.ReserveResponse, error) {
	p.mu.Lock()
	m, cfg := p.monitor, p.cfg
	p.mu.Unlock()
	if cfg != nil && !cfg.Enabled {
		return nil, status.Error(codes.FailedPrecondition, errDisabled.Error())
	}
	var inv *inventory
	if m != nil {
		inv = m.inventory()
	}
	res, err := reserve(inv, req.GetDeviceIds(), p.exists)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "%s: %v", PluginName, err)
	}
	return &device.ReserveResponse{ContainerRes: res}, nil
}

// Stats streams readings of every device each collection interval (default 1 s). NVML errors
// become "N/A" values; the stream never fails because of them.
func (p *Plugin) Stats(req *device.StatsRequest, stream device.DevicePlugin_StatsServer) error {
	m, err := p.ensureMonitor()
	if err != nil {
		return err
	}
	interval := req.GetCollectionInterval().AsDuration()
	if interval <= 0 {
		interval = time.Second
	}
	ctx := stream.Context()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if err := stream.Send(collectStats(m.inventory(), p.now())); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-p.ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// NVML returns the library the plugin opened (nil before the first Fingerprint or Stats); tests
// use it to drive the fake.
func (p *Plugin) NVML() nvml.Interface {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lib
}

// String describes the plugin for logs.
func (p *Plugin) String() string { return fmt.Sprintf("%s %s", PluginName, version.Version) }
