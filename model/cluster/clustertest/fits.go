// Package clustertest holds test fixtures over the cluster model that several packages'
// tests share: the capacity cases every caller of cluster.Job.FitsFree is checked against, and
// hand-made nodes.
package clustertest

import (
	"fmt"

	"github.com/hetgpu/hetgpu/model/cluster"
)

// FitCase is a capacity question on ready nodes of one GPU type (A100) with Free GPUs free
// each: a job of GPUs, GPUsPerNode Per and hetgpu.max_nodes MaxNodes.
type FitCase struct {
	GPUs, Per, MaxNodes int
	Free                []int
}

// FitCases are one node holding a job or not, spans up to max_nodes, and count > 1 groups.
var FitCases = []FitCase{
	{4, 0, 0, []int{4, 2}}, {4, 0, 0, []int{3, 3}}, {4, 0, 2, []int{3, 1}}, {6, 0, 2, []int{3, 2, 1}},
	{6, 0, 3, []int{3, 2, 1}}, {4, 2, 0, []int{3, 2, 1}}, {4, 2, 0, []int{4, 1}}, {2, 2, 0, []int{2}},
	{1, 0, 0, nil},
}

// GPUType is the type of the cases' GPUs.
const GPUType = "a100"

// Snapshot is the case's cluster (nothing running) and its pending job.
func (c FitCase) Snapshot() (*cluster.Snapshot, cluster.Job) {
	snap := &cluster.Snapshot{}
	for n, k := range c.Free {
		g := cluster.DeviceGroup{Vendor: "nvidia", Type: "gpu", Name: "NVIDIA A100-SXM4-40GB", GPUType: GPUType}
		for i := range k {
			g.Instances = append(g.Instances, cluster.Instance{ID: fmt.Sprintf("n%d-%d", n, i), Healthy: true})
		}
		snap.Nodes = append(snap.Nodes, cluster.Node{ID: fmt.Sprintf("n%d", n), Name: fmt.Sprintf("n%d", n), Status: "ready",
			Eligible: true, Devices: []cluster.DeviceGroup{g}})
	}
	j := cluster.Job{Namespace: "default", ID: "j", Group: "g", GPUs: c.GPUs, GPUsPerNode: c.Per, DeviceName: "nvidia/gpu",
		Hetgpu: cluster.Annotations{MaxNodes: c.MaxNodes}}
	return snap, j
}

// String names the case in a test's failure.
func (c FitCase) String() string {
	return fmt.Sprintf("%d GPUs (%d per node, max_nodes %d) on free %v", c.GPUs, c.Per, c.MaxNodes, c.Free)
}
