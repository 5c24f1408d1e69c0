package predict

import (
	"context"
	"errors"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hetgpu/hetgpu/model/cluster"
	"github.com/hetgpu/hetgpu/model/gpuspec"
	"github.com/hetgpu/hetgpu/model/throughput"
)

func defaultPredictor(t testing.TB) *Predictor {
	t.Helper()
	p, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func job(name string, batch int) *cluster.Job {
	return &cluster.Job{Namespace: "default", ID: "j-" + name, Group: "train",
		Hetgpu: cluster.Annotations{ModelName: name, BatchSize: batch}}
}

func TestPredictSources(t *testing.T) {
	p := defaultPredictor(t)
	tab, err := throughput.Bundled()
	if err != nil {
		t.Fatal(err)
	}
	gavel, _ := tab.Measured("ResNet-50 (batch size 64)", "v100", 1)
	cases := []struct {
		name string
		job  *cluster.Job
		gpu  string
		gpus int
		src  string
		want float64 // exact throughput when > 0
	}{
		{"bundled measurement", job("ResNet-50", 64), "v100", 1, SrcCatalog, gavel},
		{"product name", job("ResNet-50", 64), "Tesla V100-SXM2-16GB", 1, SrcCatalog, gavel},
		{"case-insensitive name", job("resnet-50", 64), "v100", 1, SrcCatalog, gavel},
		{"seeded job on an unmeasured type", job("ResNet-50", 64), "t4", 1, SrcP1P2, 0},
		{"seeded job at an unmeasured count", job("A3C", 0), "v100", 4, SrcP1P2, 0},
		{"new job", job("Whisper", 16), "v100", 2, SrcP1, 0},
		{"new job, type never measured", job("Whisper", 16), "h100", 2, SrcDatasheet, 0},
		{"job without a model name", &cluster.Job{Namespace: "n", ID: "x", Group: "g"}, "a100", 1, SrcP1, 0},
		{"unknown GPU", job("ResNet-50", 64), "tpu-v5", 1, SrcUnknown, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := p.Predict(c.job, c.gpu, c.gpus)
			if e.Source != c.src {
				t.Fatalf("source %q, want %q (%+v)", e.Source, c.src, e)
			}
			switch {
			case c.src == SrcUnknown:
				if e.Throughput != 0 {
					t.Errorf("throughput %v for an unknown GPU, want 0", e.Throughput)
				}
			case c.want > 0:
				if e.Throughput != c.want {
					t.Errorf("throughput %v, want the measured %v", e.Throughput, c.want)
				}
			default:
				if !(e.Throughput > 0) || math.IsInf(e.Throughput, 0) || !(e.Uncertainty > 0) || !(e.PowerW > 0) {
					t.Errorf("estimate %+v, want positive throughput, power and uncertainty", e)
				}
			}
		})
	}
}

// TestColdStartOrdersTypes: for a seeded job, the datasheet prior ranks newer types above
// older ones.
func TestColdStartOrdersTypes(t *testing.T) {
	p := defaultPredictor(t)
	j := job("Transformer", 64)
	v100 := p.Predict(j, "v100", 1).Throughput
	h100 := p.Predict(j, "h100", 1)
	if h100.Source != SrcP1P2 || !(h100.Throughput > v100) {
		t.Errorf("H100 %+v, want a p1p2 estimate above the V100's %v", h100, v100)
	}
	if h200 := p.Predict(j, "h200", 1).Throughput; !(h200 >= h100.Throughput) {
		t.Errorf("H200 %v < H100 %v", h200, h100.Throughput)
	}
}

