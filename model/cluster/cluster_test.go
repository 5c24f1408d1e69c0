package cluster

import (
	"math"
	"testing"
	"time"
)

func TestObservationStepsPerSec(t *testing.T) {
	cases := []struct {
		name string
		o    Observation
		want float64
	}{
		{"steps given", Observation{Throughput: 12, SamplesPerSec: 999, BatchSize: 64}, 12},
		{"samples and batch", Observation{SamplesPerSec: 640, BatchSize: 64}, 10},
		{"samples without batch", Observation{SamplesPerSec: 640}, 0},
		{"nothing", Observation{}, 0},
		{"invalid kept for validators", Observation{Throughput: -1, SamplesPerSec: 640, BatchSize: 64}, -1},
	}
	for _, c := range cases {
		if got := c.o.StepsPerSec(); got != c.want {
			t.Errorf("%s: StepsPerSec() = %v, want %v", c.name, got, c.want)
		}
	}
	if got := (&Observation{Throughput: math.NaN()}).StepsPerSec(); !math.IsNaN(got) {
		t.Errorf("NaN throughput became %v; validators must see it", got)
	}
}

func TestDecisionGPUsAndKeys(t *testing.T) {
	d := Decision{Namespace: "ml", JobID: "bert", Group: "train", Assign: []Assignment{
		{NodeID: "a", InstanceIDs: []string{"GPU-1", "GPU-2"}}, {NodeID: "b", InstanceIDs: []string{"GPU-3"}}}}
	if d.GPUs() != 3 || d.JobKey() != "ml/bert/train" {
		t.Fatalf("GPUs() = %d, JobKey() = %q", d.GPUs(), d.JobKey())
	}
	j := Job{Namespace: "ml", ID: "bert", Group: "train"}
	if j.Key() != d.JobKey() || j.MaxNodes() != 1 {
		t.Fatalf("Key() = %q, MaxNodes() = %d", j.Key(), j.MaxNodes())
	}
	j.Hetgpu.MaxNodes = 3
	if j.MaxNodes() != 3 {
		t.Fatalf("MaxNodes() = %d, want the annotation's 3", j.MaxNodes())
	}
}

func TestEstimateModelTrusting(t *testing.T) {
	for _, c := range []struct{ est, ran, want time.Duration }{
		{10 * time.Hour, 0, 10 * time.Hour},
		{10 * time.Hour, 3 * time.Hour, 7 * time.Hour},
		{10 * time.Hour, 10 * time.Hour, MinRemainingEstimate},
		{time.Hour, 5 * time.Hour, MinRemainingEstimate},
		{90 * time.Second, 10 * time.Second, 80 * time.Second},
	} {
		if got := (EstimateModel{}).Remaining(c.est, c.ran); got != c.want {
			t.Errorf("Remaining(%v, %v) = %v, want %v", c.est, c.ran, got, c.want)
		}
	}
}

// residual is E[T - r | T > r] for T = est x exp(sigma z), z ~ N(0, 1), by quadrature over z.
func residual(est, r, sigma float64) float64 {
	var num, den float64
	const dz = 1e-4
	for z := -12.0; z < 12; z += dz {
		tv := est * math.Exp(sigma*z)
		if tv <= r {
			continue
		}
		w := math.Exp(-z*z/2) * dz
		num += (tv - r) * w
		den += w
	}
	return num / den
}

// TestEstimateModelExpectation: with a sigma, what is left is the log-normal's expected
// residual (checked against quadrature), it grows once a job outruns its estimate, and it never
// goes below MinRemainingEstimate.
func TestEstimateModelExpectation(t *testing.T) {
	const h = 3600.0
	for _, c := range []struct{ est, ran, sigma float64 }{
		{10 * h, 0, 0.5},
		{10 * h, 2 * h, 0.5},
		{10 * h, 10 * h, 0.5},
		{10 * h, 25 * h, 0.5},
		{h, 3 * h, 1},
		{2 * h, 30 * 60, 0.25},
	} {
		m := EstimateModel{Sigma: c.sigma}
		got := m.Remaining(time.Duration(c.est*1e9), time.Duration(c.ran*1e9)).Seconds()
		if want := residual(c.est, c.ran, c.sigma); math.Abs(got-want) > 1e-3*want {
			t.Errorf("sigma %v, est %v h, ran %v h: %v s left, want %v s", c.sigma, c.est/h, c.ran/h, got, want)
		}
	}
	m := EstimateModel{Sigma: 0.5}
	atEst, past := m.Remaining(10*time.Hour, 10*time.Hour), m.Remaining(10*time.Hour, 20*time.Hour)
	if !(past > atEst && atEst > 2*time.Hour) {
		t.Errorf("left at the estimate %v, at twice it %v: want more than 2 h, growing", atEst, past)
	}
	// Deep in the tail the closed form's ratio underflows; the asymptote keeps it finite.
	if far := m.Remaining(time.Minute, 8760*time.Hour); far <= 0 || far > 8760*time.Hour {
		t.Errorf("a 1-min estimate after a year: %v left", far)
	}
	// A bias moves the median: estimates twice too long (bias -ln 2) read as half.
	for _, c := range []struct{ est, ran, sigma float64 }{{10 * h, 0, 0}, {10 * h, 2 * h, 0}, {10 * h, 4 * h, 0.5}, {10 * h, 0, 0.5}} {
		biased := EstimateModel{Sigma: c.sigma, Bias: -math.Ln2}.Remaining(time.Duration(c.est*1e9), time.Duration(c.ran*1e9))
		plain := EstimateModel{Sigma: c.sigma}.Remaining(time.Duration(c.est/2*1e9), time.Duration(c.ran*1e9))
		if d := biased - plain; d < -time.Millisecond || d > time.Millisecond {
			t.Errorf("bias -ln 2, est %v h, ran %v h, sigma %v: %v left, want %v (half the estimate, unbiased)", c.est/h, c.ran/h, c.sigma, biased, plain)
		}
	}
	if short := m.Remaining(time.Second, 0); short != MinRemainingEstimate {
		t.Errorf("a 1-s estimate: %v left, want the floor %v", short, MinRemainingEstimate)
	}
}

// A running job without an estimate is expected to run as long again as it has, never less
// than an estimated one that has outrun its estimate (EstimateModel.Remaining's floor).
func TestUnestimated(t *testing.T) {
	for _, tc := range []struct{ ran, want time.Duration }{
		{0, MinRemainingEstimate},
		{-time.Hour, MinRemainingEstimate},
		{20 * time.Second, MinRemainingEstimate},
		{3 * time.Hour, 3 * time.Hour},
	} {
		if got := Unestimated(tc.ran); got != tc.want {
			t.Errorf("Unestimated(%v) = %v, want %v", tc.ran, got, tc.want)
		}
	}
	if got, floor := Unestimated(0), (EstimateModel{}).Remaining(time.Minute, time.Hour); got != floor {
		t.Errorf("Unestimated's floor %v, Remaining's %v", got, floor)
	}
}
