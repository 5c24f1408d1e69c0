package sim

import (
	"strings"
	"testing"

	"github.com/hetgpu/hetgpu/model/gpuspec"
)

// The ":mig=" option accepts a layout exactly when gpuspec.MIGLayout says it fits one GPU
// (the rule the fake device's MIG blocks follow too). The last layout takes 9 memory slices.
func TestMIGSplitFollowsGPUSpecLayout(t *testing.T) {
	splits := "a100/3g.20gb+3g.20gb a100/4g.20gb+3g.20gb a100/7g.40gb a100/4g.20gb+4g.20gb " +
		"h100/3g.40gb+3g.40gb h100/4g.40gb+3g.40gb h100/4g.40gb+4g.40gb h100/3g.40gb+3g.40gb+1g.20gb"
	for _, split := range strings.Fields(splits) {
		parent, profiles, _ := strings.Cut(split, "/")
		var types []string
		for _, p := range strings.Split(profiles, "+") {
			typ, _ := gpuspec.MIGTypeFor(parent, p)
			types = append(types, typ)
		}
		use, _ := gpuspec.MIGLayout(types)
		if _, err := parseMIGSplit(split); (err == nil) != use.Fits() {
			t.Errorf("mig = %s: error %v; gpuspec.MIGLayout %+v fits %v", split, err, use, use.Fits())
		}
	}
}
