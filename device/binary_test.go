package device_test

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	goversion "github.com/hashicorp/go-version"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	hetdevice "github.com/hetgpu/hetgpu/device"
	"github.com/hetgpu/hetgpu/plugin"
	"github.com/hetgpu/hetgpu/plugin/plugintest"
	"github.com/hetgpu/hetgpu/plugin/proto/base"
	"github.com/hetgpu/hetgpu/plugin/proto/device"
)

// pluginBinary returns the built nomad-device-hetgpu: $HETGPU_BIN/nomad-device-hetgpu when set
// (make e2e), else a fresh `go build` into a temporary directory, once per test binary.
var pluginBinary = sync.OnceValues(func() (string, error) {
	if dir := os.Getenv("HETGPU_BIN"); dir != "" {
		p := filepath.Join(dir, hetdevice.PluginName)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	dir, err := os.MkdirTemp("", "hetgpu-device-bin")
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, hetdevice.PluginName)
	cmd := exec.Command("go", "build", "-o", out, "-ldflags",
		"-X github.com/hetgpu/hetgpu/internal/version.Version=v0.1.0-7-gdeadbee-dirty", "./cmd/nomad-device-hetgpu")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", errors.New("go build: " + err.Error() + ": " + string(b))
	}
	return out, nil
})

func launch(t *testing.T) *plugin.Launched {
	t.Helper()
	bin, err := pluginBinary()
	if err != nil {
		t.Fatal(err)
	}
	l, err := plugin.Launch(exec.Command(bin), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Kill)
	return l
}

// TestBinaryLikeNomad drives the built binary through the calls a Nomad client makes: the
// loader's PluginInfo + ConfigSchema, SetConfig with cty-msgpack config, then Fingerprint,
// Reserve and Stats.
func TestBinaryLikeNomad(t *testing.T) {
	l := launch(t)
	ctx := t.Context()
	info, err := l.Base.PluginInfo(ctx, &base.PluginInfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if info.Name != "nomad-device-hetgpu" || info.Type != base.PluginType_DEVICE || !slices.Equal(info.PluginApiVersions, []string{"v0.1.0"}) {
		t.Errorf("PluginInfo = %v", info)
	}
	if _, err := goversion.NewVersion(info.PluginVersion); err != nil {
		t.Errorf("plugin_version %q does not parse: %v", info.PluginVersion, err)
	}
	schema, err := l.Base.ConfigSchema(ctx, &base.ConfigSchemaRequest{})
	if err != nil {
		t.Fatal(err)
	}
	encode := func(hcl string) []byte {
		data, err := plugin.EncodeHCLConfig(schema.Spec, []byte(hcl))
		if err != nil {
			t.Fatalf("config %q does not parse with the plugin's schema: %v", hcl, err)
		}
		return data
	}
	// A bad config is rejected with the field named, and the plugin keeps serving.
	_, err = l.Base.SetConfig(ctx, &base.SetConfigRequest{MsgpackConfig: encode(`fingerprint_period = "sometimes"`), PluginApiVersion: "v0.1.0"})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), `config field "fingerprint_period"`) {
		t.Errorf("bad config error = %v", err)
	}
	_, err = l.Base.SetConfig(ctx, &base.SetConfigRequest{MsgpackConfig: encode(`
fingerprint_period = "500ms"
fake {
  gpus = ["1x T4", "1x V100", "2x A100-SXM4-40GB", "1x H100-SXM5-80GB"]
  seed = "binary-test"
}`), PluginApiVersion: "v0.1.0"})
	if err != nil {
		t.Fatal(err)
	}
	stream, err := l.Device.Fingerprint(ctx, &device.FingerprintRequest{})
	fp := plugintest.First(t, stream, err)
	var names []string
	var a100 []string
	for _, g := range fp.DeviceGroup {
		names = append(names, g.DeviceName)
		if err := plugin.ValidateGroup(g); err != nil {
			t.Error(err)
		}
		if g.DeviceName == "NVIDIA A100-SXM4-40GB" {
			for _, d := range g.Devices {
				a100 = append(a100, d.ID)
			}
			if m := g.Attributes["memory"]; m.GetIntVal() != 40960 || m.Unit != "MiB" {
				t.Errorf("A100 memory attribute %v", m)
			}
		}
	}
	if want := []string{"NVIDIA A100-SXM4-40GB", "NVIDIA H100 80GB HBM3", "Tesla T4", "Tesla V100-SXM2-16GB"}; !slices.Equal(names, want) {
		t.Fatalf("groups %v, want %v", names, want)
	}
	res, err := l.Device.Reserve(ctx, &device.ReserveRequest{DeviceIds: a100})
	if err != nil || res.ContainerRes.Envs["NVIDIA_VISIBLE_DEVICES"] != strings.Join(a100, ",") ||
		res.ContainerRes.Envs["CUDA_VISIBLE_DEVICES"] != strings.Join(a100, ",") {
		t.Errorf("Reserve = %v, %v", res, err)
	}
	if _, err := l.Device.Reserve(ctx, &device.ReserveRequest{DeviceIds: []string{"GPU-unknown"}}); err == nil || !strings.Contains(err.Error(), "GPU-unknown") {
		t.Errorf("Reserve of an unknown ID = %v", err)
	}
	stats, err := l.Device.Stats(ctx, &device.StatsRequest{CollectionInterval: durationpb.New(100 * time.Millisecond)})
	sr := plugintest.First(t, stats, err)
	n := 0
	for _, g := range sr.Groups {
		for id, s := range g.InstanceStats {
			n++
			if s.Timestamp == nil || s.Stats.Attributes["power_draw"] == nil || s.Stats.Nested["topology"] == nil {
				t.Errorf("stats of %s: %v", id, s)
			}
		}
	}
	if n != 5 {
		t.Errorf("stats for %d devices, want 5", n)
	}
	// The fingerprint stream is still open: nothing arrives, nothing ends it.
	got := make(chan error, 1)
	go func() { _, err := stream.Recv(); got <- err }()
	select {
	case err := <-got:
		t.Errorf("fingerprint stream produced %v without a change", err)
	case <-time.After(700 * time.Millisecond):
	}
}

// Run by hand (no cookie), the binary says it is a plugin and writes nothing to stdout.
func TestBinaryWithoutCookie(t *testing.T) {
	bin, err := pluginBinary()
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(bin)
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Errorf("exit = %v, want status 1", err)
	}
	if stdout.Len() != 0 || !strings.Contains(stderr.String(), "This binary is a plugin") {
		t.Errorf("stdout %q stderr %q", stdout.String(), stderr.String())
	}
}
