package place

import (
	"context"
	"testing"

	"github.com/hetgpu/hetgpu/model/cluster"
	"github.com/hetgpu/hetgpu/sidecar/sched"
)

// benchRound is one random snapshot of the given size, its FIFO order and a placer.
func benchRound(b *testing.B, spec BenchSpec, cfg Config) (*cluster.Snapshot, []sched.Ranked, *PriorPredictor, *Placer) {
	snap, err := RandomSnapshot(spec)
	if err != nil {
		b.Fatal(err)
	}
	pred := NewPriorPredictor()
	ranked, pl := fifoPlacer(b, cfg, snap, pred)
	return snap, ranked, pred, pl
}

// benchPlace times Place on one random snapshot of the given size, reporting HiGHS statistics
// as custom metrics.
func benchPlace(b *testing.B, spec BenchSpec, cfg Config) {
	ctx := context.Background()
	snap, ranked, pred, pl := benchRound(b, spec, cfg)
	var st Stats
	var err error
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		_, st, err = pl.PlaceDetailed(ctx, snap, ranked, pred)
		if err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(st.Cols), "cols")
	b.ReportMetric(float64(st.Rows), "rows")
	b.ReportMetric(float64(st.MIPNodes), "mip-nodes")
	b.ReportMetric(float64(st.LPIterations), "lp-iters")
	b.ReportMetric(float64(st.Placed), "placed")
	b.ReportMetric(st.Objective, "objective")
	fb := 0.0
	if st.Fallback {
		fb = 1
	}
	b.ReportMetric(fb, "fallback")
	dl := 0.0
	if st.DeadlineHit {
		dl = 1
	}
	b.ReportMetric(dl, "deadline-hit")
	b.ReportMetric(float64(st.LPTime.Microseconds())/1000, "lp-ms")
}

// BenchmarkPlace256Jobs1024GPUs is the first target: 256 pending jobs on 128 nodes x 8 GPUs of
// 4 types, p99 under 100 ms (see hetgpu place bench for p50/p99 over many rounds).
func BenchmarkPlace256Jobs1024GPUs(b *testing.B) {
	benchPlace(b, BenchSpec{Jobs: 256, GPUs: 1024, Types: 4, Seed: 1}, Default())
}

// BenchmarkPlace1024Jobs10240GPUs is the second target: 1024 jobs on 10,240 GPUs, under 1 s.
func BenchmarkPlace1024Jobs10240GPUs(b *testing.B) {
	benchPlace(b, BenchSpec{Jobs: 1024, GPUs: 10240, Types: 4, Seed: 1}, Default())
}

func BenchmarkPlace64Jobs256GPUs(b *testing.B) {
	benchPlace(b, BenchSpec{Jobs: 64, GPUs: 256, Types: 4, Seed: 2}, Default())
}

// benchVerify times Verify on the decisions of one placement (what the pipeline checks before
// pinning), to compare with the placement's own time above.
func benchVerify(b *testing.B, spec BenchSpec) {
	snap, ranked, pred, pl := benchRound(b, spec, Default())
	ds, _, err := pl.Place(context.Background(), nil, snap, ranked, pred)
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := pl.Verify(nil, snap, ds); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(ds)), "decisions")
}

func BenchmarkVerify256Jobs1024GPUs(b *testing.B) {
	benchVerify(b, BenchSpec{Jobs: 256, GPUs: 1024, Types: 4, Seed: 1})
}

func BenchmarkVerify1024Jobs10240GPUs(b *testing.B) {
	benchVerify(b, BenchSpec{Jobs: 1024, GPUs: 10240, Types: 4, Seed: 1})
}
