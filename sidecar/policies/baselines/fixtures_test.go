package baselines

import (
	"time"

	"github.com/hetgpu/hetgpu/model/cluster"
	"github.com/hetgpu/hetgpu/model/cluster/clustertest"
)

var (
	t0      = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	node    = clustertest.Node
	gpuNode = clustertest.GPUNode
)

// job is a one-group job of gpus GPUs, submitted len(id) seconds into 2026 (shorter IDs first).
func job(id string, gpus int) cluster.Job {
	return cluster.Job{Namespace: "default", ID: id, Group: "g", GPUs: gpus, DeviceName: "nvidia/gpu",
		SubmitTime: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(len(id)) * time.Second)}
}
