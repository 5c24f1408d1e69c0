package driver

import (
	"fmt"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/hetgpu/hetgpu/internal/mpsshare"
)

// Energy of a GPU shared under MPS is split among its clients by measured utilisation:
//
//   - Each sampling interval, the task reads the GPU's per-process samples since its last
//     read (nvmlDeviceGetProcessUtilization with the last sample's timestamp). Under MPS on
//     Volta and newer, NVML lists each client process, not only the MPS server.
//   - A client's weight is the sum of SmUtil over the samples of its process tree (the
//     task's root PID and all its descendants, from /proc).
//   - The task's share is its weight over the sum of all clients' weights.
//   - When no sample belongs to any client (NVML answers NOT_SUPPORTED, NOT_FOUND because
//     nothing ran since the last read, another error, or only the MPS server's PID is
//     listed, as on pre-Volta MPS), the interval falls back to the thread-cap split
//     (energyShare: active-thread percentage over the sum of the clients' percentages).
//   - When samples belong to clients but their SmUtil sums to 0, the energy is split
//     evenly among the running clients.

// utilShare gives one slot task's fraction of its GPU's energy for each sampling interval.
type utilShare struct {
	lib    nvml.Interface
	mgr    *mpsManager
	gpu    string
	taskID string
	// tree lists a PID and its descendants.
	tree func(pid int) []int

	mu       sync.Mutex
	lastSeen uint64 // NVML timestamp (µs) of the newest sample read
}

// share implements telemetry.Sampler's share function.
func (u *utilShare) share(uuid string) (float64, bool) {
	if uuid != u.gpu {
		return 1, false
	}
	clients := u.mgr.Clients(u.gpu)
	if len(clients) < 2 {
		return 1, false
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	samples := u.samples()
	for _, s := range samples {
		u.lastSeen = max(u.lastSeen, s.TimeStamp)
	}
	if frac, ok := measuredShare(clients, u.taskID, samples, u.tree); ok {
		return frac, true
	}
	return energyShare(clients, u.taskID)
}

// samples reads the GPU's per-process samples since the last read; nil when NVML has none
// (NOT_FOUND), does not support the query or fails.
func (u *utilShare) samples() (out []nvml.ProcessUtilizationSample) {
	defer func() {
		if recover() != nil { // a mock without the query
			out = nil
		}
	}()
	dev, ret := u.lib.DeviceGetHandleByUUID(u.gpu)
	if ret != nvml.SUCCESS {
		return nil
	}
	s, ret := dev.GetProcessUtilization(u.lastSeen)
	if ret != nvml.SUCCESS {
		return nil
	}
	return s
}

// measuredShare is taskID's fraction of the energy from per-process samples: its process
// tree's summed SmUtil over all clients' (even split when that is 0). ok is false when no
// sample belongs to a client (the caller falls back to the thread caps) or the task is not a
// client.
func measuredShare(clients []mpsshare.Client, taskID string, samples []nvml.ProcessUtilizationSample, tree func(pid int) []int) (float64, bool) {
	owner := map[uint32]string{}
	listed := false
	for _, c := range clients {
		if c.TaskID == taskID {
			listed = true
		}
		if c.PID <= 0 {
			continue
		}
		for _, pid := range tree(c.PID) {
			owner[uint32(pid)] = c.TaskID
		}
	}
	if !listed {
		return 1, false
	}
	weight := map[string]float64{}
	matched := false
	for _, s := range samples {
		id, ok := owner[s.Pid]
		if !ok {
			continue // the MPS server, or a process of no slot task
		}
		matched = true
		weight[id] += float64(s.SmUtil)
	}
	if !matched {
		return 1, false
	}
	total := 0.0
	for _, w := range weight {
		total += w
	}
	if total <= 0 {
		return 1 / float64(len(clients)), true
	}
	return weight[taskID] / total, true
}

// ProcessLoadSimulator is implemented by fake NVML backends that answer per-process
// utilisation: the driver reports a slot task's process and the SM utilisation it shows.
type ProcessLoadSimulator interface {
	SetProcessLoad(uuid string, pid int, smUtil float64)
}

// setProcessLoad marks a slot task's process busy on a fake GPU (0 removes it).
func (g *gpuBackend) setProcessLoad(uuid string, pid int, smUtil float64) {
	if ps, ok := g.lib.(ProcessLoadSimulator); ok && pid > 0 {
		ps.SetProcessLoad(uuid, pid, smUtil)
	}
}

// SetPID records the root PID of a client's task (known once the task started), so its
// process tree can be matched against NVML's per-process samples.
func (m *mpsManager) SetPID(uuid, taskID string, pid int) (mpsshare.Client, error) {
	pipe, _ := m.dirs(uuid)
	for _, c := range mpsshare.Clients(pipe) {
		if c.TaskID == taskID {
			c.PID = pid
			if err := mpsshare.Register(pipe, c); err != nil {
				return c, fmt.Errorf("record PID %d of MPS client %s on GPU %s: %w", pid, taskID, uuid, err)
			}
			return c, nil
		}
	}
	return mpsshare.Client{}, nil
}

// procTree lists pid and its descendants under procRoot.
func procTree(procRoot string) func(pid int) []int {
	ps := &procStats{procRoot: procRoot}
	return func(pid int) []int {
		var out []int
		for _, st := range ps.tree(pid) {
			out = append(out, st.PID)
		}
		if len(out) == 0 {
			out = []int{pid}
		}
		return out
	}
}
