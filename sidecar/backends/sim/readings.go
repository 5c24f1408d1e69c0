package sim

import "time"

// GPUReading is one simulated GPU's state now.
type GPUReading struct {
	// Util is the GPU's utilisation (0..1) and PowerW its draw under the cluster's power
	// model; TDPW its power limit and MemoryGiB its memory, from the datasheet.
	Util, PowerW, TDPW, MemoryGiB float64
	// Jobs is how many jobs hold the GPU (2 when two share it).
	Jobs int
}

// GPUReadings returns every GPU's reading, keyed by the instance ID snapshots use, and the
// simulated time they are for.
func (e *Engine) GPUReadings() (map[string]GPUReading, time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make(map[string]GPUReading, e.totalGPUs)
	for _, n := range e.nodes {
		for i := range n.gpus {
			s := &n.gpus[i]
			out[instanceID(n.id, i)] = GPUReading{Util: s.util, PowerW: s.powerW, TDPW: n.spec.TDPW, MemoryGiB: n.spec.MemoryGiB, Jobs: s.n}
		}
	}
	return out, e.wall(e.now)
}
