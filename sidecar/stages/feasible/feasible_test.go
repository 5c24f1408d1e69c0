package feasible

import (
	"fmt"
	"strings"
	"testing"

	"github.com/hetgpu/hetgpu/model/cluster"
	"github.com/hetgpu/hetgpu/sidecar/sched"
)

// group is one device group of a test node: n GPUs of a product, the first bad unhealthy.
type group struct {
	name string
	n    int
	bad  int
}

func node(id, status string, groups ...group) cluster.Node {
	n := cluster.Node{ID: id, Name: id, Status: status, Eligible: true, Datacenter: "dc1",
		Attributes: map[string]string{"kernel.name": "linux"}, Meta: map[string]string{}}
	for _, g := range groups {
		mem := int64(16384)
		if strings.Contains(g.name, "80GB") {
			mem = 81920
		}
		dg := cluster.DeviceGroup{Vendor: "nvidia", Type: "gpu", Name: g.name,
			Attributes: map[string]cluster.Attribute{"memory": {Int: &mem, Unit: "MiB"}}}
		for i := 0; i < g.n; i++ {
			dg.Instances = append(dg.Instances, cluster.Instance{ID: fmt.Sprintf("GPU-%s-%s-%d", id, g.name, i), Healthy: i >= g.bad})
		}
		n.Devices = append(n.Devices, dg)
	}
	return n
}

// issueCluster is the cluster of issue 14: 4x T4; 8x V100; 4x A100 + 4x H100.
func issueCluster() []cluster.Node {
	return []cluster.Node{
		node("t4", "ready", group{name: "Tesla T4", n: 4}),
		node("v100", "ready", group{name: "Tesla V100-SXM2-16GB", n: 8}),
		node("mixed", "ready", group{name: "NVIDIA A100-SXM4-40GB", n: 4}, group{name: "NVIDIA H100 80GB HBM3", n: 4}),
	}
}

func job(gpus, perNode, maxNodes int, mod func(*cluster.Job)) *cluster.Job {
	j := &cluster.Job{Namespace: "default", ID: "j", Group: "train", GPUs: gpus, GPUsPerNode: perNode, DeviceName: "nvidia/gpu"}
	j.Hetgpu.MaxNodes = maxNodes
	if mod != nil {
		mod(j)
	}
	return j
}

// speeds predicts steps/s per GPU by type.
type speeds map[string]float64

func (s speeds) Predict(_ *cluster.Job, t string, gpus int) sched.Estimate {
	return sched.Estimate{Throughput: s[t] * float64(gpus)}
}

