package driver

import (
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"google.golang.org/grpc"

	"github.com/hetgpu/hetgpu/driver/shim"
	"github.com/hetgpu/hetgpu/internal/version"
	"github.com/hetgpu/hetgpu/plugin"
	"github.com/hetgpu/hetgpu/plugin/proto/drivers"
)

// fingerprintPeriod is how often the fingerprint is recomputed (and re-sent on change).
const fingerprintPeriod = 30 * time.Second

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
	return serveStream(d, stream.Context(), t.C, func(time.Time) error {
		fp := d.fingerprint()
		if fingerprintEqual(fp, last) {
			return nil
		}
		if err := stream.Send(fp); err != nil {
			return err
		}
		last = fp
		return nil
	})
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
