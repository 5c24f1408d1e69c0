package predict

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"gonum.org/v1/gonum/mat"

	"github.com/hetgpu/hetgpu/model/cluster"
)

// TestALSRecoversLowRank fits a synthetic matrix of exactly rank 2 plus levels with a fifth
// of its cells missing: rank 2 must recover the missing cells closely, the additive model
// (rank 0) must not (the interaction is real), so the test can tell the two apart.
func TestALSRecoversLowRank(t *testing.T) {
	const nr, nc, rank = 24, 8, 2
	rng := rand.New(rand.NewPCG(3, 4))
	u, v := make([]float64, nr*rank), make([]float64, nc*rank)
	for i := range u {
		u[i] = rng.NormFloat64() * 0.5
	}
	for i := range v {
		v[i] = rng.NormFloat64() * 0.5
	}
	full := make([]float64, nr*nc)
	y := make([]float64, nr*nc)
	var hidden []int
	for i := 0; i < nr; i++ {
		for j := 0; j < nc; j++ {
			x := 1 + 0.3*float64(j) - 0.2*float64(i%5)
			for k := 0; k < rank; k++ {
				x += u[i*rank+k] * v[j*rank+k]
			}
			full[i*nc+j] = x
			y[i*nc+j] = x
			if rng.Float64() < 0.2 {
				y[i*nc+j] = math.NaN()
				hidden = append(hidden, i*nc+j)
			}
		}
	}
	ws := newALSWork()
	rmse := func(r int, lambda float64) float64 {
		m, a, uf, vf := alsFit(y, nr, nc, r, lambda, nil, ws)
		var ss float64
		for _, c := range hidden {
			i, j := c/nc, c%nc
			p := m[j] + a[i]
			for k := 0; k < r; k++ {
				p += uf[i*r+k] * vf[j*r+k]
			}
			ss += (p - full[c]) * (p - full[c])
		}
		return math.Sqrt(ss / float64(len(hidden)))
	}
	r2, r0 := rmse(2, 1e-3), rmse(0, 0)
	t.Logf("hidden %d cells: rank-2 RMSE %.4f, rank-0 RMSE %.4f", len(hidden), r2, r0)
	if r2 > 0.05 || r0 < 4*r2 {
		t.Errorf("rank-2 RMSE %.4f (want <= 0.05), rank-0 RMSE %.4f (want >= 4x rank-2's)", r2, r0)
	}
}

// TestSolveSPD3 checks the combination's in-place solve against gonum's Cholesky.
func TestSolveSPD3(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for trial := 0; trial < 50; trial++ {
		k := 1 + trial%3
		b := mat.NewDense(k, k, nil)
		for i := 0; i < k; i++ {
			for j := 0; j < k; j++ {
				b.Set(i, j, rng.NormFloat64())
			}
		}
		var s3 [3][3]float64
		sym := mat.NewSymDense(k, nil)
		for i := 0; i < k; i++ {
			for j := i; j < k; j++ {
				var x float64
				for m := 0; m < k; m++ {
					x += b.At(i, m) * b.At(j, m)
				}
				if i == j {
					x += 0.1
				}
				sym.SetSym(i, j, x)
				s3[i][j], s3[j][i] = x, x
			}
		}
		got, ok := solveSPD3(&s3, k)
		var ch mat.Cholesky
		if !ch.Factorize(sym) || !ok {
			t.Fatalf("trial %d: not positive definite (ours %v)", trial, ok)
		}
		ones := mat.NewVecDense(k, nil)
		for i := 0; i < k; i++ {
			ones.SetVec(i, 1)
		}
		var want mat.VecDense
		if err := ch.SolveVecTo(&want, ones); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < k; i++ {
			if math.Abs(got[i]-want.AtVec(i)) > 1e-9*math.Max(1, math.Abs(want.AtVec(i))) {
				t.Fatalf("trial %d: x[%d] = %v, gonum %v", trial, i, got[i], want.AtVec(i))
			}
		}
	}
	var notPD [3][3]float64
	notPD[0][0], notPD[0][1], notPD[1][0], notPD[1][1] = 1, 2, 2, 1
	if _, ok := solveSPD3(&notPD, 2); ok {
		t.Error("solveSPD3 accepted an indefinite matrix")
	}
}

