// Observations: one cluster.Observation per finished allocation, delivered to the learners.

package sim

import (
	"context"
	"time"

	"github.com/hetgpu/hetgpu/model/cluster"
	"github.com/hetgpu/hetgpu/sidecar/sched"
)

func (e *Engine) emitObservation(j *JobState) {
	if len(e.observers) == 0 {
		return
	}
	dur := e.now - j.segStart
	if dur <= 0 {
		return
	}
	steps := j.segSteps - j.remaining
	n := e.nodes[j.Placement.GPUs[0].Node]
	obs := cluster.Observation{Namespace: j.Namespace, JobID: j.ID, Group: JobGroup, Task: JobGroup,
		ModelName: j.Model, BatchSize: j.BatchSize, GPUType: j.GPUType, GPUName: n.gpuName, GPUs: j.GPUs,
		Nodes: j.Nodes, Throughput: steps / dur, EnergyJ: j.energyJ - j.segEnergy,
		AvgPowerW: (j.energyJ - j.segEnergy) / dur, RuntimeS: dur, CoRunner: j.coRunner, CoRunnerBatchSize: j.coBatch,
		Time: e.cfg.Epoch.Add(time.Duration(e.now * float64(time.Second)))}
	if e.batch != nil {
		*e.batch = append(*e.batch, obs)
		return
	}
	for _, o := range e.observers {
		if err := o.Observe(context.Background(), obs); err != nil {
			e.log.Warn("observer rejected an observation", "job", j.Key, "error", err)
		}
	}
}

// deliver gives the observers the runs collected while e.batch was set, in one call each.
func (e *Engine) deliver(obs []cluster.Observation) {
	if len(obs) == 0 {
		return
	}
	for _, o := range e.observers {
		if err := sched.ObserveAll(context.Background(), o, obs); err != nil {
			e.log.Warn("observer rejected observations", "runs", len(obs), "error", err)
		}
	}
}
