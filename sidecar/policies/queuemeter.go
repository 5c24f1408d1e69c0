package policies

import (
	"math"
	"sort"
	"time"

	"github.com/hetgpu/hetgpu/model/cluster"
	"github.com/hetgpu/hetgpu/sidecar/backends/sim"
	"github.com/hetgpu/hetgpu/sidecar/stages/queue"
)

// QueueMeter measures a simulated run's queues after every round (sim.Meter): GPUs held and
// pending work per queue, integrated over the time until the next round (the state a round
// leaves holds until the next event). It is evaluation, outside the simulator backend.
type QueueMeter struct {
	set *queue.Set

	last                         time.Time
	started                      bool
	first                        time.Time
	used                         map[string]int
	pending                      map[string][]int
	gpuS, belowS, anyS, pendingS map[string]float64
}

var _ sim.Meter = (*QueueMeter)(nil)

// MeterQueues measures set's queues.
func MeterQueues(set *queue.Set) *QueueMeter {
	return &QueueMeter{set: set, used: map[string]int{}, pending: map[string][]int{},
		gpuS: map[string]float64{}, belowS: map[string]float64{}, anyS: map[string]float64{}, pendingS: map[string]float64{}}
}

// Measure implements sim.Meter: the interval since the last round closes with the state that
// round left, and the state this one left is recorded.
func (m *QueueMeter) Measure(snap *cluster.Snapshot) {
	m.advance(snap.Now)
	m.record(snap)
}

// advance closes the interval since the last round with the state that round left.
func (m *QueueMeter) advance(now time.Time) {
	if !m.started {
		m.started, m.first, m.last = true, now, now
		return
	}
	dt := now.Sub(m.last).Seconds()
	if dt <= 0 {
		return
	}
	g := m.guarantees()
	for q, n := range m.used {
		m.gpuS[q] += float64(n) * dt
	}
	for q, p := range m.pending {
		if len(p) == 0 {
			continue
		}
		m.pendingS[q] += dt
		if m.used[q] < g[q] {
			m.anyS[q] += dt
			if queue.Admitted(p, m.used[q], g[q]) > 0 {
				m.belowS[q] += dt
			}
		}
	}
	m.last = now
}

func (m *QueueMeter) guarantees() map[string]int {
	out := map[string]int{}
	for _, q := range m.set.Config().Queues {
		out[q.Name] = q.Total()
	}
	return out
}

func (m *QueueMeter) record(snap *cluster.Snapshot) {
	clear(m.used)
	clear(m.pending)
	for _, a := range snap.Running {
		m.used[m.set.QueueOf(a.Namespace)] += len(a.DeviceIDs)
	}
	for _, j := range snap.Pending {
		q := m.set.QueueOf(j.Namespace)
		m.pending[q] = append(m.pending[q], j.GPUs)
	}
}

// Report implements sim.Meter.
func (m *QueueMeter) Report(r *sim.Result) {
	var jain float64
	r.Queues, jain = m.QueueResults(r)
	r.QueueJain = jainOrNaN(jain)
}

// QueueResults is every queue with jobs, and Jain's index over their shares (GPU-hours over
// weight).
func (m *QueueMeter) QueueResults(r *sim.Result) ([]sim.QueueResult, float64) {
	span := m.last.Sub(m.first).Seconds()
	jct, jobs := map[string]float64{}, map[string]int{}
	for _, j := range r.JobResults {
		q := m.set.QueueOf(j.Namespace)
		jct[q] += j.JCTS
		jobs[q]++
	}
	g := m.guarantees()
	var out []sim.QueueResult
	for _, q := range m.set.Config().Queues {
		if jobs[q.Name] == 0 && m.gpuS[q.Name] == 0 {
			continue
		}
		qr := sim.QueueResult{Name: q.Name, Weight: q.Weight, Guarantee: g[q.Name], Jobs: jobs[q.Name],
			GPUHours: m.gpuS[q.Name] / 3600, GuaranteeGPUHours: float64(g[q.Name]) * span / 3600,
			BelowGuaranteeS: m.belowS[q.Name], BelowAnyS: m.anyS[q.Name], PendingS: m.pendingS[q.Name]}
		if span > 0 {
			qr.BelowGuaranteePct = 100 * m.belowS[q.Name] / span
		}
		if jobs[q.Name] > 0 {
			qr.AvgJCTS = jct[q.Name] / float64(jobs[q.Name])
		}
		out = append(out, qr)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Name < out[b].Name })
	shares := make([]float64, len(out))
	mean := 0.0
	for i, q := range out {
		shares[i] = q.GPUHours / q.Weight
		mean += shares[i]
	}
	if len(out) > 0 && mean > 0 {
		mean /= float64(len(out))
		for i := range out {
			out[i].Share = shares[i] / mean
		}
	}
	return out, sim.Jain(shares)
}

// jainOrNaN keeps JSON valid when no queue ran.
func jainOrNaN(v float64) float64 {
	if math.IsNaN(v) {
		return 0
	}
	return v
}
