package plugin

import (
	"fmt"
	"os/exec"

	"github.com/hashicorp/go-hclog"
	goplugin "github.com/hashicorp/go-plugin"

	"github.com/hetgpu/hetgpu/plugin/proto/base"
	"github.com/hetgpu/hetgpu/plugin/proto/device"
	"github.com/hetgpu/hetgpu/plugin/proto/drivers"
)

// Launched is a plugin process started the way the Nomad client starts it.
type Launched struct {
	Client *goplugin.Client
	Base   base.BasePluginClient
	Device device.DevicePluginClient // calls fail with Unimplemented if the plugin is a driver
	Driver drivers.DriverClient      // calls fail with Unimplemented if the plugin is a device plugin
}

// Launch starts cmd as Nomad does: go-plugin client with Nomad's handshake, gRPC only, then
// dispenses "base", "device" and "driver" (no round trips). The caller must call Kill.
func Launch(cmd *exec.Cmd, logger hclog.Logger) (*Launched, error) {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	c := goplugin.NewClient(&goplugin.ClientConfig{
		HandshakeConfig:  Handshake(),
		Plugins:          ClientPluginSet(),
		Cmd:              cmd,
		AllowedProtocols: []goplugin.Protocol{goplugin.ProtocolGRPC},
		Logger:           logger,
	})
	rpc, err := c.Client()
	if err != nil {
		c.Kill()
		return nil, fmt.Errorf("launch plugin %s: %w", cmd.Path, err)
	}
	l := &Launched{Client: c}
	for key, dst := range map[string]any{KeyBase: &l.Base, KeyDevice: &l.Device, KeyDriver: &l.Driver} {
		raw, err := rpc.Dispense(key)
		if err != nil {
			c.Kill()
			return nil, fmt.Errorf("launch plugin %s: dispense %q: %w", cmd.Path, key, err)
		}
		switch d := dst.(type) {
		case *base.BasePluginClient:
			*d = raw.(base.BasePluginClient)
		case *device.DevicePluginClient:
			*d = raw.(device.DevicePluginClient)
		case *drivers.DriverClient:
			*d = raw.(drivers.DriverClient)
		}
	}
	return l, nil
}

// Kill stops the plugin process.
func (l *Launched) Kill() { l.Client.Kill() }
