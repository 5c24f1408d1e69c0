package constraint

import (
	"errors"
	"testing"

	"github.com/hetgpu/hetgpu/model/cluster"
)

func testNode() *cluster.Node {
	return &cluster.Node{
		ID: "node-1-uuid", Name: "gpu-01", Datacenter: "dc1", Pool: "gpu", Class: "a100",
		Attributes: map[string]string{
			"kernel.name": "linux", "nomad.version": "1.9.3", "cpu.numcores": "64", "cpu.frequency": "2600",
			"driver.hetgpu.version": "0.4.0-beta1", "memory.totalbytes": "1081985024000", "os.version": "22.04",
			"unique.platform.aws.instance-id": "i-123", "features": "avx2, avx512,sse4",
		},
		Meta: map[string]string{"rack": "r12", "tier": "prod", "zone": "a", "empty": ""},
	}
}

func TestNodeConstraints(t *testing.T) {
	n := testNode()
	tests := []struct {
		l, op, r string
		want     bool
	}{
		{"${node.unique.id}", "=", "node-1-uuid", true},
		{"${node.unique.name}", "==", "gpu-01", true},
		{"${node.datacenter}", "is", "dc2", false},
		{"${node.class}", "=", "a100", true},
		{"${node.pool}", "=", "gpu", true},
		{"${attr.kernel.name}", "=", "linux", true},
		{"${meta.rack}", "!=", "r13", true},
		{"${meta.rack}", "not", "r12", false},
		{"${meta.missing}", "!=", "r12", true}, // missing resolves to "" which differs
		{"${meta.missing}", "!=", "", false},   // ...and equals ""
		{"${meta.missing}", "=", "", false},    // = needs both found
		{"${meta.empty}", "=", "", true},       // set to the empty string
		{"${meta.missing}", "is_set", "", false},
		{"${meta.rack}", "is_set", "", true},
		{"${meta.missing}", "is_not_set", "", true},
		{"${attr.cpu.numcores}", ">", "8", true}, // integers, not lexical ("64" < "8" lexically)
		{"${attr.cpu.numcores}", "<", "100", true},
		{"${attr.cpu.numcores}", ">=", "64", true},
		{"${attr.cpu.numcores}", "<=", "63", false},
		{"${attr.os.version}", ">", "9.10", true}, // floats
		{"${meta.rack}", "<", "r2", true},         // lexical
		{"${meta.missing}", "<", "r2", false},
		{"${attr.nomad.version}", "version", ">= 1.7, < 2.0", true},
		{"${attr.nomad.version}", "version", "~> 1.8", true},
		{"${attr.nomad.version}", "version", "< 1.9", false},
		{"${attr.driver.hetgpu.version}", "version", ">= 0.3.0", false}, // go-version: prerelease needs prerelease constraint
		{"${attr.driver.hetgpu.version}", "semver", ">= 0.3.0", true},   // semver: ordinary ordering
		{"${attr.driver.hetgpu.version}", "semver", "< 0.4.0", true},
		{"${attr.driver.hetgpu.version}", "semver", "> 0.4.0-alpha, != 0.4.0-beta2", true},
		{"${attr.nomad.version}", "semver", "= 1.9.3", true},
		{"${meta.missing}", "version", ">= 1.0", false},
		{"${meta.rack}", "version", ">= 1.0", false}, // not a version
		{"${attr.kernel.name}", "regexp", "^lin", true},
		{"${attr.kernel.name}", "regexp", "^win", false},
		{"${node.unique.name}", "regexp", "gpu-[0-9]+", true},
		{"${attr.features}", "set_contains", "avx2,avx512", true},
		{"${attr.features}", "set_contains_all", "avx2, sse4", true},
		{"${attr.features}", "set_contains", "avx2,neon", false},
		{"${attr.features}", "set_contains_any", "neon,sse4", true},
		{"${attr.features}", "set_contains_any", "neon", false},
		{"${meta.missing}", "set_contains_any", "neon", false},
		{"r12", "=", "${meta.rack}", true}, // reversed sides
		{"${meta.zone}", "=", "${meta.zone}", true},
		{"${meta.rack}", "distinct_property", "2", true}, // not a per-node check
		{"", "distinct_hosts", "true", true},
	}
	for _, tt := range tests {
		c := cluster.Constraint{LTarget: tt.l, Operand: tt.op, RTarget: tt.r}
		cc, err := CompileNode(c)
		if err != nil {
			t.Errorf("CompileNode(%s): %v", c, err)
			continue
		}
		if got := cc.Check(n); got != tt.want {
			t.Errorf("%s on node = %t, want %t", c, got, tt.want)
		}
	}
}

