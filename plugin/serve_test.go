package plugin

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	goplugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/hetgpu/hetgpu/plugin/proto/base"
	"github.com/hetgpu/hetgpu/plugin/proto/device"
	"github.com/hetgpu/hetgpu/plugin/proto/drivers"
)

func TestHandshake(t *testing.T) {
	h := Handshake()
	if h.ProtocolVersion != 2 || h.MagicCookieKey != "NOMAD_PLUGIN_MAGIC_COOKIE" ||
		h.MagicCookieValue != "e4327c2e01eabfd75a8a67adb114fb34a757d57eee7728d857a8cec6e91a7255" {
		t.Fatalf("handshake differs from Nomad's: %+v", h)
	}
}

type fakeBase struct {
	base.UnimplementedBasePluginServer
}

func (fakeBase) PluginInfo(context.Context, *base.PluginInfoRequest) (*base.PluginInfoResponse, error) {
	return Info(base.PluginType_DEVICE, "test", "v1.2.3"), nil
}

type fakeDevice struct {
	device.UnimplementedDevicePluginServer
}

func (fakeDevice) Reserve(_ context.Context, r *device.ReserveRequest) (*device.ReserveResponse, error) {
	return &device.ReserveResponse{ContainerRes: &device.ContainerReservation{Envs: map[string]string{"IDS": strings.Join(r.DeviceIds, ",")}}}, nil
}

func TestPluginSetErrors(t *testing.T) {
	tests := []struct {
		name string
		cfg  ServeConfig
		want string
	}{
		{"no base", ServeConfig{Device: fakeDevice{}}, "Base is nil"},
		{"both", ServeConfig{Base: fakeBase{}, Device: fakeDevice{}, Driver: drivers.UnimplementedDriverServer{}}, "both"},
		{"neither", ServeConfig{Base: fakeBase{}}, "neither"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := PluginSet(tt.cfg)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want error containing %q", err, tt.want)
			}
		})
	}
}

// Each key registers only its own service, so both can share one *grpc.Server.
func TestPluginSetRegistersOwnServiceOnly(t *testing.T) {
	for _, tc := range []struct {
		cfg  ServeConfig
		key  string
		want string
	}{
		{ServeConfig{Base: fakeBase{}, Device: fakeDevice{}}, KeyBase, "hashicorp.nomad.plugins.base.proto.BasePlugin"},
		{ServeConfig{Base: fakeBase{}, Device: fakeDevice{}}, KeyDevice, "hashicorp.nomad.plugins.device.DevicePlugin"},
		{ServeConfig{Base: fakeBase{}, Driver: drivers.UnimplementedDriverServer{}}, KeyDriver, "hashicorp.nomad.plugins.drivers.proto.Driver"},
	} {
		set, err := PluginSet(tc.cfg)
		if err != nil {
			t.Fatal(err)
		}
		s := grpc.NewServer()
		if err := set[tc.key].(goplugin.GRPCPlugin).GRPCServer(nil, s); err != nil {
			t.Fatal(err)
		}
		var names []string
		for n := range s.GetServiceInfo() {
			names = append(names, n)
		}
		if !slices.Equal(names, []string{tc.want}) {
			t.Errorf("key %q registered %v, want only %s", tc.key, names, tc.want)
		}
	}
}

func TestPluginSetOverGRPC(t *testing.T) {
	set, err := PluginSet(ServeConfig{Base: fakeBase{}, Device: fakeDevice{}})
	if err != nil {
		t.Fatal(err)
	}
	// Closing the client shuts the server down through go-plugin's controller.
	client, _ := goplugin.TestPluginGRPCConn(t, false, map[string]goplugin.Plugin(set))
	defer client.Close()
	// The client dispenses with its own set, like Nomad does.
	client.Plugins = ClientPluginSet()
	raw, err := client.Dispense(KeyBase)
	if err != nil {
		t.Fatal(err)
	}
	info, err := raw.(base.BasePluginClient).PluginInfo(t.Context(), &base.PluginInfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if info.Type != base.PluginType_DEVICE || info.PluginVersion != "1.2.3" || !slices.Equal(info.PluginApiVersions, []string{"v0.1.0"}) {
		t.Errorf("PluginInfo = %v", info)
	}
	raw, err = client.Dispense(KeyDevice)
	if err != nil {
		t.Fatal(err)
	}
	res, err := raw.(device.DevicePluginClient).Reserve(t.Context(), &device.ReserveRequest{DeviceIds: []string{"a", "b"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := res.ContainerRes.Envs["IDS"]; got != "a,b" {
		t.Errorf("Reserve env = %q", got)
	}
}

func TestLoggerIsJSON(t *testing.T) {
	var buf bytes.Buffer
	l := newLogger("p", &buf)
	l.Trace("hello", "k", 1)
	var m map[string]any
	if err := json.Unmarshal(buf.Bytes(), &m); err != nil {
		t.Fatalf("log line is not JSON: %q: %v", buf.String(), err)
	}
	if m["@level"] != "trace" || m["@message"] != "hello" || m["@module"] != "p" {
		t.Errorf("log line = %v", m)
	}
}

func TestSanitizeVersion(t *testing.T) {
	tests := []struct{ in, want string }{
		{"0.1.0", "0.1.0"},
		{"v1.2.3", "1.2.3"},
		{"0.1.0-dev", "0.1.0-dev"},
		{"v0.1.0-3-gabc1234-dirty", "0.1.0-3-gabc1234-dirty"},
		{"abc1234", "0.1.0+abc1234"},
		{"abc1234-dirty", "0.1.0+abc1234.dirty"},
		{"", "0.1.0"},
		{"!!!", "0.1.0"},
	}
	for _, tt := range tests {
		if got := SanitizeVersion(tt.in); got != tt.want {
			t.Errorf("SanitizeVersion(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
