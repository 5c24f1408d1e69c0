package predict

import (
	"context"
	"math"
	"testing"
)

// Shared runs naming their co-runner replace the predicted side of the pair with what was
// observed: the run's throughput over the isolated prediction (geometric mean over runs).
func TestObservedPairRefinesColocation(t *testing.T) {
	p := defaultPredictor(t)
	ctx := context.Background()
	fa, fb := Features{Name: "ResNet-34", BatchSize: 32}, Features{Name: "Whisper", BatchSize: 8}
	ra0, rb0, src0 := p.Colocated(fa, fb, "a100")
	if src0 == SrcColocObserved {
		t.Fatalf("source before any shared run = %s", src0)
	}
	iso := p.Predict(job("ResNet-34", 32), "a100", 1).Throughput
	if iso <= 0 {
		t.Fatal("no isolated prediction")
	}
	// Two shared runs of ResNet-34 next to Whisper at 0.5 and 0.8 of its isolated speed.
	for i, ratio := range []float64{0.5, 0.8} {
		o := obs("ResNet-34", 32, "a100", 1, ratio*iso, 0, 100+i)
		o.CoRunner, o.CoRunnerBatchSize = "Whisper", 8
		if err := p.Observe(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	ra, rb, src := p.Colocated(fa, fb, "a100")
	// The isolated prediction does not move: shared runs are not isolated evidence.
	if iso2 := p.Predict(job("ResNet-34", 32), "a100", 1).Throughput; math.Abs(iso2-iso)/iso > 1e-9 {
		t.Errorf("isolated prediction moved from %v to %v after shared runs", iso, iso2)
	}
	if want := math.Sqrt(0.5 * 0.8); src != SrcColocObserved || math.Abs(ra-want) > 1e-9 || rb != rb0 {
		t.Errorf("after shared runs: %v, %v (%s); want %v observed and the co-runner's side unchanged (%v, was %v)", ra, rb, src, want, rb, rb0)
	}
	if rb2, ra2, _ := p.Colocated(fb, fa, "a100"); ra2 != ra || rb2 != rb {
		t.Errorf("swapped: %v, %v", rb2, ra2)
	}
	// Other GPU types keep the table or neighbour prediction.
	if _, _, src := p.Colocated(fa, fb, "v100"); src == SrcColocObserved {
		t.Errorf("v100 pair answered from a100 runs")
	}
	_ = ra0
	a, b := job("ResNet-34", 32), job("Whisper", 8)
	if pa, pb, ok := p.PredictPair(a, b, "a100"); !ok || pa != ra || pb != rb {
		t.Errorf("PredictPair = %v, %v, %t; want %v, %v", pa, pb, ok, ra, rb)
	}
}
