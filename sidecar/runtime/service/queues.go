package service

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/hetgpu/hetgpu/sidecar/stages/queue"
)

// QueuesView is GET /v1/queues: every queue as of the last round.
type QueuesView struct {
	Round  uint64         `json:"round"`
	Queues []queue.Status `json:"queues"`
	// Enabled is false when no queue is configured (every namespace in the default queue and
	// nothing capped).
	Enabled bool `json:"enabled"`
}

// Queues reports the queues as of the last round's snapshot.
func (s *Service) Queues() QueuesView {
	s.mu.RLock()
	snap, round := s.lastSnap, s.round
	s.mu.RUnlock()
	v := QueuesView{Round: round, Queues: []queue.Status{}, Enabled: s.stages.Queues != nil}
	if s.stages.Queues == nil || snap == nil {
		return v
	}
	if qs, ok := s.stages.Queues.(*queue.Set); ok {
		v.Queues = qs.Status(snap)
	}
	return v
}

// queueCollector exports the queues at every scrape, from the last round's snapshot.
type queueCollector struct {
	s                                       *Service
	usage, borrowed, pending, pendingGPUs   *prometheus.Desc
	guarantee, max, gpuHours, share, weight *prometheus.Desc
}

func newQueueCollector(s *Service) *queueCollector {
	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc("hetgpu_queue_"+name, help, []string{"queue"}, nil)
	}
	return &queueCollector{s: s,
		usage:       d("usage_gpus", "GPUs the queue's running allocations hold, as of the last round."),
		borrowed:    d("borrowed_gpus", "GPUs the queue holds beyond its guarantee (reclaimable when preemptible)."),
		pending:     d("pending_jobs", "Task groups of the queue waiting for a decision."),
		pendingGPUs: d("pending_gpus", "GPUs the queue's waiting task groups ask for."),
		guarantee:   d("guarantee_gpus", "The queue's guaranteed GPUs (configured)."),
		max:         d("max_gpus", "The queue's maximum GPUs (configured; 0 = none)."),
		gpuHours:    d("decayed_gpu_hours", "The queue's GPU-hours, decayed with the configured half-life."),
		share:       d("fair_share", "The queue's decayed usage share over its entitlement (1 = its fair share)."),
		weight:      d("weight", "The queue's weight (configured)."),
	}
}

func (c *queueCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.usage, c.borrowed, c.pending, c.pendingGPUs, c.guarantee, c.max, c.gpuHours, c.share, c.weight} {
		ch <- d
	}
}

func (c *queueCollector) Collect(ch chan<- prometheus.Metric) {
	for _, q := range c.s.Queues().Queues {
		for d, v := range map[*prometheus.Desc]float64{c.usage: float64(q.UsageGPUs), c.borrowed: float64(q.BorrowedGPUs),
			c.pending: float64(q.PendingJobs), c.pendingGPUs: float64(q.PendingGPUs), c.guarantee: float64(q.Guarantee),
			c.max: float64(q.Max), c.gpuHours: q.GPUHours, c.share: q.Share, c.weight: q.Weight} {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, q.Name)
		}
	}
}
