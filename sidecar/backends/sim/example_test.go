package sim_test

import (
	"context"
	"fmt"

	"github.com/hetgpu/hetgpu/model/throughput"
	"github.com/hetgpu/hetgpu/model/trace"
	"github.com/hetgpu/hetgpu/sidecar/backends/sim"
	"github.com/hetgpu/hetgpu/sidecar/policies"
)

// The engine driven from outside, as `hetgpu sidecar` does without Nomad: jobs are submitted,
// the clock is advanced (here one simulated minute per step; a sidecar maps wall time to it),
// and the scheduler runs its own rounds against the engine as a cluster.Cluster.
func ExampleEngine_AdvanceTo() {
	spec, _ := sim.LoadSpec("gavel-108")
	tab, _ := throughput.Bundled()
	e, _ := sim.New(sim.Config{Spec: spec, Throughput: tab})
	v100, _ := tab.Measured("ResNet-50 (batch size 32)", "v100", 2)
	_ = e.Submit(trace.Job{ID: "resnet", JobType: "ResNet-50 (batch size 32)", Model: "ResNet-50", BatchSize: 32,
		GPUs: 2, TotalSteps: 600 * v100, ArrivalS: 30})

	fifo, _ := policies.Build("fifo", policies.Options{Throughput: tab}) // any registered policy
	pipe := fifo.Stages.Pipeline(e)
	ctx := context.Background()
	for t := 0.0; !e.Done(); t += 60 {
		e.AdvanceTo(t)
		r, _ := pipe.RunRound(ctx)
		for _, d := range r.Decisions {
			fmt.Printf("t=%.0fs: %s on %d x %s\n", t, d.JobID, d.GPUs(), d.GPUType)
		}
	}
	res := e.Result("outside")
	fmt.Printf("finished %d job(s) at t=%.0fs\n", res.Jobs, res.JobResults[0].FinishS)
	// Output:
	// t=60s: resnet on 2 x k80
	// finished 1 job(s) at t=2822s
}
