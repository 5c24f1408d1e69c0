package clustertest

import (
	"fmt"
	"time"

	"github.com/hetgpu/hetgpu/model/cluster"
)

// Node is a ready, eligible node of one device group for hand-made tests: gpus healthy
// instances named <id>-gpu<k>, two a PCIe switch, in zone (node meta "zone"), with NVLink or not.
func Node(id, typ, name, zone string, gpus int, nvlink bool) cluster.Node {
	n := cluster.Node{ID: id, Name: id, Status: "ready", Eligible: true, Meta: map[string]string{"zone": zone}}
	if nvlink {
		n.Interconnect = "nvlink"
	}
	g := cluster.DeviceGroup{Vendor: "nvidia", Type: "gpu", Name: name, GPUType: typ}
	for k := range gpus {
		g.Instances = append(g.Instances, cluster.Instance{ID: fmt.Sprintf("%s-gpu%d", id, k), Healthy: true, PCIeSwitch: fmt.Sprintf("sw%d", k/2)})
	}
	n.Devices = []cluster.DeviceGroup{g}
	return n
}

// GPUNode is a node of n instances named <id>-<k> in one device group, with status (Nomad's
// node status: ready, down, ...) and the instances at the unhealthy indices unhealthy.
func GPUNode(id, name, typ string, n int, status string, unhealthy ...int) cluster.Node {
	g := cluster.DeviceGroup{Vendor: "nvidia", Type: "gpu", Name: name, GPUType: typ}
	for i := range n {
		g.Instances = append(g.Instances, cluster.Instance{ID: fmt.Sprintf("%s-%d", id, i), Healthy: true})
	}
	for _, u := range unhealthy {
		g.Instances[u].Healthy = false
	}
	return cluster.Node{ID: id, Status: status, Eligible: true, Devices: []cluster.DeviceGroup{g}}
}

// Job is a one-group job of gpus GPUs on nvidia/gpu in namespace default, submitted len(id)
// seconds into 2026, so shorter IDs come first in submission order.
func Job(id string, gpus int) cluster.Job {
	return cluster.Job{Namespace: "default", ID: id, Group: "g", GPUs: gpus, DeviceName: "nvidia/gpu",
		SubmitTime: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(len(id)) * time.Second)}
}
