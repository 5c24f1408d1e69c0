// Package sched is the scheduling framework: the narrow interfaces of each stage and the
// Pipeline that runs one round, snapshot -> rank -> predict -> place -> pin. Stages live in
// their own packages (sidecar/rank, sidecar/predict, sidecar/place) and know nothing of each
// other beyond these interfaces; backends (Nomad, simulator) implement cluster.Cluster.
package sched

import (
	"context"
	"fmt"
	"time"

	"github.com/hetgpu/hetgpu/sidecar/cluster"
)

// Estimate is a predicted figure for one job on one GPU type and count.
type Estimate struct {
	// Throughput of the whole job in its own units (samples or steps per second).
	Throughput float64
	// PowerW is the average power of all GPUs the job uses, in watts.
	PowerW float64
	// Uncertainty is a relative standard deviation (0.1 = +-10 %).
	Uncertainty float64
	// Source says where the figure came from ("catalog", "p1", "p1p2", "datasheet-prior").
	Source string
}

// Predictor estimates how fast and at what power a job runs on a GPU type (GOGH's P1/P2).
type Predictor interface {
	Predict(job *cluster.Job, gpuType string, gpus int) Estimate
}

// Learner takes measured runs and updates what it knows (catalog, P2, policy).
type Learner interface {
	Observe(ctx context.Context, obs cluster.Observation) error
}

// Ranked is a pending job with the prioritiser's score; higher scores go first.
type Ranked struct {
	Job   *cluster.Job
	Score float64
	// Features are the inputs the score came from, for the queue and explain APIs.
	Features map[string]float64
}

// Ranker orders the pending queue (RLTune's policy or a heuristic).
type Ranker interface {
	Rank(ctx context.Context, snap *cluster.Snapshot, pred Predictor) ([]Ranked, error)
}

// PlaceStats describes one placement solve.
type PlaceStats struct {
	Candidates int
	Variables  int
	// Solver is "milp", "greedy" or "decomposed".
	Solver    string
	Objective float64
	// Gap is the MIP gap HiGHS reported (0 when proven optimal or not a MIP).
	Gap      float64
	Fallback bool
	// FallbackReason says why the greedy answer was used (time limit, solver error).
	FallbackReason string
	SolveTime      time.Duration
}

// Placer maps ranked jobs to nodes and exact GPU instances, or leaves them waiting.
type Placer interface {
	Place(ctx context.Context, snap *cluster.Snapshot, ranked []Ranked, pred Predictor) ([]cluster.Decision, PlaceStats, error)
}

// Round is what one pipeline round did, for metrics, logs and the explain API.
type Round struct {
	Snapshot  *cluster.Snapshot
	Ranked    []Ranked
	Decisions []cluster.Decision
	Pins      []cluster.PinResult
	Place     PlaceStats
	// Latency is wall time from snapshot to pins issued.
	Latency time.Duration
}

// Pipeline runs decision rounds against a cluster backend.
type Pipeline struct {
	Cluster   cluster.Cluster
	Ranker    Ranker
	Predictor Predictor
	Placer    Placer
}

// RunRound takes one snapshot and carries it through every stage.
func (p *Pipeline) RunRound(ctx context.Context) (*Round, error) {
	start := time.Now()
	snap, err := p.Cluster.Snapshot(ctx)
	if err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	r, err := p.Decide(ctx, snap)
	if err != nil {
		return nil, err
	}
	if len(r.Decisions) > 0 {
		r.Pins, err = p.Cluster.Pin(ctx, r.Decisions)
		if err != nil {
			return r, fmt.Errorf("pin %d decisions: %w", len(r.Decisions), err)
		}
	}
	r.Latency = time.Since(start)
	return r, nil
}

// Decide ranks and places the pending jobs of a snapshot without pinning (shadow mode).
func (p *Pipeline) Decide(ctx context.Context, snap *cluster.Snapshot) (*Round, error) {
	r := &Round{Snapshot: snap}
	if len(snap.Pending) == 0 {
		return r, nil
	}
	ranked, err := p.Ranker.Rank(ctx, snap, p.Predictor)
	if err != nil {
		return nil, fmt.Errorf("rank %d pending jobs: %w", len(snap.Pending), err)
	}
	r.Ranked = ranked
	r.Decisions, r.Place, err = p.Placer.Place(ctx, snap, ranked, p.Predictor)
	if err != nil {
		return nil, fmt.Errorf("place %d ranked jobs: %w", len(ranked), err)
	}
	return r, nil
}