func testGroup() *cluster.DeviceGroup {
	return &cluster.DeviceGroup{
		Vendor: "nvidia", Type: "gpu", Name: "Tesla T4", GPUType: "t4",
		Attributes: map[string]cluster.Attribute{
			"memory":            {Int: i64(16), Unit: "GiB"},
			"memory_bandwidth":  {Int: i64(320), Unit: "GB/s"},
			"cuda_compute":      {Float: f64(7.5)},
			"driver_version":    {String: str("550.54.15")},
			"tdp":               {Int: i64(70), Unit: "W"},
			"mig":               {Bool: boolean(false)},
			"cores":             {Int: i64(2560)},
			"unique.serial":     {String: str("0421")},
			"pci.bandwidth":     {Int: i64(15760), Unit: "MB/s"},
			"graphics_clock":    {Int: i64(1590), Unit: "MHz"},
			"power_limit_watts": {Float: f64(70.0)},
		},
		Instances: []cluster.Instance{{ID: "GPU-aaa", Healthy: true}, {ID: "GPU-bbb", Healthy: true}, {ID: "GPU-ccc", Healthy: false}},
	}
}

func TestDeviceConstraints(t *testing.T) {
	g := testGroup()
	tests := []struct {
		l, op, r string
		want     bool
	}{
		{"${device.model}", "=", "Tesla T4", true},
		{"${device.vendor}", "=", "nvidia", true},
		{"${device.type}", "!=", "fpga", true},
		{"${device.attr.memory}", ">=", "16 GiB", true},
		{"${device.attr.memory}", ">=", "15000 MiB", true},
		{"${device.attr.memory}", ">", "16 GiB", false},
		{"${device.attr.memory}", ">=", "16384", false}, // unit vs none: false (§4.4)
		{"${device.attr.memory}", "!=", "16384", false}, // not comparable: != is false too
		{"${device.attr.memory}", "=", "16 GB", false},
		{"${device.attr.memory_bandwidth}", ">", "300 GB/s", true},
		{"${device.attr.memory_bandwidth}", ">", "290 GiB/s", true},
		{"${device.attr.memory_bandwidth}", ">", "300 GiB/s", false}, // 300 GiB/s = 322 GB/s
		{"${device.attr.memory_bandwidth}", ">", "1 GiB", false},     // rate vs bytes
		{"${device.attr.cuda_compute}", ">=", "7.0", true},
		{"${device.attr.cuda_compute}", ">=", "8", false},
		{"${device.attr.driver_version}", "version", ">= 535.0", true},
		{"${device.attr.driver_version}", "version", "535", false}, // a number literal is not a string
		{"${device.attr.driver_version}", "semver", ">= 550.54.15", true},
		{"${device.attr.cores}", "version", ">= 2000", true}, // int lhs is formatted as a version
		{"${device.attr.cores}", "version", "2560", false},   // a number literal is not a constraint string
		{"${device.attr.cores}", "version", ">= 2.0", true},
		{"${device.attr.tdp}", "<=", "70000 mW", true},
		{"${device.attr.tdp}", "<", "0.1 kW", true},
		{"${device.attr.power_limit_watts}", "=", "70", true},
		{"${device.attr.graphics_clock}", "<", "1 GHz", true}, // Nomad's GHz is 1e6 MHz
		{"${device.attr.mig}", "=", "false", true},
		{"${device.attr.mig}", "!=", "true", true},
		{"${device.attr.mig}", ">", "true", true}, // bool quirk: unequal compares as +1
		{"${device.attr.mig}", "<", "true", false},
		{"${device.attr.missing}", "!=", "x", true}, // one side missing
		{"${device.attr.missing}", "!=", "${device.attr.missing2}", false},
		{"${device.attr.missing}", "=", "x", false},
		{"${device.attr.missing}", "is_not_set", "", true},
		{"${device.attr.unique.serial}", "is_set", "", true},
		{"${device.model}", "regexp", "T4$", true},
		{"${device.model}", "regexp", "^A100", false},
		{"${device.ids}", "set_contains_any", "GPU-bbb,GPU-zzz", true},
		{"${device.ids}", "set_contains", "GPU-bbb,GPU-zzz", false},
		{"${device.ids}", "set_contains", "GPU-aaa,GPU-ccc", true}, // unhealthy IDs are in the list too
		{"${device.ids}", "=", "GPU-aaa", false},                   // group level: the whole list
		{"${device.model}", "set_contains_any", "Tesla T4,Tesla V100", true},
		{"${device.model}", "set_contains", "Tesla T4,Tesla V100", false},
	}
	for _, tt := range tests {
		c := cluster.Constraint{LTarget: tt.l, Operand: tt.op, RTarget: tt.r}
		cc, err := CompileDevice(c)
		if err != nil {
			t.Errorf("CompileDevice(%s): %v", c, err)
			continue
		}
		if got := cc.Check(g); got != tt.want {
			t.Errorf("%s on %s = %t, want %t", c, g.Name, got, tt.want)
		}
	}
}

