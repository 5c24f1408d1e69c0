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

func TestRemainingEstimate(t *testing.T) {
	for _, c := range []struct{ est, ran, want time.Duration }{
		{10 * time.Hour, 0, 10 * time.Hour},
		{10 * time.Hour, 3 * time.Hour, 7 * time.Hour},
		{10 * time.Hour, 10 * time.Hour, MinRemainingEstimate},
		{time.Hour, 5 * time.Hour, MinRemainingEstimate},
		{90 * time.Second, 10 * time.Second, 80 * time.Second},
	} {
		if got := RemainingEstimate(c.est, c.ran); got != c.want {
			t.Errorf("RemainingEstimate(%v, %v) = %v, want %v", c.est, c.ran, got, c.want)
		}
	}
}