// TestCombineConvex: whatever the members say, the combination lies between them (convex
// weights), is never more certain than the members' shared error allows, and leaves the
// posterior out where the job has no runs on the slot but the transfer speaks.
func TestCombineConvex(t *testing.T) {
	inf := math.Inf(1)
	tests := []struct {
		name string
		pt   p2Parts
		lo   float64
		hi   float64
	}{
		{"posterior only", p2Parts{post: 1, postVar: 0.04, trVar: inf, lrVar: inf}, 1, 1},
		{"transfer and completion", p2Parts{post: 5, postVar: 1e-4, tr: 1, trVar: 0.01, lr: 2, lrVar: 0.04, rho: 0.5, wTr: 0.8}, 1.2, 1.2},
		{"with own runs on the slot", p2Parts{post: 0, postVar: 0.01, tr: 1, trVar: 0.01, lr: 1, lrVar: 0.01, rho: 0.9, wTr: 0.5, onSlot: true}, 0, 1},
		// A correlated, much less certain member would get a negative GLS weight: dropped.
		{"correlated outlier", p2Parts{post: 3, postVar: 1, tr: 1, trVar: 0.01, lr: 1, lrVar: 0.01, rho: 0.9, wTr: 0.5, onSlot: true}, 1, 1},
		{"unrelated P1", p2Parts{post: 9, postVar: 1e-6, tr: 1, trVar: 0.01, lrVar: inf, unrelated: true, onSlot: true}, 1, 1},
	}
	for _, tt := range tests {
		y, v := tt.pt.combine()
		if y < tt.lo-1e-9 || y > tt.hi+1e-9 || !(v > 0) {
			t.Errorf("%s: combine = %v (variance %v), want within [%v, %v] and a positive variance", tt.name, y, v, tt.lo, tt.hi)
		}
	}
	// Two members with error correlation 0.9 and equal variances: no better than
	// (1+0.9)/2 of one member's variance.
	pt := p2Parts{post: 0, postVar: 0.01, tr: 0, trVar: 0.01, lrVar: inf, rho: 0.9, onSlot: true}
	if _, v := pt.combine(); v < 0.01*(1+rhoPost)/2-1e-12 {
		t.Errorf("correlated members: variance %v below %v", v, 0.01*(1+rhoPost)/2)
	}
}