// smallPredictor trains on the small synthetic table and serves from it.
func smallPredictor(t testing.TB, opts Options) *Predictor {
	t.Helper()
	tab := smallTable(t)
	m, err := Train(SeedRecords(tab), TrainOptions{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	opts.Model, opts.Seeds, opts.Pairs = m, SeedRecords(tab), tab
	p, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func obs(name string, batch int, gpu string, gpus int, thr, power float64, at int) cluster.Observation {
	return cluster.Observation{Namespace: "default", JobID: "j-" + name, Group: "train", ModelName: name, BatchSize: batch,
		GPUType: gpu, GPUs: gpus, Throughput: thr, AvgPowerW: power, RuntimeS: 100, Time: time.Unix(int64(at), 0)}
}

// TestObserveImprovesOtherTypes: a new model runs 1.6x faster than the most similar one
// everywhere; runs on K80 and P100 must move its V100 estimate towards the truth (P2's
// cross-type transfer), and enough runs on a slot make the catalog answer for it.
func TestObserveImprovesOtherTypes(t *testing.T) {
	p := smallPredictor(t, Options{})
	tab := smallTable(t)
	truth := func(g string, n int) float64 {
		v, ok := tab.Measured("ResNet-18 (batch size 64)", g, n)
		if !ok {
			t.Fatalf("small table lacks ResNet-18 (batch size 64) on %s x%d", g, n)
		}
		return 1.6 * v
	}
	j := &cluster.Job{Namespace: "default", ID: "j-ResNet-34", Group: "train",
		Hetgpu: cluster.Annotations{ModelFamily: "resnet", ModelName: "ResNet-34", BatchSize: 64}}
	before := p.Predict(j, "v100", 1)
	errBefore := relErr(before.Throughput, truth("v100", 1))
	ctx := context.Background()
	at := 0
	for _, g := range []string{"k80", "p100"} {
		for _, n := range []int{1, 2} {
			at++
			if err := p.Observe(ctx, obs("ResNet-34", 64, g, n, truth(g, n), 0, at)); err != nil {
				t.Fatal(err)
			}
		}
	}
	after := p.Predict(j, "v100", 1)
	errAfter := relErr(after.Throughput, truth("v100", 1))
	t.Logf("V100 estimate: %.3f (%s, err %.3f) before, %.3f (%s, err %.3f) after runs on K80 and P100; truth %.3f",
		before.Throughput, before.Source, errBefore, after.Throughput, after.Source, errAfter, truth("v100", 1))
	if after.Source != SrcP1P2 || !(errAfter < errBefore/2) || errAfter > 0.15 {
		t.Errorf("after observing other types: %+v, error %.3f (before %.3f); want p1p2 with at most half the error and <= 15 %%", after, errAfter, errBefore)
	}
	if !(after.Uncertainty < before.Uncertainty) {
		t.Errorf("uncertainty %v after runs, not below %v before", after.Uncertainty, before.Uncertainty)
	}

	// Trust threshold: two runs on a slot leave it to P1+P2, the third makes it the catalog's.
	for i, want := range []string{SrcP1P2, SrcP1P2, SrcCatalog} {
		at++
		if err := p.Observe(ctx, obs("ResNet-34", 64, "v100", 2, 20+float64(i), 0, at)); err != nil {
			t.Fatal(err)
		}
		e := p.Predict(j, "v100", 2)
		if e.Source != want {
			t.Errorf("after %d runs on v100 x2: source %s, want %s", i+1, e.Source, want)
		}
		if want == SrcCatalog && math.Abs(e.Throughput-math.Exp((math.Log(20)+math.Log(21)+math.Log(22))/3)) > 1e-9 {
			t.Errorf("catalog estimate %v, want the geometric mean of 20, 21, 22", e.Throughput)
		}
	}
}

func TestPower(t *testing.T) {
	p := smallPredictor(t, Options{})
	j := job("NewNet", 32)
	// V100 datasheet: idle (22 + 47) / 2 = 34.5 W, TDP 300 W; 2 GPUs at 90 % utilisation:
	// 2 x (34.5 + 265.5 x 0.9^0.7) = 2 x (34.5 + 265.5 x 0.928902) = 562.2468 W.
	const prior = 562.2468
	if got := p.Predict(j, "v100", 2).PowerW; math.Abs(got-prior) > 1e-3 {
		t.Errorf("prior power %v W, want %v W (2 GPUs at 90 %% utilisation)", got, prior)
	}
	// The prior is gpuspec's curve itself (Spec.Power at BusyUtil), not a copy of it.
	if sp, ok := p.specs.Lookup("v100"); !ok || math.Abs(p.Predict(j, "v100", 2).PowerW-2*sp.Power(gpuspec.BusyUtil, gpuspec.PowerAlpha)) > 1e-9 {
		t.Errorf("prior power %v W, want 2 x gpuspec Spec.Power(BusyUtil, PowerAlpha) = %v W", p.Predict(j, "v100", 2).PowerW, 2*sp.Power(gpuspec.BusyUtil, gpuspec.PowerAlpha))
	}
	a100Before := p.Predict(j, "a100", 1).PowerW
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		if err := p.Observe(ctx, obs("NewNet", 32, "v100", 2, 10, 2*150, i)); err != nil {
			t.Fatal(err)
		}
	}
	got := p.Predict(j, "v100", 2).PowerW
	// Three runs measured at 300 W on 2 GPUs (150 W each) are trusted as they are.
	const wantDirect = 300.0
	if math.Abs(got-wantDirect) > 1e-6 {
		t.Errorf("power after 3 runs at 300 W: %v W, want the measured %v W", got, wantDirect)
	}
	// The job draws less than the prior on V100, so its A100 estimate drops too.
	if a100 := p.Predict(j, "a100", 1).PowerW; !(a100 < a100Before) {
		t.Errorf("A100 power %v W after low V100 readings, want below %v W", a100, a100Before)
	}
	// Other jobs on V100 move towards the measured load only through the type's pooled fit.
	other := p.Predict(job("OtherNet", 32), "v100", 2).PowerW
	if !(other < prior && other > got) {
		t.Errorf("other job's V100 power %v W, want between the measurement %v and the prior %v", other, got, prior)
	}
}

func TestObserveRejects(t *testing.T) {
	p := smallPredictor(t, Options{})
	cases := []struct {
		name string
		o    cluster.Observation
		want string
	}{
		{"gpu type", obs("X", 8, "tpu", 1, 5, 0, 1), "gpu_type"},
		{"gpus", obs("X", 8, "v100", 0, 5, 0, 1), "field gpus = 0"},
		{"throughput", obs("X", 8, "v100", 1, math.NaN(), 0, 1), "field throughput"},
		{"negative power", obs("X", 8, "v100", 1, 5, -3, 1), "field avg_power_w"},
	}
	for _, c := range cases {
		if err := p.Observe(context.Background(), c.o); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Observe error %v, want one naming %q", c.name, err, c.want)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := p.Observe(ctx, obs("X", 8, "v100", 1, 5, 0, 1)); !errors.Is(err, context.Canceled) {
		t.Errorf("Observe on a cancelled context: %v", err)
	}
	if n := len(p.Catalog()); n != 0 {
		t.Errorf("catalog holds %d records after rejected observations", n)
	}
}

// TestPredictConcurrent exercises lock-free reads against Observe (meaningful under -race).
func TestPredictConcurrent(t *testing.T) {
	p := smallPredictor(t, Options{})
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				if e := p.Predict(job("ResNet-18", 48), "v100", 1+i%2); !(e.Throughput > 0) {
					t.Errorf("estimate %+v", e)
					return
				}
			}
		}()
	}
	for i := 0; i < 5; i++ {
		if err := p.Observe(context.Background(), obs("ResNet-18", 48, "p100", 1, 30, 0, i)); err != nil {
			t.Error(err)
		}
	}
	wg.Wait()
}

