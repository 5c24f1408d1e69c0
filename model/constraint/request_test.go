package constraint

import (
	"testing"

	"github.com/hetgpu/hetgpu/model/cluster"
)

// RequestedModel reads the device name of a request as MatchesRequest does: a request that
// names a model matches a group of that name and no other.
func TestRequestedModel(t *testing.T) {
	for _, tc := range []struct{ name, want string }{
		{"gpu", ""},
		{"nvidia/gpu", ""},
		{"nvidia/gpu/", ""},
		{"nvidia/gpu/Tesla T4", "Tesla T4"},
		{"/gpu/NVIDIA A100-SXM4-40GB", "NVIDIA A100-SXM4-40GB"},
		{"nvidia/gpu/NVIDIA A100-SXM4-40GB MIG 3g.20gb", "NVIDIA A100-SXM4-40GB MIG 3g.20gb"},
	} {
		got := RequestedModel(tc.name)
		if got != tc.want {
			t.Errorf("RequestedModel(%q) = %q, want %q", tc.name, got, tc.want)
		}
		if got == "" {
			continue
		}
		named := &cluster.DeviceGroup{Vendor: "nvidia", Type: "gpu", Name: got}
		other := &cluster.DeviceGroup{Vendor: "nvidia", Type: "gpu", Name: got + " (other)"}
		if !MatchesRequest(tc.name, named) || MatchesRequest(tc.name, other) {
			t.Errorf("%q: MatchesRequest disagrees with RequestedModel %q", tc.name, got)
		}
	}
}
