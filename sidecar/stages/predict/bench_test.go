package predict

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/hetgpu/hetgpu/model/cluster"
)

// benchPredictor is the default predictor (embedded model, bundled seeds) with a few
// observed runs of one job, so every path (catalog, P1, P1+P2, datasheet prior) is warm.
func benchPredictor(b *testing.B) (*Predictor, *cluster.Job) {
	b.Helper()
	p, err := New(Options{})
	if err != nil {
		b.Fatal(err)
	}
	job := &cluster.Job{Namespace: "default", ID: "train", Group: "g", GPUs: 2,
		Hetgpu: cluster.Annotations{ModelFamily: "resnet", ModelName: "ResNet-50", BatchSize: 48}}
	for i, g := range []string{"v100", "v100", "a100"} {
		err := p.Observe(context.Background(), cluster.Observation{Namespace: "default", JobID: "train", Group: "g",
			ModelFamily: "resnet", ModelName: "ResNet-50", BatchSize: 48, GPUType: g, GPUs: 2,
			Throughput: 9 + float64(i), AvgPowerW: 480, RuntimeS: 600, Time: time.Unix(int64(i), 0)})
		if err != nil {
			b.Fatal(err)
		}
	}
	return p, job
}

// BenchmarkPredict measures one (job, GPU type) estimate; the target is < 10 us and no
// allocation (P2's completion is read from the state, never fitted here).
func BenchmarkPredict(b *testing.B) {
	p, job := benchPredictor(b)
	newJob := &cluster.Job{Namespace: "default", ID: "new", Group: "g", Hetgpu: cluster.Annotations{ModelName: "Whisper", BatchSize: 16}}
	cases := []struct {
		name string
		job  *cluster.Job
		gpu  string
		src  string
	}{
		{"p1p2", job, "p100", SrcP1P2},
		{"p1", newJob, "v100", SrcP1},
		{"datasheet", newJob, "h100", SrcDatasheet},
		{"catalog", &cluster.Job{Hetgpu: cluster.Annotations{ModelName: "ResNet-50", BatchSize: 64}}, "v100", SrcCatalog},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			gpus := 2
			if c.src == SrcCatalog {
				gpus = 1
			}
			if e := p.Predict(c.job, c.gpu, gpus); e.Source != c.src {
				b.Fatalf("source %q, want %q", e.Source, c.src)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				p.Predict(c.job, c.gpu, gpus)
			}
		})
	}
}

// BenchmarkPredictAllTypes is what a placer does per pending job: every GPU type.
func BenchmarkPredictAllTypes(b *testing.B) {
	p, job := benchPredictor(b)
	types := []string{"k80", "p100", "v100", "t4", "a10", "l4", "a100", "h100", "h200"}
	b.ReportAllocs()
	for b.Loop() {
		for _, g := range types {
			p.Predict(job, g, 2)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(types))/1e3, "us/type")
}

// BenchmarkTrain measures training of the shipped model on the bundled table.
func BenchmarkTrain(b *testing.B) {
	p, err := New(Options{})
	if err != nil {
		b.Fatal(err)
	}
	recs := p.cat.Records()
	for b.Loop() {
		if _, err := Train(recs, TrainOptions{Seed: 1}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkObserve measures one Observe (catalog add and full state rebuild) with 40
// observed workloads (ResNet-50 at 40 batch sizes, on V100 and P100 at 1 and 2 GPUs), the
// conditional-Gaussian transfer included.
func BenchmarkObserve(b *testing.B) {
	p, _ := benchPredictor(b)
	ctx := context.Background()
	obs := func(i int) cluster.Observation {
		return cluster.Observation{Namespace: "default", JobID: "o", Group: "g", ModelFamily: "resnet", ModelName: "ResNet-50",
			BatchSize: 8 + i%40, GPUType: []string{"v100", "p100"}[i/40%2], GPUs: 1 + i/80%2, Throughput: 5 + float64(i%7),
			Time: time.Unix(int64(i), 0)}
	}
	for i := range 160 {
		if err := p.Observe(ctx, obs(i)); err != nil {
			b.Fatal(err)
		}
	}
	i := 160
	j := &cluster.Job{Hetgpu: cluster.Annotations{ModelFamily: "resnet", ModelName: "ResNet-50", BatchSize: 64}}
	for b.Loop() {
		if err := p.Observe(ctx, obs(i)); err != nil {
			b.Fatal(err)
		}
		// A run and the prediction after it, as in a decision round.
		p.Predict(j, "v100", 1)
		i++
	}
}

// BenchmarkChooseLowRank measures the completion's setting choice on the bundled catalog:
// the grouped cross-validation over every candidate rank and ridge and the validation of
// the combination. It runs once, when the predictor starts (New), never on a run.
func BenchmarkChooseLowRank(b *testing.B) {
	p, _ := benchPredictor(b)
	st := p.state.Load()
	tc := transferConst{beta: p.model.Beta, betaVar: p.model.BetaVar, countVar: countVarPerDoubling}
	b.ReportAllocs()
	for b.Loop() {
		if chooseLowRank(st.grid, st.ix.wls, st.runNoise, tc) == nil {
			b.Fatal("no completion on the bundled catalog")
		}
	}
	b.ReportMetric(float64(len(st.lr.rowWl)), "rows")
	b.ReportMetric(float64(st.lr.nc), "cols")
}

// BenchmarkObserveNewWorkload measures one Observe of a workload first seen live and the
// prediction after it on a type it never ran on: the state rebuild with the workload's
// transfer, conditional Gaussian and completion (local fit and fold-in); the target is
// < 50 ms.
func BenchmarkObserveNewWorkload(b *testing.B) {
	p, _ := benchPredictor(b)
	ctx := context.Background()
	i := 0
	for b.Loop() {
		name := "Live-" + strconv.Itoa(i%50)
		o := cluster.Observation{Namespace: "default", JobID: name, Group: "g", ModelName: name, BatchSize: 32,
			GPUType: []string{"v100", "a100"}[i%2], GPUs: 1 + i%2, Throughput: 20 + float64(i%7), RuntimeS: 600, Time: time.Unix(int64(i), 0)}
		if err := p.Observe(ctx, o); err != nil {
			b.Fatal(err)
		}
		j := &cluster.Job{Hetgpu: cluster.Annotations{ModelName: name, BatchSize: 32}}
		if e := p.Predict(j, "p100", 1); i >= 50 && e.Source != SrcP1P2 {
			b.Fatalf("source %q after runs, want %q", e.Source, SrcP1P2)
		}
		i++
	}
}