func TestColocated(t *testing.T) {
	p := defaultPredictor(t)
	tab, err := throughput.Bundled()
	if err != nil {
		t.Fatal(err)
	}
	const a, b = "ResNet-18 (batch size 32)", "LM (batch size 20)"
	ta, tb, ok := tab.Colocated("v100", a, 1, b, 1)
	ia, _ := tab.Measured(a, "v100", 1)
	ib, _ := tab.Measured(b, "v100", 1)
	if !ok {
		t.Fatal("bundled table lacks the pair")
	}
	fa, fb := Features{Name: "ResNet-18", BatchSize: 32}, Features{Name: "LM", BatchSize: 20}
	ra, rb, src := p.Colocated(fa, fb, "v100")
	if src != SrcColocMeasured || math.Abs(ra-ta/ia) > 1e-12 || math.Abs(rb-tb/ib) > 1e-12 {
		t.Errorf("measured pair: %v, %v (%s); want %v, %v measured", ra, rb, src, ta/ia, tb/ib)
	}
	if rb2, ra2, _ := p.Colocated(fb, fa, "v100"); rb2 != rb || ra2 != ra {
		t.Errorf("swapped pair: %v, %v; want %v, %v", rb2, ra2, rb, ra)
	}
	for _, g := range []string{"v100", "h100"} {
		ra, rb, src := p.Colocated(Features{Name: "ResNet-34", BatchSize: 32}, Features{Name: "Whisper", BatchSize: 8}, g)
		if src != SrcColocKNN || !(ra > 0 && ra <= 1.5 && rb > 0 && rb <= 1.5) {
			t.Errorf("%s, unmeasured pair: %v, %v (%s); want knn ratios in (0, 1.5]", g, ra, rb, src)
		}
	}
}