// TestInstanceIDs follows §6.2: each instance ID is checked as (op, other side, id).
func TestInstanceIDs(t *testing.T) {
	g := testGroup()
	tests := []struct {
		op, r string
		want  map[string]bool
	}{
		{"set_contains_any", "GPU-aaa,GPU-ccc", map[string]bool{"GPU-aaa": true, "GPU-bbb": false, "GPU-ccc": true}},
		{"set_contains", "GPU-bbb", map[string]bool{"GPU-aaa": false, "GPU-bbb": true}},
		{"=", "GPU-bbb", map[string]bool{"GPU-aaa": false, "GPU-bbb": true}},
		{"!=", "GPU-bbb", map[string]bool{"GPU-aaa": true, "GPU-bbb": false}},
		// Nomad compiles the instance ID as the pattern here, so a regexp on IDs selects nothing.
		{"regexp", "^GPU-(a|c)", map[string]bool{"GPU-aaa": false, "GPU-bbb": false}},
	}
	for _, tt := range tests {
		c, err := CompileDevice(cluster.Constraint{LTarget: "${device.ids}", Operand: tt.op, RTarget: tt.r})
		if err != nil {
			t.Fatal(err)
		}
		for id, want := range tt.want {
			if got := c.InstanceAllowed(g, id); got != want {
				t.Errorf("${device.ids} %s %q: instance %s allowed = %t, want %t", tt.op, tt.r, id, got, want)
			}
		}
	}
	// A constraint not on ${device.ids} never filters instances.
	c, _ := CompileDevice(cluster.Constraint{LTarget: "${device.model}", Operand: "=", RTarget: "x"})
	if !c.InstanceAllowed(g, "GPU-aaa") || c.OnIDs() {
		t.Error("model constraint filtered an instance")
	}
	// Numeric-looking IDs are Ints to Nomad and never match a string ID check.
	c, _ = CompileDevice(cluster.Constraint{LTarget: "${device.ids}", Operand: "=", RTarget: "0"})
	if c.InstanceAllowed(g, "0") {
		t.Error(`${device.ids} = "0" admitted instance "0"; Nomad compares Int 0 with string "0" as false`)
	}
}

func TestUnsupported(t *testing.T) {
	node := []cluster.Constraint{
		{LTarget: "${attr.kernel.name}", Operand: "", RTarget: "linux"},
		{LTarget: "${attr.kernel.name}", Operand: "like", RTarget: "linux"},
		{LTarget: "${node.foo}", Operand: "=", RTarget: "x"},
		{LTarget: "${device.model}", Operand: "=", RTarget: "x"}, // device target at node level
		{LTarget: "${attr.}", Operand: "=", RTarget: "x"},
		{LTarget: "${attr.kernel.name", Operand: "=", RTarget: "x"},
		{LTarget: "${attr.kernel.name}", Operand: "regexp", RTarget: "(unclosed"},
		{LTarget: "${attr.nomad.version}", Operand: "version", RTarget: ">= banana"},
		{LTarget: "${attr.nomad.version}", Operand: "semver", RTarget: "~> 1.2.0"},
		{LTarget: "${meta.rack}", Operand: "distinct_property", RTarget: "zero"},
		{LTarget: "${meta.rack}", Operand: "distinct_property", RTarget: "0"},
	}
	for _, c := range node {
		if _, err := CompileNode(c); !errors.Is(err, ErrUnsupported) {
			t.Errorf("CompileNode(%s) err = %v, want ErrUnsupported", c, err)
		}
	}
	dev := []cluster.Constraint{
		{LTarget: "${device.model}", Operand: "distinct_hosts", RTarget: ""},
		{LTarget: "${device.model}", Operand: "distinct_property", RTarget: ""},
		{LTarget: "${node.class}", Operand: "=", RTarget: "x"},
		{LTarget: "${device.name}", Operand: "=", RTarget: "x"},
		{LTarget: "${device.model}", Operand: "regexp", RTarget: "[z-a]"},
	}
	for _, c := range dev {
		if _, err := CompileDevice(c); !errors.Is(err, ErrUnsupported) {
			t.Errorf("CompileDevice(%s) err = %v, want ErrUnsupported", c, err)
		}
	}
}

