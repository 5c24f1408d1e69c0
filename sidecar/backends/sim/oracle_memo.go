package sim

import (
	"sync"

	"github.com/hetgpu/hetgpu/model/cluster"
	"github.com/hetgpu/hetgpu/sidecar/sched"
)

// Memoized returns p answering from a memo of its own answers: the table is fixed, so an
// answer depends only on the job's model, batch size, the GPU type and count and whether the
// job spans nodes. Copies of the result share the memo (safe for concurrent use).
func (p TablePredictor) Memoized() TablePredictor {
	p.memo = &estimateMemo{m: map[memoKey]sched.Estimate{}}
	return p
}

type memoKey struct {
	model   string
	batch   int
	gpuType string
	gpus    int
	spread  bool
}

type estimateMemo struct {
	mu sync.Mutex
	m  map[memoKey]sched.Estimate
}

// get returns the memoised answer for the job's key, computing it with f (spread: the job
// spans two or more nodes, and f is called with 2 of them: the answer does not depend on how
// many).
func (m *estimateMemo) get(job *cluster.Job, gpuType string, gpus int, spread bool,
	f func(*cluster.Job, string, int, int) sched.Estimate) sched.Estimate {
	k := memoKey{job.Hetgpu.ModelName, job.Hetgpu.BatchSize, gpuType, gpus, spread}
	m.mu.Lock()
	e, ok := m.m[k]
	m.mu.Unlock()
	if ok {
		return e
	}
	nodes := 1
	if spread {
		nodes = 2
	}
	e = f(job, gpuType, gpus, nodes)
	m.mu.Lock()
	m.m[k] = e
	m.mu.Unlock()
	return e
}
