package place

import (
	"context"
	"math"
	"sort"

	"github.com/hetgpu/hetgpu/model/cluster"
	"github.com/hetgpu/hetgpu/model/gpuspec"
	"github.com/hetgpu/hetgpu/sidecar/sched"
)

// PriorPredictor is the engine's stand-alone throughput and power prior: a job's throughput on
// a GPU type is its datasheet speed relative to a reference type (ReferenceType, V100 by
// default) times GPUs^ScalingExponent, in "reference-GPU equivalents" per second; power is
// gpuspec's model at BusyUtil per GPU. It knows nothing about the job's model, so it ranks
// types sensibly but its absolute figures only mean something relative to each other; the
// sidecar's real predictor (sidecar/stages/predict) replaces it. A job's T_min is compared in the
// same units.
type PriorPredictor struct {
	Specs         *gpuspec.Table
	ReferenceType string
	// ScalingExponent: n GPUs run n^e times one GPU (0.85, as model/throughput's fallback).
	ScalingExponent float64
	// BusyUtil and Alpha parameterise gpuspec.Spec.Power (gpuspec.BusyUtil and PowerAlpha).
	BusyUtil, Alpha float64
}

// NewPriorPredictor returns the prior with its documented defaults.
func NewPriorPredictor() *PriorPredictor {
	return &PriorPredictor{Specs: gpuspec.Default(), ReferenceType: gpuspec.ReferenceGPU, ScalingExponent: 0.85,
		BusyUtil: gpuspec.BusyUtil, Alpha: gpuspec.PowerAlpha}
}

// SpeedRatio is a GPU type's per-GPU speed relative to the reference type: dense FP16 tensor
// TFLOPS when both have tensor cores, else FP32, blended 50/50 with memory bandwidth. Unknown
// types get 0.
func (p *PriorPredictor) SpeedRatio(gpuType string) float64 {
	s, ok := p.Specs.Lookup(gpuType)
	r, rok := p.Specs.Lookup(p.ReferenceType)
	if !ok || !rok {
		return 0
	}
	compute := s.FP32TFLOPS / r.FP32TFLOPS
	if s.FP16TensorTFLOPS > 0 && r.FP16TensorTFLOPS > 0 {
		compute = s.FP16TensorTFLOPS / r.FP16TensorTFLOPS
	}
	return 0.5*compute + 0.5*s.MemBandwidthGBps/r.MemBandwidthGBps
}

// Predict implements sched.Predictor.
func (p *PriorPredictor) Predict(job *cluster.Job, gpuType string, gpus int) sched.Estimate {
	if gpus < 1 {
		return sched.Estimate{Source: "datasheet-prior"}
	}
	s, ok := p.Specs.Lookup(gpuType)
	if !ok {
		return sched.Estimate{Uncertainty: 1, Source: "datasheet-prior"}
	}
	e := sched.Estimate{
		Throughput:  p.SpeedRatio(gpuType) * math.Pow(float64(gpus), p.ScalingExponent),
		PowerW:      float64(gpus) * s.Power(p.BusyUtil, p.Alpha),
		Uncertainty: 0.5,
		Source:      "datasheet-prior",
	}
	if share, ok := gpuspec.MIGSpeedShare(gpuType); ok {
		// A MIG slice: its share of the parent (Lookup gave the parent's datasheet).
		_, sm, _, _ := gpuspec.MIGShare(gpuType)
		e.Throughput *= share
		e.PowerW *= sm
	}
	return e
}

// FIFO is the engine's stand-alone prioritiser: oldest submission first (ties by job key),
// score = number of jobs behind it, so higher goes first as sched.Ranker requires.
type FIFO struct{}

// Rank implements sched.Ranker.
func (FIFO) Rank(ctx context.Context, snap *cluster.Snapshot, _ sched.Predictor) ([]sched.Ranked, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	idx := make([]int, len(snap.Pending))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool {
		ja, jb := &snap.Pending[idx[a]], &snap.Pending[idx[b]]
		if !ja.SubmitTime.Equal(jb.SubmitTime) {
			return ja.SubmitTime.Before(jb.SubmitTime)
		}
		return ja.Key() < jb.Key()
	})
	out := make([]sched.Ranked, len(idx))
	for r, i := range idx {
		j := &snap.Pending[i]
		out[r] = sched.Ranked{Job: j, Score: float64(len(idx) - r),
			Features: map[string]float64{"wait_s": snap.Now.Sub(j.SubmitTime).Seconds(), "gpus": float64(j.GPUs)}}
	}
	return out, nil
}
