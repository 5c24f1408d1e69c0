package baselines

import (
	"time"

	"github.com/hetgpu/hetgpu/model/cluster/clustertest"
)

var (
	t0      = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	node    = clustertest.Node
	gpuNode = clustertest.GPUNode
	job     = clustertest.Job
)