func TestDistinct(t *testing.T) {
	for _, tt := range []struct {
		cs   []cluster.Constraint
		want bool
	}{
		{nil, false},
		{[]cluster.Constraint{{Operand: "distinct_hosts"}}, true},
		{[]cluster.Constraint{{Operand: "distinct_hosts", RTarget: "true"}}, true},
		{[]cluster.Constraint{{Operand: "distinct_hosts", RTarget: "false"}}, false},
		{[]cluster.Constraint{{Operand: "distinct_hosts", RTarget: "yes please"}}, true},
	} {
		if got := DistinctHosts(tt.cs); got != tt.want {
			t.Errorf("DistinctHosts(%v) = %t, want %t", tt.cs, got, tt.want)
		}
	}
	if n, err := DistinctLimit(cluster.Constraint{Operand: "distinct_property", LTarget: "${meta.rack}"}); err != nil || n != 1 {
		t.Errorf("default limit = %d, %v; want 1", n, err)
	}
	if n, err := DistinctLimit(cluster.Constraint{Operand: "distinct_property", LTarget: "${meta.rack}", RTarget: "3"}); err != nil || n != 3 {
		t.Errorf("limit = %d, %v; want 3", n, err)
	}
}

func TestMatchesRequest(t *testing.T) {
	g := testGroup()
	for _, tt := range []struct {
		name string
		want bool
	}{
		{"gpu", true}, {"nvidia/gpu", true}, {"nvidia/gpu/Tesla T4", true}, {"nvidia/gpu/Tesla V100", false},
		{"amd/gpu", false}, {"fpga", false}, {"", false}, {"/gpu", true}, {"nvidia//Tesla T4", true},
		{"nvidia/gpu/", true}, {"nvidia/fpga/Tesla T4", false}, {"nvidia/gpu/Tesla T4/x", false},
	} {
		if got := MatchesRequest(tt.name, g); got != tt.want {
			t.Errorf("MatchesRequest(%q) = %t, want %t", tt.name, got, tt.want)
		}
	}
}

func TestCompileJob(t *testing.T) {
	n, g := testNode(), testGroup()
	j := &cluster.Job{Namespace: "ml", ID: "train", Group: "g", DeviceName: "nvidia/gpu",
		Constraints:       []cluster.Constraint{{LTarget: "${meta.tier}", Operand: "=", RTarget: "prod"}, {Operand: "distinct_hosts"}, {LTarget: "${meta.rack}", Operand: "distinct_property", RTarget: "2"}},
		DeviceConstraints: []cluster.Constraint{{LTarget: "${device.attr.memory}", Operand: ">=", RTarget: "16 GiB"}, {LTarget: "${device.ids}", Operand: "set_contains_any", RTarget: "GPU-bbb"}},
		Affinities:        []cluster.Affinity{{LTarget: "${meta.zone}", Operand: "=", RTarget: "a", Weight: 50}, {LTarget: "${meta.zone}", Operand: "=", RTarget: "b", Weight: 50}},
		DeviceAffinities:  []cluster.Affinity{{LTarget: "${device.model}", Operand: "regexp", RTarget: "T4", Weight: -100}},
	}
	cj, err := CompileJob(j)
	if err != nil {
		t.Fatal(err)
	}
	if !cj.NodeFeasible(n) || !cj.GroupFeasible(g) || !cj.Distinct || len(cj.DistinctBy) != 1 || cj.DistinctBy[0].Limit != 2 {
		t.Fatalf("compiled job: feasible %t/%t distinct %t by %v", cj.NodeFeasible(n), cj.GroupFeasible(g), cj.Distinct, cj.DistinctBy)
	}
	if !cj.PinsInstances() || cj.InstanceAllowed(g, "GPU-aaa") || !cj.InstanceAllowed(g, "GPU-bbb") {
		t.Error("instance pinning not applied")
	}
	if got := cj.NodeAffinity(n); got != 0.5 {
		t.Errorf("node affinity = %v, want 0.5", got)
	}
	if got := cj.DeviceAffinity(g); got != -1 {
		t.Errorf("device affinity = %v, want -1", got)
	}
	n2 := testNode()
	n2.Meta["tier"] = "dev"
	if cj.NodeFeasible(n2) {
		t.Error("tier constraint ignored")
	}
	j.DeviceName = ""
	if _, err := CompileJob(j); err == nil {
		t.Error("empty device name accepted")
	}
	j.DeviceName = "gpu"
	j.Affinities = append(j.Affinities, cluster.Affinity{Operand: "distinct_hosts"})
	if _, err := CompileJob(j); !errors.Is(err, ErrUnsupported) {
		t.Errorf("distinct_hosts affinity: err = %v", err)
	}
}
