package sim_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/hetgpu/hetgpu/sidecar/backends/sim"
)

func TestBundledClusters(t *testing.T) {
	cases := []struct {
		ref   string
		gpus  int
		types string
	}{
		{"gavel-108", 108, "k80,p100,v100"},
		{"modern-mix", 64, "a10,a100,h100,t4"},
		{"pai-2020", 798*2 + 497*2 + 104*8 + 135*8, "p100,t4,v100"},
		{"pai-2020:scale=0.1", 80*2 + 50*2 + 10*8 + 14*8, "p100,t4,v100"},
	}
	for _, c := range cases {
		s, err := sim.LoadSpec(c.ref)
		if err != nil {
			t.Fatalf("%s: %v", c.ref, err)
		}
		if s.TotalGPUs() != c.gpus || strings.Join(s.GPUTypes(), ",") != c.types {
			t.Errorf("%s: %d GPUs of %v, want %d of %s", c.ref, s.TotalGPUs(), s.GPUTypes(), c.gpus, c.types)
		}
	}
}

func TestSpecErrors(t *testing.T) {
	base := func(class string) string {
		return "name = \"x\"\n" + class
	}
	// class is node_class "a" of gpus per node of gpu, rest (the count, ...) after them.
	class := func(gpu string, gpus int, rest string) string {
		return fmt.Sprintf("node_class \"a\" {\n  gpu = %q\n  gpus_per_node = %d\n%s}", gpu, gpus, rest)
	}
	const one = "  count = 1\n"
	t4 := class("Tesla T4", 4, one)
	cases := []struct{ name, src, want string }{
		{"no classes", `name = "x"`, "no node_class"},
		{"bad gpu", base(class("Radeon 7900", 4, one)), `gpu = "Radeon 7900"`},
		{"zero gpus", base(class("Tesla T4", 0, one)), "gpus_per_node = 0"},
		{"bad interconnect", base(class("Tesla T4", 4, one+"  interconnect = \"smoke\"\n")), `interconnect = "smoke"`},
		{"bad efficiency", base("network {\n  cross_node_efficiency = 1.5\n}\n" + t4), "cross_node_efficiency = 1.5"},
		{"unknown attribute", base(`colour = "red"`), "colour"},
		{"missing count", base(class("Tesla T4", 4, "")), "count"},
		{"duplicate class", base(t4 + "\n" + t4), "unique"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := sim.ParseSpec([]byte(c.src), "x.hcl")
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want it to mention %q", err, c.want)
			}
		})
	}
	if _, err := sim.LoadSpec("no-such-cluster"); err == nil || !strings.Contains(err.Error(), "modern-mix") {
		t.Fatalf("unknown cluster error %v should list the bundled ones", err)
	}
	if _, err := sim.LoadSpec("modern-mix:scale=-1"); err == nil || !strings.Contains(err.Error(), "scale") {
		t.Fatalf("bad scale error %v", err)
	}
}

func TestSpecDefaults(t *testing.T) {
	s := spec(t, `name = "d"
node_class "a" {
  gpu = "NVIDIA A100-SXM4-40GB"
  gpus_per_node = 8
  count = 2
}
`)
	if s.Network.CrossNodeEfficiency != sim.DefaultCrossNodeEfficiency || s.Power.Alpha != 0.7 || s.Power.BusyUtil != 0.9 ||
		s.Classes[0].Interconnect != "pcie" || s.Classes[0].GPUType != "a100" {
		t.Fatalf("defaults: %+v", s)
	}
}
