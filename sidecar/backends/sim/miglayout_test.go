package sim

import (
	"strings"
	"testing"

	"github.com/hetgpu/hetgpu/model/gpuspec"
)

// The ":mig=" option accepts a layout exactly when gpuspec.MIGLayout says it fits one GPU
// (the rule the fake device's MIG blocks follow too).
func TestMIGSplitFollowsGPUSpecLayout(t *testing.T) {
	for _, tc := range []struct {
		parent   string
		profiles []string
	}{
		{"a100", []string{"3g.20gb", "3g.20gb"}},
		{"a100", []string{"4g.20gb", "3g.20gb"}},
		{"a100", []string{"7g.40gb"}},
		{"a100", []string{"4g.20gb", "4g.20gb"}},
		{"h100", []string{"3g.40gb", "3g.40gb"}},
		{"h100", []string{"4g.40gb", "3g.40gb"}},
		{"h100", []string{"4g.40gb", "4g.40gb"}},
		{"h100", []string{"3g.40gb", "3g.40gb", "1g.20gb"}}, // 9 memory slices by gpuspec's layout
	} {
		var types []string
		for _, p := range tc.profiles {
			typ, _ := gpuspec.MIGTypeFor(tc.parent, p)
			types = append(types, typ)
		}
		use, _ := gpuspec.MIGLayout(types)
		_, err := parseMIGSplit(tc.parent + "/" + strings.Join(tc.profiles, "+"))
		if (err == nil) != use.Fits() {
			t.Errorf("mig = %s/%v: error %v; gpuspec.MIGLayout %+v fits %v", tc.parent, tc.profiles, err, use, use.Fits())
		}
	}
}