func TestCheck(t *testing.T) {
	draining := func(n cluster.Node) cluster.Node { n.Draining, n.Eligible = true, false; return n }
	pred := speeds{"t4": 1, "v100": 3, "a100": 7, "h100": 14}
	tests := []struct {
		name  string
		nodes []cluster.Node
		job   *cluster.Job
		view  View
		// want: "" fits; "invalid: …", "nonodes: …" or the reason (a prefix is enough).
		want string
		kind Kind
	}{
		{"fits one node", issueCluster(), job(8, 0, 0, nil), Ever, "", ""},
		{"16 GPUs on one node", issueCluster(), job(16, 0, 0, nil), Ever,
			"needs 16 GPUs of one type on one node; the largest node has 8 V100", Infeasible},
		{"8 GPUs of one type, mixed node does not add up", issueCluster()[2:], job(8, 0, 0, nil), Ever,
			"needs 8 GPUs of one type on one node; the largest node has 4 A100", Infeasible},
		{"ddp: no two nodes of one type", issueCluster(), job(8, 4, 2, nil), Ever,
			"needs 2 nodes with 4 GPUs of one type; at most 1 node has 4 V100", Infeasible},
		{"ddp: two V100 nodes fit", append(issueCluster(), node("v100b", "ready", group{name: "Tesla V100-SXM2-16GB", n: 4})),
			job(8, 4, 2, nil), Ever, "", ""},
		{"ddp: no node holds one allocation", issueCluster(), job(32, 16, 2, nil), Ever,
			"needs 2 nodes with 16 GPUs of one type; no node has 16 GPUs of one type (the most is 8 V100)", Infeasible},
		{"spread over nodes", []cluster.Node{node("a", "ready", group{name: "Tesla V100-SXM2-16GB", n: 8}), node("b", "ready", group{name: "Tesla V100-SXM2-16GB", n: 4})},
			job(16, 0, 2, nil), Ever, "needs 16 GPUs of one type on at most 2 nodes; the most is 12 V100 on 2 nodes", Infeasible},
		{"spread fits", []cluster.Node{node("a", "ready", group{name: "Tesla V100-SXM2-16GB", n: 8}), node("b", "ready", group{name: "Tesla V100-SXM2-16GB", n: 8})},
			job(16, 0, 2, nil), Ever, "", ""},
		{"node constraint", issueCluster(), job(1, 0, 0, func(j *cluster.Job) {
			j.Constraints = []cluster.Constraint{{LTarget: "${node.datacenter}", Operand: "=", RTarget: "dc1"}, {LTarget: "${attr.kernel.name}", Operand: "=", RTarget: "windows"}}
		}), Ever, "no ready node satisfies the constraint `${attr.kernel.name} = windows`", Infeasible},
		{"node constraints only together", issueCluster(), job(1, 0, 0, func(j *cluster.Job) {
			j.Constraints = []cluster.Constraint{{LTarget: "${node.unique.name}", Operand: "=", RTarget: "t4"}, {LTarget: "${node.unique.name}", Operand: "=", RTarget: "v100"}}
		}), Ever, "no ready node satisfies all of its constraints together (3 checked)", Infeasible},
		{"device name", issueCluster(), job(1, 0, 0, func(j *cluster.Job) { j.DeviceName = "nvidia/gpu/Tesla K80" }), Ever,
			`no ready node has a device matching "nvidia/gpu/Tesla K80"`, Infeasible},
		{"device constraint", issueCluster(), job(1, 0, 0, func(j *cluster.Job) {
			j.DeviceConstraints = []cluster.Constraint{{LTarget: "${device.attr.memory}", Operand: ">=", RTarget: "100 GiB"}}
		}), Ever, "no \"nvidia/gpu\" device on a ready node satisfies the device constraint `${device.attr.memory} >= 100 GiB`", Infeasible},
		{"device constraint narrows the count", issueCluster(), job(8, 0, 0, func(j *cluster.Job) {
			j.DeviceConstraints = []cluster.Constraint{{LTarget: "${device.attr.memory}", Operand: ">=", RTarget: "80 GiB"}}
		}), Ever, "needs 8 GPUs of one type on one node; the largest node has 4 H100", Infeasible},
		{"T_min", issueCluster(), job(2, 0, 0, func(j *cluster.Job) { j.Hetgpu.MinThroughput = 100 }), Ever,
			"needs 100 steps/s (hetgpu.min_throughput); the fastest GPU type it fits, H100, is predicted at 28 steps/s", Infeasible},
		{"T_min met on one type", issueCluster(), job(2, 0, 0, func(j *cluster.Job) { j.Hetgpu.MinThroughput = 20 }), Ever, "", ""},
		{"T_min counts only types that fit", issueCluster(), job(8, 0, 0, func(j *cluster.Job) { j.Hetgpu.MinThroughput = 30 }), Ever,
			"needs 30 steps/s (hetgpu.min_throughput); the fastest GPU type it fits, V100, is predicted at 24 steps/s", Infeasible},
		{"draining node counts", []cluster.Node{node("t4", "ready", group{name: "Tesla T4", n: 4}), draining(node("v100", "ready", group{name: "Tesla V100-SXM2-16GB", n: 8}))},
			job(8, 0, 0, nil), Ever, "", ""},
		{"draining node is not free now", []cluster.Node{node("t4", "ready", group{name: "Tesla T4", n: 4}), draining(node("v100", "ready", group{name: "Tesla V100-SXM2-16GB", n: 8}))},
			job(8, 0, 0, nil), Now, "needs 8 free GPUs of one type on one node; at most 4 T4 are free on one node", Infeasible},
		{"down node does not count", []cluster.Node{node("t4", "ready", group{name: "Tesla T4", n: 4}), node("v100", "down", group{name: "Tesla V100-SXM2-16GB", n: 8})},
			job(8, 0, 0, nil), Ever, "needs 8 GPUs of one type on one node; the largest node has 4 T4", Infeasible},
		{"unhealthy GPUs do not count", []cluster.Node{node("v100", "ready", group{name: "Tesla V100-SXM2-16GB", n: 8, bad: 2})},
			job(8, 0, 0, nil), Ever, "needs 8 GPUs of one type on one node; the largest node has 6 V100", Infeasible},
		{"all unhealthy", []cluster.Node{node("v100", "ready", group{name: "Tesla V100-SXM2-16GB", n: 8, bad: 8})},
			job(1, 0, 0, nil), Ever, "every matching GPU on a ready node is unhealthy", Infeasible},
		{"device.ids names no GPU here", issueCluster(), job(1, 0, 0, func(j *cluster.Job) {
			j.DeviceConstraints = []cluster.Constraint{{LTarget: "${device.ids}", Operand: "set_contains_any", RTarget: "GPU-elsewhere-0"}}
		}), Ever, "no \"nvidia/gpu\" device on a ready node satisfies the device constraint `${device.ids} set_contains_any GPU-elsewhere-0`", Infeasible},
		{"no nodes", nil, job(1, 0, 0, nil), Ever, "nonodes: no ready node with devices", ""},
		{"only down nodes", []cluster.Node{node("v100", "down", group{name: "Tesla V100-SXM2-16GB", n: 8})}, job(1, 0, 0, nil), Ever, "nonodes: no ready node with devices", ""},
		{"devices not fingerprinted yet", []cluster.Node{node("v100", "ready")}, job(1, 0, 0, nil), Ever, "nonodes: no ready node with devices", ""},
		{"nodes without devices do not count", append(issueCluster(), node("cpu", "ready")), job(1, 0, 0, func(j *cluster.Job) {
			j.Constraints = []cluster.Constraint{{LTarget: "${node.unique.name}", Operand: "=", RTarget: "cpu"}}
		}), Ever, "no ready node satisfies the constraint `${node.unique.name} = cpu`", Infeasible},
		{"invalid split", issueCluster(), job(8, 3, 0, nil), Ever, "invalid: 8 GPUs cannot be split into allocations of 3 GPUs each", Invalid},
		{"invalid max_nodes", issueCluster(), job(8, 2, 2, nil), Ever, "invalid: 8 GPUs at 2 per node need 4 nodes, but hetgpu.max_nodes = 2", Invalid},
		{"invalid no GPUs", issueCluster(), job(0, 0, 0, nil), Ever, "invalid: requests 0 GPUs", Invalid},
		{"invalid operator", issueCluster(), job(1, 0, 0, func(j *cluster.Job) {
			j.Constraints = []cluster.Constraint{{LTarget: "${attr.kernel.name}", Operand: "resembles", RTarget: "linux"}}
		}), Ever, "invalid: job default/j/train constraint", Invalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			snap := &cluster.Snapshot{Nodes: tt.nodes}
			v := Check(snap, tt.job, tt.view, pred, Options{MinThroughput: true})
			got := v.Reason
			switch {
			case v.Invalid:
				got = "invalid: " + got
			case v.NoNodes:
				got = "nonodes: " + got
			}
			t.Logf("verdict %+v", v)
			if tt.want == "" && tt.kind == "" && !v.Fits {
				t.Fatalf("verdict %+v, want fits", v)
			}
			if tt.want != "" && !strings.HasPrefix(got, tt.want) {
				t.Fatalf("reason %q, want %q", got, tt.want)
			}
			if tt.view == Ever && v.Kind() != tt.kind {
				t.Fatalf("kind %q, want %q (%+v)", v.Kind(), tt.kind, v)
			}
			if !v.Fits && v.Reason == "" {
				t.Fatalf("no reason for %+v", v)
			}
		})
	}
}

