package sim_test

import (
	"context"
	"testing"

	"github.com/hetgpu/hetgpu/sidecar/backends/sim"
	"github.com/hetgpu/hetgpu/sidecar/backends/sim/simtest"
)

func benchRun(b *testing.B, clusterRef, traceRef string, policy string) {
	s, tr := simtest.Spec(b, clusterRef), simtest.Trace(b, traceRef, 1)
	b.ResetTimer()
	var r *sim.Result
	for i := 0; i < b.N; i++ {
		var err error
		r, err = sim.Simulate(context.Background(), sim.Setup{Spec: s, Throughput: table(b), Trace: tr, NoSeries: true, RestartPenaltyS: 30},
			newPolicy(b, policy, s), nil)
		if err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(r.Jobs), "jobs")
	b.ReportMetric(r.AvgJCTS/3600, "avg_jct_h")
	b.ReportMetric(r.GPUUtil, "gpu_util")
}

// The 15,264-job Philly-derived Gavel trace on gavel-108 with FIFO (target: < 5 s).
func BenchmarkPhilly15kGavel108FIFO(b *testing.B) {
	benchRun(b, "gavel-108", "bundled:philly-15k", "fifo")
}

// 100k synthetic jobs (Gavel's recipe) on 1,024 GPUs (modern-mix x16) with the heuristic
// baselines (target: < 60 s each).
func BenchmarkSynthetic100k1024GPUs(b *testing.B) {
	for _, p := range []string{"fifo", "sjf", "tiresias"} {
		b.Run(p, func(b *testing.B) {
			benchRun(b, "modern-mix:scale=16", "synthetic:jobs=100000,rate=52,seed=1", p)
		})
	}
}

// Gavel (baselines.Gavel through the pipeline) on make run's cluster and trace.
func BenchmarkGavelModernMix(b *testing.B) {
	benchRun(b, "modern-mix", "bundled:default", "gavel")
}
