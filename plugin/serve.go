package plugin

import (
	"context"
	"fmt"
	"os"

	"github.com/hashicorp/go-hclog"
	goplugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/hetgpu/hetgpu/plugin/proto/base"
	"github.com/hetgpu/hetgpu/plugin/proto/device"
	"github.com/hetgpu/hetgpu/plugin/proto/drivers"
)

// ServeConfig names the implementation to serve. Base is required; exactly one of Device and
// Driver must be set.
type ServeConfig struct {
	Base   base.BasePluginServer
	Device device.DevicePluginServer
	Driver drivers.DriverServer
	// Logger receives go-plugin's own logs; NewLogger's output is the right one.
	Logger hclog.Logger
}

// PluginSet returns the go-plugin set Nomad expects: "base" plus "device" or "driver". Both
// entries register on the same *grpc.Server, each only its own service.
func PluginSet(cfg ServeConfig) (goplugin.PluginSet, error) {
	if cfg.Base == nil {
		return nil, fmt.Errorf("plugin: ServeConfig.Base is nil; a Nomad plugin must implement BasePlugin")
	}
	set := goplugin.PluginSet{KeyBase: &basePlugin{impl: cfg.Base}}
	switch {
	case cfg.Device != nil && cfg.Driver != nil:
		return nil, fmt.Errorf("plugin: ServeConfig sets both Device and Driver; Nomad plugins are one type")
	case cfg.Device != nil:
		set[KeyDevice] = &devicePlugin{impl: cfg.Device}
	case cfg.Driver != nil:
		set[KeyDriver] = &driverPlugin{impl: cfg.Driver}
	default:
		return nil, fmt.Errorf("plugin: ServeConfig sets neither Device nor Driver")
	}
	return set, nil
}

// Serve runs the plugin until Nomad kills it. A ServeConfig error is a programming error: it is
// logged and the process exits with status 1, which Nomad reports as a failed plugin launch.
func Serve(cfg ServeConfig) {
	set, err := PluginSet(cfg)
	if err != nil {
		if cfg.Logger == nil {
			cfg.Logger = NewLogger("plugin")
		}
		cfg.Logger.Error("cannot serve plugin", "error", err)
		os.Exit(1)
	}
	goplugin.Serve(&goplugin.ServeConfig{
		HandshakeConfig: Handshake(),
		Plugins:         set,
		GRPCServer:      goplugin.DefaultGRPCServer,
		Logger:          cfg.Logger,
	})
}

// ClientPluginSet is the client side of all three keys, for launching plugins in tests and tools.
// Dispensing a key costs no round trip; it returns base.BasePluginClient, device.DevicePluginClient
// or drivers.DriverClient on the shared connection.
func ClientPluginSet() goplugin.PluginSet {
	return goplugin.PluginSet{
		KeyBase:   &basePlugin{},
		KeyDevice: &devicePlugin{},
		KeyDriver: &driverPlugin{},
	}
}

type basePlugin struct {
	goplugin.NetRPCUnsupportedPlugin
	impl base.BasePluginServer
}

func (p *basePlugin) GRPCServer(_ *goplugin.GRPCBroker, s *grpc.Server) error {
	base.RegisterBasePluginServer(s, p.impl)
	return nil
}

func (p *basePlugin) GRPCClient(_ context.Context, _ *goplugin.GRPCBroker, c *grpc.ClientConn) (any, error) {
	return base.NewBasePluginClient(c), nil
}

type devicePlugin struct {
	goplugin.NetRPCUnsupportedPlugin
	impl device.DevicePluginServer
}

func (p *devicePlugin) GRPCServer(_ *goplugin.GRPCBroker, s *grpc.Server) error {
	device.RegisterDevicePluginServer(s, p.impl)
	return nil
}

func (p *devicePlugin) GRPCClient(_ context.Context, _ *goplugin.GRPCBroker, c *grpc.ClientConn) (any, error) {
	return device.NewDevicePluginClient(c), nil
}

type driverPlugin struct {
	goplugin.NetRPCUnsupportedPlugin
	impl drivers.DriverServer
}

func (p *driverPlugin) GRPCServer(_ *goplugin.GRPCBroker, s *grpc.Server) error {
	drivers.RegisterDriverServer(s, p.impl)
	return nil
}

func (p *driverPlugin) GRPCClient(_ context.Context, _ *goplugin.GRPCBroker, c *grpc.ClientConn) (any, error) {
	return drivers.NewDriverClient(c), nil
}
