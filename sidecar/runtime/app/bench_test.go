package app

import (
	"context"
	"sort"
	"testing"
	"time"

	"github.com/hetgpu/hetgpu/model/throughput/throughputtest"
	"github.com/hetgpu/hetgpu/sidecar/backends/sim"
	"github.com/hetgpu/hetgpu/sidecar/backends/sim/simtest"
	"github.com/hetgpu/hetgpu/sidecar/runtime/service"
)

// BenchmarkDecisionRound is one sidecar decision round with the production stages (learned
// ranker, GOGH predictor, MILP placer) on the simulated backend: 256 pending jobs on 1,024
// GPUs (modern-mix x16: T4, A10, A100, H100) that already run 256 jobs. It reports the
// pipeline's latency from snapshot to pins issued (p50, p99; target p99 < 250 ms) and the
// whole service round including maintenance and recording (round-p99-ms).
func BenchmarkDecisionRound(b *testing.B) {
	spec, tab := simtest.Spec(b, "modern-mix:scale=16"), throughputtest.Bundled(b)
	tr := simtest.Trace(b, "synthetic:jobs=512,rate=60,seed=7,multigpu=true", 7)
	for i := range tr.Jobs {
		// The first half arrives at 0 and fills the cluster; the measured round sees the
		// second half, all pending at once.
		tr.Jobs[i].ArrivalS = float64(i / 256)
		if i < 256 {
			tr.Jobs[i].TotalSteps *= 1000 // keep them running
		}
	}
	stages, st := defaultStages(b)
	ctx := context.Background()
	var pipeline, rounds []time.Duration
	pending, pinned := 0, 0
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		e, err := sim.New(sim.Config{Spec: spec, Throughput: tab, NoSeries: true})
		if err != nil {
			b.Fatal(err)
		}
		if err := e.Submit(tr.Jobs...); err != nil {
			b.Fatal(err)
		}
		be := WrapEngine(e, 1, 0, nil)
		svc, err := service.New(service.Config{BackendName: "simulated"}, be, stages, st)
		if err != nil {
			b.Fatal(err)
		}
		e.AdvanceTo(0)
		if _, err := svc.Round(ctx); err != nil {
			b.Fatal(err)
		}
		e.AdvanceTo(1)
		snap, _ := be.Snapshot(ctx)
		pending = len(snap.Pending)
		b.StartTimer()
		t0 := time.Now()
		r, err := svc.Round(ctx)
		if err != nil {
			b.Fatal(err)
		}
		rounds = append(rounds, time.Since(t0))
		pipeline = append(pipeline, r.Latency)
		pinned = len(r.Pins)
	}
	b.StopTimer()
	q := func(ds []time.Duration, p float64) float64 {
		s := append([]time.Duration(nil), ds...)
		sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
		k := int(p*float64(len(s)-1) + 0.5)
		return float64(s[k]) / float64(time.Millisecond)
	}
	b.ReportMetric(q(pipeline, 0.5), "p50-ms")
	b.ReportMetric(q(pipeline, 0.99), "p99-ms")
	b.ReportMetric(q(rounds, 0.99), "round-p99-ms")
	b.ReportMetric(float64(pending), "pending")
	b.ReportMetric(float64(pinned), "pins")
	b.ReportMetric(float64(spec.TotalGPUs()), "gpus")
}