func TestCheckNowCountsRunningAllocations(t *testing.T) {
	snap := &cluster.Snapshot{Nodes: issueCluster()}
	j := job(6, 0, 0, nil)
	if v := Check(snap, j, Now, nil, Options{}); !v.Fits {
		t.Fatalf("empty cluster: %+v", v)
	}
	var ids []string
	for _, in := range snap.Nodes[1].Devices[0].Instances[:3] {
		ids = append(ids, in.ID)
	}
	snap.Running = []cluster.Alloc{{ID: "a", Namespace: "default", JobID: "other", NodeID: "v100", DeviceIDs: ids}}
	v := Check(snap, j, Now, nil, Options{})
	if want := "needs 6 free GPUs of one type on one node; at most 5 V100 are free on one node"; v.Fits || v.Reason != want {
		t.Fatalf("verdict %+v, want %q", v, want)
	}
	// Running work never makes a group infeasible.
	if v := Check(snap, j, Ever, nil, Options{}); !v.Fits {
		t.Fatalf("ever view: %+v", v)
	}
}

func TestTriageCachesPerShape(t *testing.T) {
	c := NewChecker(Options{})
	snap := &cluster.Snapshot{Nodes: issueCluster(), Pending: []cluster.Job{*job(16, 0, 0, nil), *job(8, 4, 2, nil), *job(16, 0, 0, func(j *cluster.Job) { j.ID = "same-request" })}}
	vs := c.Triage(nil, snap, nil)
	if vs[0].Kind() != Infeasible || vs[1].Kind() != Infeasible || vs[2].Reason != vs[0].Reason {
		t.Fatalf("verdicts %+v", vs)
	}
	if c.misses != 2 {
		t.Fatalf("%d capacity computations for 2 distinct requests", c.misses)
	}
	// A drain does not change the shape: nothing is computed again.
	snap.Nodes[1].Draining, snap.Nodes[1].Eligible = true, false
	c.Triage(nil, snap, nil)
	if c.misses != 2 {
		t.Fatalf("a drain recomputed: %d", c.misses)
	}
	// A node joins: re-checked, and the data-parallel group fits now.
	snap.Nodes = append(snap.Nodes, node("v100b", "ready", group{name: "Tesla V100-SXM2-16GB", n: 8}))
	vs = c.Triage(nil, snap, nil)
	if c.misses != 4 || !vs[1].Fits || vs[0].Fits {
		t.Fatalf("after a node joined: %d computations, verdicts %+v", c.misses, vs)
	}
	// A GPU turns unhealthy: re-checked.
	snap.Nodes[3].Devices[0].Instances[0].Healthy = false
	vs = c.Triage(nil, snap, nil)
	if c.misses != 6 || !vs[1].Fits {
		t.Fatalf("after a GPU failed: %d computations, verdicts %+v", c.misses, vs)
	}
}

