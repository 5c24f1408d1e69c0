package policies

import (
	"fmt"

	"github.com/hetgpu/hetgpu/sidecar/backends/sim"
	"github.com/hetgpu/hetgpu/sidecar/sched"
	"github.com/hetgpu/hetgpu/sidecar/stages/place"
	"github.com/hetgpu/hetgpu/sidecar/stages/predict"
	"github.com/hetgpu/hetgpu/sidecar/stages/rank"
)

// The production-pipeline baselines run sched.Pipeline unchanged against the simulator's
// Snapshot and Pin: the same stage implementations the sidecar runs
// against Nomad, configured the way each paper describes its system.

// newRLTune is RLTune-style scheduling (arXiv 2512.10271): a PPO-trained prioritiser orders the
// queue from observable job and cluster features (rank.NewDefault: the bundled trained policy,
// its heuristic when the build has none), and a MILP maps the chosen jobs to nodes and GPUs
// maximising priority x speed with fragmentation, load-balance and look-ahead terms
// (place.PresetRLTune: no energy term, no T_min). RLTune has no learned throughput model: the
// MILP's speeds are datasheet ratios (place.PriorPredictor).
func newRLTune(o Options) (Policy, error) {
	r, err := rank.NewDefault(rank.WithExplain(false))
	if err != nil {
		return Policy{}, fmt.Errorf("rltune ranker: %w", err)
	}
	pl, err := place.New(o.placement(place.PresetRLTune()), o.Logger)
	if err != nil {
		return Policy{}, fmt.Errorf("rltune placer: %w", err)
	}
	return Policy{Stages: sched.Stages{Ranker: r, Placer: pl, Predictor: place.NewPriorPredictor()},
		Estimates: sim.Estimates{Off: true}}, nil
}

// newGOGH is GOGH-style scheduling (arXiv 2510.15652): jobs in arrival order; P1 predicts each
// job's throughput and power per GPU type from similar past runs and P2 refines it online from
// the runs the cluster finishes (predict.Predictor, fed the simulator's observations); an ILP
// minimises energy subject to each job's minimum throughput, capacity and distribution degree
// with a load-adaptive energy weight (place.PresetGOGH).
func newGOGH(o Options) (Policy, error) {
	pr, err := productionPredictor(o)
	if err != nil {
		return Policy{}, fmt.Errorf("gogh predictor: %w", err)
	}
	pl, err := place.New(o.placement(place.PresetGOGH()), o.Logger)
	if err != nil {
		return Policy{}, fmt.Errorf("gogh placer: %w", err)
	}
	return Policy{Stages: sched.Stages{Ranker: place.FIFO{}, Placer: pl, Predictor: pr, Learner: learnerOf(pr)},
		Estimates: sim.Estimates{Off: true}}, nil
}

// productionPredictor is GOGH's predictor: the live sidecar's (Options.Predictor), else a
// fresh one that learns from the simulation's runs.
func productionPredictor(o Options) (sched.Predictor, error) {
	if o.Predictor != nil {
		return o.Predictor, nil
	}
	return predict.New(predict.Options{Logger: o.Logger})
}

// learnerOf is the predictor as a learner, when it learns.
func learnerOf(p sched.Predictor) sched.Learner {
	l, _ := p.(sched.Learner)
	return l
}

// placement is a preset as the policy runs it. In the simulator it is made reproducible run to
// run: one decomposition cell at a time, no round deadline, and work limits instead of wall-clock
// ones (SimNodeLimit). On the live sidecar the preset's production limits stay, since a round
// must end in time.
func (o Options) placement(c place.Config) place.Config {
	if o.Live {
		return c
	}
	c.Parallelism = 1
	c.RoundDeadline = 0
	c.PolishLimit = 0
	// Work limits instead of wall-clock ones, so a replay gives the same schedule on a busy
	// machine as on an idle one (training runs many replays in parallel and must reproduce).
	c.NodeLimit = SimNodeLimit
	c.TimeLimit = SimTimeLimit
	return c
}
