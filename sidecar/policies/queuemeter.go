package sim

import (
	"context"
	"math"
	"sort"

	"github.com/hetgpu/hetgpu/model/cluster"
	"github.com/hetgpu/hetgpu/sidecar/queue"
	"github.com/hetgpu/hetgpu/sidecar/sched"
)

// QueueResult is one queue's outcome of a run (hetgpu sim with queues).
type QueueResult struct {
	Name      string  `json:"name"`
	Weight    float64 `json:"weight"`
	Guarantee int     `json:"guarantee"`
	Jobs      int     `json:"jobs"`
	// GPUHours is what the queue's jobs held over the run; GuaranteeGPUHours the guarantee
	// times the run's span.
	GPUHours          float64 `json:"gpu_hours"`
	GuaranteeGPUHours float64 `json:"guarantee_gpu_hours"`
	// BelowGuaranteeS is the time the queue held fewer GPUs than its guarantee while it had
	// pending work the guarantee admits (a waiting job that would not take it above its
	// guarantee, queue.Admitted), after each round's decisions; BelowGuaranteePct that over the
	// span. BelowAnyS counts any pending work (jobs larger than what the guarantee has left
	// too, which start on borrowed GPUs).
	BelowGuaranteeS   float64 `json:"below_guarantee_s"`
	BelowGuaranteePct float64 `json:"below_guarantee_pct"`
	BelowAnyS         float64 `json:"below_any_s"`
	// PendingS is the time it had pending work at all.
	PendingS float64 `json:"pending_s"`
	AvgJCTS  float64 `json:"avg_jct_s"`
	// Share is GPU-hours over weight, normalised so that the queues' mean is 1.
	Share float64 `json:"share"`
}

// GangCounter is a policy that counts the gangs its rounds pinned in part.
type GangCounter interface{ PartialGangPins() int }

// PartialGangPins forwards to the wrapped policy.
func (m *QueueMeter) PartialGangPins() int {
	if g, ok := m.Policy.(GangCounter); ok {
		return g.PartialGangPins()
	}
	return 0
}

// QueueReporter is a policy that reports per-queue outcomes (Simulate fills Result.Queues).
type QueueReporter interface {
	QueueResults(r *Result) ([]QueueResult, float64)
}

// QueueMeter wraps a policy and measures its queues after every round: GPUs held and pending
// work per queue, integrated over the time until the next round (the state a round leaves
// holds until the next event).
type QueueMeter struct {
	Policy
	set *queue.Set

	last                         float64
	started                      bool
	first                        float64
	used                         map[string]int
	pending                      map[string][]int
	gpuS, belowS, anyS, pendingS map[string]float64
}

var _ QueueReporter = (*QueueMeter)(nil)

// MeterQueues wraps p.
func MeterQueues(p Policy, set *queue.Set) *QueueMeter {
	return &QueueMeter{Policy: p, set: set, used: map[string]int{}, pending: map[string][]int{},
		gpuS: map[string]float64{}, belowS: map[string]float64{}, anyS: map[string]float64{}, pendingS: map[string]float64{}}
}

// Schedule implements Policy.
func (m *QueueMeter) Schedule(ctx context.Context, s *State) error {
	m.advance(s.Now())
	if err := m.Policy.Schedule(ctx, s); err != nil {
		return err
	}
	snap, err := s.Snapshot(ctx)
	if err != nil {
		return err
	}
	m.record(snap)
	return nil
}

// advance closes the interval since the last round with the state that round left.
func (m *QueueMeter) advance(now float64) {
	if !m.started {
		m.started, m.first, m.last = true, now, now
		return
	}
	dt := now - m.last
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

// Observe forwards to the wrapped policy when it learns.
func (m *QueueMeter) Observe(ctx context.Context, obs cluster.Observation) error {
	if l, ok := m.Policy.(sched.Learner); ok {
		return l.Observe(ctx, obs)
	}
	return nil
}

// ObserveAll forwards to the wrapped policy when it learns.
func (m *QueueMeter) ObserveAll(ctx context.Context, obs []cluster.Observation) error {
	if l, ok := m.Policy.(sched.Learner); ok {
		return sched.ObserveAll(ctx, l, obs)
	}
	return nil
}

// NeedsOracle forwards to the wrapped policy.
func (m *QueueMeter) NeedsOracle() bool {
	o, ok := m.Policy.(OracleUser)
	return ok && o.NeedsOracle()
}

// QueueResults implements QueueReporter: every queue with jobs, and Jain's index over their
// shares (GPU-hours over weight).
func (m *QueueMeter) QueueResults(r *Result) ([]QueueResult, float64) {
	span := m.last - m.first
	jct, jobs := map[string]float64{}, map[string]int{}
	for _, j := range r.JobResults {
		q := m.set.QueueOf(j.Namespace)
		jct[q] += j.JCTS
		jobs[q]++
	}
	g := m.guarantees()
	var out []QueueResult
	for _, q := range m.set.Config().Queues {
		if jobs[q.Name] == 0 && m.gpuS[q.Name] == 0 {
			continue
		}
		qr := QueueResult{Name: q.Name, Weight: q.Weight, Guarantee: g[q.Name], Jobs: jobs[q.Name],
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
	return out, Jain(shares)
}

// jainOrNaN keeps JSON valid when no queue ran.
func jainOrNaN(v float64) float64 {
	if math.IsNaN(v) {
		return 0
	}
	return v
}
