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
	set := goplugin.PluginSet{KeyBase: basePlugin(cfg.Base)}
	switch {
	case cfg.Device != nil && cfg.Driver != nil:
		return nil, fmt.Errorf("plugin: ServeConfig sets both Device and Driver; Nomad plugins are one type")
	case cfg.Device != nil:
		set[KeyDevice] = devicePlugin(cfg.Device)
	case cfg.Driver != nil:
		set[KeyDriver] = driverPlugin(cfg.Driver)
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
		KeyBase:   basePlugin(nil),
		KeyDevice: devicePlugin(nil),
		KeyDriver: driverPlugin(nil),
	}
}

// grpcPlugin adapts one gRPC service to go-plugin: the plugin side registers impl on the
// shared server, Nomad's side wraps the connection in the service's client.
type grpcPlugin[S any] struct {
	goplugin.NetRPCUnsupportedPlugin
	impl     S
	register func(grpc.ServiceRegistrar, S)
	client   func(grpc.ClientConnInterface) any
}

func (p *grpcPlugin[S]) GRPCServer(_ *goplugin.GRPCBroker, s *grpc.Server) error {
	p.register(s, p.impl)
	return nil
}

func (p *grpcPlugin[S]) GRPCClient(_ context.Context, _ *goplugin.GRPCBroker, c *grpc.ClientConn) (any, error) {
	return p.client(c), nil
}

func basePlugin(impl base.BasePluginServer) goplugin.Plugin {
	return &grpcPlugin[base.BasePluginServer]{impl: impl, register: base.RegisterBasePluginServer,
		client: func(c grpc.ClientConnInterface) any { return base.NewBasePluginClient(c) }}
}

func devicePlugin(impl device.DevicePluginServer) goplugin.Plugin {
	return &grpcPlugin[device.DevicePluginServer]{impl: impl, register: device.RegisterDevicePluginServer,
		client: func(c grpc.ClientConnInterface) any { return device.NewDevicePluginClient(c) }}
}

func driverPlugin(impl drivers.DriverServer) goplugin.Plugin {
	return &grpcPlugin[drivers.DriverServer]{impl: impl, register: drivers.RegisterDriverServer,
		client: func(c grpc.ClientConnInterface) any { return drivers.NewDriverClient(c) }}
}
