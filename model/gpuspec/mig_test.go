package gpuspec

import (
	"math"
	"testing"
)

func TestMIGTypes(t *testing.T) {
	tests := []struct {
		name, typ string
		sm, mem   float64
	}{
		{"NVIDIA A100-SXM4-40GB MIG 3g.20gb", "a100-mig-3g.20gb", 3.0 / 7, 0.5},
		{"NVIDIA A100-SXM4-80GB MIG 1g.10gb", "a100-mig-1g.10gb", 1.0 / 7, 1.0 / 8},
		{"NVIDIA H100 80GB HBM3 MIG 7g.80gb", "h100-mig-7g.80gb", 1, 1},
		{"a100-mig-2g.10gb", "a100-mig-2g.10gb", 2.0 / 7, 2.0 / 8},
		{"Tesla V100-SXM2-16GB", "", 0, 0},
		{"NVIDIA A100-SXM4-40GB MIG 5g.30gb", "", 0, 0}, // no such profile
		{"Tesla T4 MIG 1g.5gb", "", 0, 0},               // T4 has no MIG
	}
	for _, tc := range tests {
		typ, ok := MIGType(tc.name)
		if typ != tc.typ || ok != (tc.typ != "") {
			t.Errorf("MIGType(%q) = %q %t, want %q", tc.name, typ, ok, tc.typ)
			continue
		}
		if !ok {
			if TypeOf(tc.name) != Canonical(tc.name) {
				t.Errorf("TypeOf(%q) = %q, want %q", tc.name, TypeOf(tc.name), Canonical(tc.name))
			}
			continue
		}
		parent, sm, mem, _ := MIGShare(tc.name)
		if math.Abs(sm-tc.sm) > 1e-12 || math.Abs(mem-tc.mem) > 1e-12 || parent != Canonical(tc.name) {
			t.Errorf("MIGShare(%q) = %s %v %v, want %v %v", tc.name, parent, sm, mem, tc.sm, tc.mem)
		}
		if s, _ := MIGSpeedShare(tc.typ); math.Abs(s-(tc.sm+tc.mem)/2) > 1e-12 {
			t.Errorf("MIGSpeedShare(%q) = %v", tc.typ, s)
		}
		if TypeOf(tc.name) != tc.typ {
			t.Errorf("TypeOf(%q) = %q", tc.name, TypeOf(tc.name))
		}
	}
}

// migLayouts are one GPU's slice layouts and whether they fit it; the simulator's ":mig="
// option and the fake device's MIG blocks are checked against the same table.
var migLayouts = []struct {
	Parent   string
	Profiles []string
	Fits     bool
}{
	{"a100", []string{"3g.20gb", "3g.20gb"}, true},
	{"a100", []string{"4g.20gb", "3g.20gb"}, true},
	{"a100", []string{"7g.40gb"}, true},
	{"a100", []string{"2g.10gb", "2g.10gb", "2g.10gb", "1g.5gb"}, true},
	{"a100", []string{"4g.20gb", "4g.20gb"}, false},            // 8 compute slices
	{"a100", []string{"7g.40gb", "1g.5gb"}, false},             // 8 compute, 9 memory slices
	{"a100", []string{"3g.20gb", "3g.20gb", "1g.5gb"}, false},  // 7 compute but 9 memory slices
	{"h100", []string{"3g.40gb", "2g.20gb", "1g.10gb"}, true},  // 6 compute, 7 memory slices
	{"h100", []string{"3g.40gb", "3g.40gb", "1g.10gb"}, false}, // 9 memory slices
}

func TestMIGLayout(t *testing.T) {
	for _, tc := range migLayouts {
		var types []string
		for _, p := range tc.Profiles {
			typ, ok := MIGTypeFor(tc.Parent, p)
			if !ok {
				t.Fatalf("MIGTypeFor(%q, %q) not a MIG type", tc.Parent, p)
			}
			types = append(types, typ)
		}
		use, ok := MIGLayout(types)
		if !ok || use.Fits() != tc.Fits {
			t.Errorf("MIGLayout(%v) = %+v (ok %v), fits %v; want fits %v", types, use, ok, use.Fits(), tc.Fits)
		}
	}
	if _, ok := MIGLayout([]string{"a100-mig-3g.20gb", "t4"}); ok {
		t.Error("MIGLayout accepted a type that is not a MIG slice")
	}
	for typ, want := range map[string]float64{"a100-mig-3g.20gb": 20, "NVIDIA H100 80GB HBM3 MIG 1g.10gb": 10, "h200-mig-7g.141gb": 141} {
		if got, ok := MIGSliceGiB(typ); !ok || got != want {
			t.Errorf("MIGSliceGiB(%q) = %v, %v; want %v", typ, got, ok, want)
		}
	}
	if _, ok := MIGSliceGiB("a100"); ok {
		t.Error("MIGSliceGiB(a100): a whole GPU is not a slice")
	}
}
