package policies

import (
	"cmp"
	"context"
	"math"
	"slices"

	"github.com/hetgpu/hetgpu/sidecar/sim"
)

// tiresias is Tiresias' discretised two-dimensional least-attained-service scheduler (Gu et al.,
// "Tiresias: A GPU Cluster Manager for Distributed Deep Learning", NSDI 2019). A job's attained
// service is GPUs x time run; jobs sit in K priority queues by attained service (thresholds
// below), FIFO by arrival within a queue. Every round the highest-priority jobs that fit in the
// cluster's GPU count run and the rest are preempted (progress kept); a job that has waited
// longer than starveKnob x its total run time is promoted to the top queue (Tiresias'
// starvation knob). Placement prefers consolidation (one node, bin-packed); it is
// heterogeneity-unaware, as Tiresias is. Our parameters: queue thresholds 1 and 10 GPU-hours,
// starveKnob 8.
type tiresias struct {
	thresholds []float64 // GPU-seconds
	starveKnob float64
	lastRun    map[*sim.JobState]float64 // when each waiting job last stopped (or arrived)
	all        []tiresiasCand            // reused across rounds
}

type tiresiasCand struct {
	j    *sim.JobState
	q    int
	keep bool
}

func newTiresias(Options) (sim.Policy, error) {
	return &tiresias{thresholds: []float64{3600, 36000}, starveKnob: 8, lastRun: map[*sim.JobState]float64{}}, nil
}

func (t *tiresias) Name() string { return "tiresias" }

func (t *tiresias) queue(j *sim.JobState, now float64) int {
	a := j.Attained(now)
	q := 0
	for _, th := range t.thresholds {
		if a >= th {
			q++
		}
	}
	if j.Status == sim.StatusPending {
		since, ok := t.lastRun[j]
		if !ok {
			since = j.ArrivalS
		}
		if run := j.RunTime(now); run > 0 && now-since > t.starveKnob*run {
			q = 0
		}
	}
	return q
}

func (t *tiresias) Schedule(_ context.Context, s *sim.State) error {
	now := s.Now()
	if len(s.Pending()) == 0 {
		// Every active job runs: nothing to preempt for, and demotions only matter once someone
		// waits (an arrival or preemption brings the next round).
		s.WakeAt(math.Inf(1))
		return nil
	}
	t.all = t.all[:0]
	for _, j := range s.Running() {
		t.all = append(t.all, tiresiasCand{j: j, q: t.queue(j, now)})
	}
	for _, j := range s.Pending() {
		t.all = append(t.all, tiresiasCand{j: j, q: t.queue(j, now)})
	}
	all := t.all
	slices.SortFunc(all, func(a, b tiresiasCand) int {
		if a.q != b.q {
			return cmp.Compare(a.q, b.q)
		}
		if a.j.ArrivalS != b.j.ArrivalS {
			return cmp.Compare(a.j.ArrivalS, b.j.ArrivalS)
		}
		return cmp.Compare(a.j.Seq, b.j.Seq)
	})
	capacity := s.TotalGPUs()
	used := 0
	for i := range all {
		if used+all[i].j.GPUs <= capacity {
			all[i].keep = true
			used += all[i].j.GPUs
		}
	}
	for i := range all {
		if j := all[i].j; !all[i].keep && j.Status == sim.StatusRunning {
			if err := s.PreemptJob(j); err != nil {
				return err
			}
			t.lastRun[j] = now
		}
	}
	// Start the chosen jobs, then backfill whatever else fits (fragmentation can block a chosen
	// job while leaving room for a smaller one).
	for pass := 0; pass < 2; pass++ {
		free := 0
		for _, f := range s.FreeGPUs() {
			free += f
		}
		for i := range all {
			j := all[i].j
			if free == 0 {
				break
			}
			if j.Status != sim.StatusPending || (pass == 0 && !all[i].keep) || j.GPUs > free {
				continue
			}
			p, ok := s.BestFit(j, "")
			if !ok {
				continue
			}
			if err := s.Start(j, p); err != nil {
				return err
			}
			free -= j.GPUs
			delete(t.lastRun, j)
		}
	}
	// Wake when a running job crosses its next threshold (it may be demoted) and when a waiting
	// job would be promoted.
	next := math.Inf(1)
	for _, j := range s.Running() {
		a := j.Attained(now)
		for _, th := range t.thresholds {
			if a < th {
				next = math.Min(next, now+(th-a)/float64(j.GPUs))
				break
			}
		}
	}
	for _, j := range s.Pending() {
		if run := j.RunTime(now); run > 0 {
			since, ok := t.lastRun[j]
			if !ok {
				since = j.ArrivalS
			}
			if p := since + t.starveKnob*run; p > now {
				next = math.Min(next, p)
			}
		}
	}
	s.WakeAt(next)
	return nil
}
