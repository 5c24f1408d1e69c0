package policies

import (
	"context"
	"sort"

	"github.com/hetgpu/hetgpu/sidecar/sim"
)

// fifo is first-in first-out with head-of-line blocking and first-fit bin-packing: the oldest
// waiting job starts as soon as some node (any GPU type) fits it, on the fullest node that does,
// as Nomad's default bin-packing scheduler would place it; nothing overtakes a blocked job. It is
// the FIFO baseline of Gavel (OSDI 2020) and Tiresias (NSDI 2019): heterogeneity-unaware and
// non-preemptive.
type fifo struct{}

func newFIFO(Options) (sim.Policy, error) { return fifo{}, nil }

func (fifo) Name() string { return "fifo" }

func (fifo) Schedule(_ context.Context, s *sim.State) error {
	for _, j := range s.Pending() {
		p, ok := s.BestFit(j, "")
		if !ok {
			return nil
		}
		if err := s.Start(j, p); err != nil {
			return err
		}
	}
	return nil
}

// sjf is shortest-job-first with oracle runtimes (the remaining runtime on the reference GPU,
// known exactly), non-preemptive, with backfilling: jobs are tried shortest first and every one
// that fits starts. It is the classic SJF baseline (e.g. Tiresias, NSDI 2019; Gavel's
// "min total duration" family), given information no real scheduler has.
type sjf struct{}

func newSJF(Options) (sim.Policy, error) { return sjf{}, nil }

func (sjf) Name() string      { return "sjf" }
func (sjf) NeedsOracle() bool { return true }

func (sjf) Schedule(_ context.Context, s *sim.State) error {
	pend := append([]*sim.JobState(nil), s.Pending()...)
	now := s.Now()
	left := func(j *sim.JobState) float64 { return j.RefS * j.Remaining(now) / j.TotalSteps }
	sort.SliceStable(pend, func(a, b int) bool { return left(pend[a]) < left(pend[b]) })
	free := 0
	for _, f := range s.FreeGPUs() {
		free += f
	}
	for _, j := range pend {
		if free == 0 {
			break
		}
		if j.GPUs > free {
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
	}
	return nil
}
