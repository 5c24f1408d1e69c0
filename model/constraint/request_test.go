package constraint

import (
	"testing"

	"github.com/hetgpu/hetgpu/model/cluster"
)

// RequestedModel reads the device name of a request as MatchesRequest does: a request that
// names a model matches a group of that name and no other.
func TestRequestedModel(t *testing.T) {
	for name, want := range map[string]string{
		"gpu": "", "nvidia/gpu": "", "nvidia/gpu/": "", "nvidia/gpu/Tesla T4": "Tesla T4",
		"/gpu/NVIDIA A100-SXM4-40GB":                   "NVIDIA A100-SXM4-40GB",
		"nvidia/gpu/NVIDIA A100-SXM4-40GB MIG 3g.20gb": "NVIDIA A100-SXM4-40GB MIG 3g.20gb",
	} {
		got := RequestedModel(name)
		if got != want {
			t.Errorf("RequestedModel(%q) = %q, want %q", name, got, want)
		}
		if got == "" {
			continue
		}
		named := &cluster.DeviceGroup{Vendor: "nvidia", Type: "gpu", Name: got}
		other := &cluster.DeviceGroup{Vendor: "nvidia", Type: "gpu", Name: got + " (other)"}
		if !MatchesRequest(name, named) || MatchesRequest(name, other) {
			t.Errorf("%q: MatchesRequest disagrees with RequestedModel %q", name, got)
		}
	}
}