func TestFamily(t *testing.T) {
	cases := []struct {
		f    Features
		want string
	}{
		{Features{Name: "ResNet-50"}, "resnet"},
		{Features{Name: "ResNet-50 CIFAR-10"}, "resnet"},
		{Features{Name: "DeepSpeech2"}, "deepspeech"},
		{Features{Name: "A3C"}, "a3c"},
		{Features{Name: "LM"}, "lm"},
		{Features{Name: "whatever", Family: "Vision"}, "vision"},
		{Features{Name: "  GPT-2 "}, "gpt"},
	}
	for _, c := range cases {
		if got := c.f.family(); got != c.want {
			t.Errorf("family(%+v) = %q, want %q", c.f, got, c.want)
		}
	}
	q := newWorkload(Features{Name: "ResNet-50", BatchSize: 64})
	sameName := newWorkload(Features{Name: "resnet-50", BatchSize: 128})
	sameFamily := newWorkload(Features{Name: "ResNet-18", BatchSize: 64})
	other := newWorkload(Features{Name: "LM", BatchSize: 64})
	if !(distance(&q, &sameName) < distance(&q, &sameFamily) && distance(&q, &sameFamily) < distance(&q, &other)) {
		t.Errorf("distances same name %v, same family %v, other %v; want increasing",
			distance(&q, &sameName), distance(&q, &sameFamily), distance(&q, &other))
	}
}

func TestJobTypeFeatures(t *testing.T) {
	f, err := JobTypeFeatures("Transformer (batch size 128)")
	if err != nil || f.Name != "Transformer" || f.BatchSize != 128 {
		t.Errorf("JobTypeFeatures = %+v, %v", f, err)
	}
	if _, err := JobTypeFeatures("Transformer (batch 128)"); err == nil {
		t.Error("JobTypeFeatures accepted a malformed job type")
	}
}

// TestRebuildReusesUnchangedTransfers: a rebuild keeps the transfers of workloads whose
// evidence did not change, and the result equals a rebuild from nothing, bit for bit, after
// runs on new slots (reused), repeated runs (new run noise: all recomputed), a new workload
// (new kernel weights) and a slot becoming trusted (a new grid: all recomputed).
func TestRebuildReusesUnchangedTransfers(t *testing.T) {
	p := smallPredictor(t, Options{})
	ctx := context.Background()
	runs := []cluster.Observation{
		obs("ResNet-18", 64, "h100", 1, 40, 500, 1),  // new slot of a seeded workload
		obs("ResNet-18", 64, "a100", 2, 60, 700, 2),  // another
		obs("ResNet-18", 64, "h100", 1, 42, 510, 3),  // repeated: run noise changes
		obs("ResNet-34", 64, "k80", 1, 3, 150, 4),    // a workload new to the catalog
		obs("ResNet-34", 64, "v100", 4, 30, 1000, 5), // its second slot
		obs("ResNet-34", 64, "v100", 4, 30, 1000, 6),
		obs("ResNet-18", 64, "h100", 1, 41, 505, 7), // third run: the slot is trusted, the grid changes
	}
	var queries []*cluster.Job
	for _, r := range p.Catalog() {
		queries = append(queries, job(r.ModelName, r.BatchSize))
	}
	for _, r := range SeedRecords(smallTable(t)) {
		queries = append(queries, job(r.ModelName, r.BatchSize))
	}
	queries = append(queries, job("ResNet-34", 64), job("ResNet-34", 128))
	types := []string{"k80", "p100", "v100", "t4", "a100", "h100"}
	reused := 0
	for i, o := range runs {
		before := p.current()
		if err := p.Observe(ctx, o); err != nil {
			t.Fatal(err)
		}
		after := p.current()
		for id, tr := range after.tr {
			if old := before.tr[id]; len(old) > 0 && len(tr) > 0 && &old[0] == &tr[0] {
				reused++
			}
		}
		// A build with no previous state to reuse.
		p.mu.Lock()
		prev := p.state.Swap(nil)
		full := p.build(p.cat.Records())
		p.state.Store(prev)
		p.mu.Unlock()
		for _, j := range queries {
			for _, g := range types {
				for _, n := range []int{1, 2, 4} {
					r := j.Hetgpu
					k := cacheKey{f: Features{Name: r.ModelName, BatchSize: r.BatchSize}}
					ps := new(predScratch)
					a := p.estimate(after, &after.resolve(k).wl, after.resolve(k).id, g, n, ps)
					b := p.estimate(full, &full.resolve(k).wl, full.resolve(k).id, g, n, ps)
					if a != b {
						t.Fatalf("after run %d: %s on %s x%d: incremental %+v, full %+v", i+1, r.ModelName, g, n, a, b)
					}
				}
			}
		}
	}
	if reused == 0 {
		t.Error("no rebuild reused a transfer")
	}
	t.Logf("%d transfers reused over %d runs", reused, len(runs))
}

func relErr(pred, truth float64) float64 { return math.Abs(pred-truth) / truth }