func TestShapeIgnoresOrderAndDrain(t *testing.T) {
	a := &cluster.Snapshot{Nodes: issueCluster()}
	b := &cluster.Snapshot{Nodes: issueCluster()}
	b.Nodes[0], b.Nodes[2] = b.Nodes[2], b.Nodes[0]
	b.Nodes[1].Draining = true
	if Shape(a) != Shape(b) {
		t.Fatal("node order or a drain changed the shape")
	}
	b.Nodes[1].Attributes = map[string]string{"kernel.name": "windows"}
	if Shape(a) == Shape(b) {
		t.Fatal("an attribute change kept the shape")
	}
}

func BenchmarkTriage(b *testing.B) {
	var nodes []cluster.Node
	for i := 0; i < 128; i++ {
		nodes = append(nodes, node(fmt.Sprintf("n%03d", i), "ready", group{name: []string{"Tesla T4", "Tesla V100-SXM2-16GB", "NVIDIA A100-SXM4-40GB", "NVIDIA H100 80GB HBM3"}[i%4], n: 8}))
	}
	snap := &cluster.Snapshot{Nodes: nodes}
	for i := 0; i < 256; i++ {
		snap.Pending = append(snap.Pending, *job(1<<(i%5), 0, 0, func(j *cluster.Job) { j.ID = fmt.Sprint(i) }))
	}
	b.Run("cached", func(b *testing.B) {
		c := NewChecker(Options{})
		c.Triage(nil, snap, nil)
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			c.Triage(nil, snap, nil)
		}
	})
	b.Run("cold", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			NewChecker(Options{}).Triage(nil, snap, nil)
		}
	})
}

// Types names the GPU types a request could ever be placed on (constraints, the per-type
// counts and T_min), from Triage's cache.
func TestTypes(t *testing.T) {
	snap := &cluster.Snapshot{Nodes: issueCluster()}
	fast := speeds{"t4": 100, "v100": 300, "a100": 700, "h100": 1400}
	tests := []struct {
		name string
		job  *cluster.Job
		opts Options
		want []string
	}{
		{"any type", job(2, 0, 0, nil), Options{}, []string{"a100", "h100", "t4", "v100"}},
		{"8 on one node", job(8, 0, 1, nil), Options{}, []string{"v100"}},
		{"4 per node on 2 nodes", job(8, 4, 2, nil), Options{}, nil},
		{"a typed device", job(2, 0, 0, func(j *cluster.Job) { j.DeviceName = "nvidia/gpu/NVIDIA H100 80GB HBM3" }), Options{}, []string{"h100"}},
		{"T_min", job(2, 0, 0, func(j *cluster.Job) { j.Hetgpu.MinThroughput = 1000 }), Options{MinThroughput: true}, []string{"a100", "h100"}},
		{"T_min not honoured", job(2, 0, 0, func(j *cluster.Job) { j.Hetgpu.MinThroughput = 1000 }), Options{}, []string{"a100", "h100", "t4", "v100"}},
		{"invalid", job(0, 0, 0, nil), Options{}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := NewChecker(tt.opts)
			snap.Pending = []cluster.Job{*tt.job}
			c.Triage(nil, snap, fast)
			got := c.Types(nil, snap, []*cluster.Job{tt.job}, fast)
			if fmt.Sprint(got[0]) != fmt.Sprint(tt.want) {
				t.Errorf("Types = %v, want %v", got[0], tt.want)
			}
			if c.misses != 1 {
				t.Errorf("%d capacity computations; Types should read Triage's", c.misses)
			}
		})
	}
}
