package device

import (
	"context"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/hetgpu/hetgpu/device/fake"
	"github.com/hetgpu/hetgpu/plugin"
	"github.com/hetgpu/hetgpu/plugin/plugintest"
	"github.com/hetgpu/hetgpu/plugin/proto/base"
	"github.com/hetgpu/hetgpu/plugin/proto/device"
)

// served is a plugin behind a real in-process go-plugin gRPC connection.
type served struct {
	p      *Plugin
	base   base.BasePluginClient
	device device.DevicePluginClient
}

func encodeConfig(t testing.TB, hcl string) []byte {
	t.Helper()
	data, err := plugin.EncodeHCLConfig(ConfigSchema(), []byte(hcl))
	if err != nil {
		t.Fatalf("encode config: %v", err)
	}
	return data
}

// serve starts a plugin with the HCL config body and calls SetConfig as Nomad does.
func serve(t *testing.T, hcl string, opts ...Option) *served {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	p := New(ctx, hclog.NewNullLogger(), opts...)
	rb, rd := plugintest.Dial(t, plugin.ServeConfig{Base: p, Device: p}, plugin.KeyDevice)
	s := &served{p: p, base: rb, device: rd.(device.DevicePluginClient)}
	if _, err := s.base.SetConfig(t.Context(), &base.SetConfigRequest{MsgpackConfig: encodeConfig(t, hcl), PluginApiVersion: plugin.APIVersion}); err != nil {
		t.Fatalf("SetConfig: %v", err)
	}
	return s
}

// fpStream is an open Fingerprint stream read in the background.
type fpStream struct {
	t    *testing.T
	msgs chan *device.FingerprintResponse
	errs chan error
}

// fingerprints opens the stream as Nomad does.
func (s *served) fingerprints(t *testing.T) *fpStream {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	t.Cleanup(cancel)
	stream, err := s.device.Fingerprint(ctx, &device.FingerprintRequest{})
	if err != nil {
		t.Fatal(err)
	}
	fs := &fpStream{t: t, msgs: make(chan *device.FingerprintResponse, 64), errs: make(chan error, 1)}
	go func() {
		for {
			m, err := stream.Recv()
			if err != nil {
				fs.errs <- err
				return
			}
			fs.msgs <- m
		}
	}()
	return fs
}

// within returns the next message, or nil if none arrives within d; a closed stream fails the test.
func (fs *fpStream) within(d time.Duration) *device.FingerprintResponse {
	fs.t.Helper()
	select {
	case m := <-fs.msgs:
		return m
	case err := <-fs.errs:
		fs.t.Fatalf("fingerprint stream ended: %v", err)
	case <-time.After(d):
	}
	return nil
}

// next waits up to 10 s for the next message.
func (fs *fpStream) next() *device.FingerprintResponse {
	fs.t.Helper()
	m := fs.within(10 * time.Second)
	if m == nil {
		fs.t.Fatal("no fingerprint within 10 s")
	}
	return m
}

func (s *served) fleet(t *testing.T) *fake.Fleet {
	t.Helper()
	f, ok := s.p.NVML().(*fake.Fleet)
	if !ok {
		t.Fatalf("plugin NVML is %T, want the fake", s.p.NVML())
	}
	return f
}

func groupByName(resp *device.FingerprintResponse, name string) *device.DeviceGroup {
	for _, g := range resp.GetDeviceGroup() {
		if g.DeviceName == name {
			return g
		}
	}
	return nil
}
