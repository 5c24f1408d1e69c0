// Package plugintest serves hetgpu plugins to tests over a real in-process go-plugin gRPC
// connection, as Nomad dials them.
package plugintest

import (
	"testing"

	goplugin "github.com/hashicorp/go-plugin"

	"github.com/hetgpu/hetgpu/plugin"
	"github.com/hetgpu/hetgpu/plugin/proto/base"
)

// Dial serves cfg's plugins (plugin.PluginSet) over an in-memory gRPC connection that the
// test's end closes (shutting the server down through go-plugin's controller), and returns
// the base plugin's client and the client dispensed for key (plugin.KeyDevice: a
// device.DevicePluginClient; plugin.KeyDriver: a drivers.DriverClient), both dispensed with
// Nomad's side of the set (plugin.ClientPluginSet).
func Dial(t *testing.T, cfg plugin.ServeConfig, key string) (base.BasePluginClient, any) {
	t.Helper()
	set, err := plugin.PluginSet(cfg)
	if err != nil {
		t.Fatal(err)
	}
	client, _ := goplugin.TestPluginGRPCConn(t, false, map[string]goplugin.Plugin(set))
	t.Cleanup(func() { client.Close() })
	client.Plugins = plugin.ClientPluginSet()
	rb, err := client.Dispense(plugin.KeyBase)
	if err != nil {
		t.Fatal(err)
	}
	rk, err := client.Dispense(key)
	if err != nil {
		t.Fatal(err)
	}
	return rb.(base.BasePluginClient), rk
}

// First is the first message of a plugin's server stream (fingerprints, stats), as the call
// that opens it returned it with err; either error fails the test.
func First[M any](t *testing.T, stream interface{ Recv() (M, error) }, err error) M {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	m, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	return m
}