// liveSetup is a predictor over the small testdata table without any job of held's model
// (so neither the catalog nor the model knows it, nor a sibling batch size), with a model
// trained without them, and held's cells.
func liveSetup(t *testing.T, held string) (*Predictor, map[[2]any]float64, Features) {
	t.Helper()
	tab := smallTable(t)
	hf, err := JobTypeFeatures(held)
	if err != nil {
		t.Fatal(err)
	}
	truth := map[[2]any]float64{}
	var train []Record
	for _, r := range SeedRecords(tab) {
		if workloadKey(r.ModelName, r.BatchSize) == workloadKey(hf.Name, hf.BatchSize) {
			truth[[2]any{r.GPUType, r.GPUs}] = r.Throughput
		}
		if normName(r.ModelName) == normName(hf.Name) {
			continue
		}
		train = append(train, r)
	}
	if len(truth) != 6 {
		t.Fatalf("%s: %d cells in the table, want 6", held, len(truth))
	}
	m, err := Train(train, TrainOptions{Seed: 1, Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	p, err := New(Options{Model: m, Seeds: train, Pairs: tab})
	if err != nil {
		t.Fatal(err)
	}
	return p, truth, hf
}

// TestLiveWorkloadGetsP2 is a workload first seen live: unknown to the catalog and the
// model, it runs a handful of times on one GPU type (through Observe, as the sidecar
// learns), after which every estimator of P2 predicts it on the types it never ran on,
// far closer to the truth than P1 alone did before the runs.
func TestLiveWorkloadGetsP2(t *testing.T) {
	p, truth, hf := liveSetup(t, "Transformer (batch size 64)")
	job := &cluster.Job{Namespace: "default", ID: "live", Group: "g",
		Hetgpu: cluster.Annotations{ModelName: hf.Name, BatchSize: hf.BatchSize}}
	targets := [][2]any{{"k80", 1}, {"k80", 2}, {"p100", 1}, {"p100", 2}}
	relErr := func(pred float64, c [2]any) float64 { return math.Abs(pred/truth[c] - 1) }
	var before float64
	for _, c := range targets {
		e := p.Predict(job, c[0].(string), c[1].(int))
		if e.Source != SrcP1 {
			t.Fatalf("before any run on %v: source %q, want %q", c, e.Source, SrcP1)
		}
		before += relErr(e.Throughput, c) / float64(len(targets))
	}
	// Four runs on the V100 (1 and 2 GPUs, twice each), 3 % apart, fewer than MinSamples
	// per slot: nothing is trusted yet, so only P2 can carry them.
	ctx := context.Background()
	for i, n := range []int{1, 2, 1, 2} {
		v := truth[[2]any{"v100", n}] * (1 + 0.03*float64(i%2*2-1))
		err := p.Observe(ctx, cluster.Observation{Namespace: "default", JobID: "live", Group: "g", ModelName: hf.Name,
			BatchSize: hf.BatchSize, GPUType: "v100", GPUs: n, Throughput: v, RuntimeS: 600, Time: time.Unix(int64(i), 0)})
		if err != nil {
			t.Fatal(err)
		}
	}
	var after float64
	for _, c := range targets {
		e := p.Predict(job, c[0].(string), c[1].(int))
		if e.Source != SrcP1P2 {
			t.Errorf("after 4 runs, on %v: source %q, want %q", c, e.Source, SrcP1P2)
		}
		comps := p.PredictComponents(hf, c[0].(string), c[1].(int))
		for _, k := range []string{CompTransfer, CompLowRank, CompPosterior} {
			if _, ok := comps[k]; !ok {
				t.Errorf("after 4 runs, on %v: no %s estimate (%v)", c, k, comps)
			}
		}
		t.Logf("%v: truth %.3f p1p2 %.3f lowrank %.3f transfer %.3f", c, truth[c], e.Throughput, comps[CompLowRank].Throughput, comps[CompTransfer].Throughput)
		after += relErr(e.Throughput, c) / float64(len(targets))
	}
	t.Logf("MAE on the types it never ran on: P1 %.3f before the runs, P1+P2 %.3f after", before, after)
	// Measured: P1 1.69 (no related workload: a population level), P1+P2 0.18.
	if !(after < before/2) || after > 0.25 {
		t.Errorf("P1+P2 after 4 runs MAE %.3f, P1 before %.3f; want under half of it and <= 0.25", after, before)
	}
}

// TestPartialRunsWeighLess: a partial run teaches less than a finished one (after a
// finished run at 50 steps/s, a second at 100 pulls the prediction less when it is
// partial), and partial runs alone never make the catalog answer for a slot.
func TestPartialRunsWeighLess(t *testing.T) {
	obs := func(v float64, partial bool, i int) cluster.Observation {
		return cluster.Observation{Namespace: "default", JobID: "j", Group: "g", ModelName: "NewNet", BatchSize: 32,
			GPUType: "v100", GPUs: 1, Throughput: v, RuntimeS: 60, Partial: partial, Time: time.Unix(int64(i), 0)}
	}
	job := &cluster.Job{Hetgpu: cluster.Annotations{ModelName: "NewNet", BatchSize: 32}}
	pull := map[bool]float64{}
	for _, partial := range []bool{false, true} {
		p, err := New(Options{})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		if err := p.ObserveAll(ctx, []cluster.Observation{obs(50, false, 0), obs(100, partial, 1)}); err != nil {
			t.Fatal(err)
		}
		e := p.Predict(job, "v100", 1)
		if e.Source != SrcP1P2 {
			t.Errorf("partial=%v: source %q after two runs, want %q", partial, e.Source, SrcP1P2)
		}
		pull[partial] = math.Log(e.Throughput / 50)
		if partial {
			for i := 2; i < 7; i++ {
				if err := p.Observe(ctx, obs(60, true, i)); err != nil {
					t.Fatal(err)
				}
			}
			if e := p.Predict(job, "v100", 1); e.Source == SrcCatalog {
				t.Errorf("one finished and six partial runs made the slot a catalog entry (%+v)", e)
			}
			if recs := p.Catalog(); len(recs) != 7 || recs[0].Partial || !recs[1].Partial {
				t.Errorf("catalog holds %d records; want 7 with the partial runs kept as partial", len(recs))
			}
		}
	}
	t.Logf("log pull of the second run (100 after 50 steps/s): finished %.3f, partial %.3f", pull[false], pull[true])
	if !(pull[true] > 0 && pull[true] < pull[false]-0.05) {
		t.Errorf("a partial second run pulled the prediction by %.3f, a finished one by %.3f; want clearly less but some", pull[true], pull[false])
	}
}
