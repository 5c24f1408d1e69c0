package sim_test

import (
	"fmt"
	"testing"

	"github.com/hetgpu/hetgpu/model/cluster"
	"github.com/hetgpu/hetgpu/sidecar/backends/sim"
	"github.com/hetgpu/hetgpu/sidecar/sched"
)

// A run whose rounds reuse the arrays of earlier ones (no OnRound hook) decides as one whose
// rounds all get new arrays (an OnRound hook keeps every round's snapshot): the policies that
// preempt and wake, which derive snapshots after preemptions and pins, end identically.
func TestReusedSnapshotsDecideAlike(t *testing.T) {
	s := mixed(t, 2, 2)
	tr := synthetic(t, 60, 40, 5, true)
	// (hetgpu's placement stops solving on the wall clock, so two runs of it may differ.)
	for _, name := range []string{"gavel", "tiresias"} {
		t.Run(name, func(t *testing.T) {
			reused := run(t, s, tr, newPolicy(t, name, s))
			hooked := newPolicy(t, name, s)
			var kept []*cluster.Snapshot
			hooked.OnRound = func(r *sched.Round) { kept = append(kept, r.Snapshot) }
			fresh := run(t, s, tr, hooked)
			if len(kept) == 0 || fresh.Preemptions == 0 {
				t.Fatalf("%d rounds seen, %d preemptions: the case does not exercise reuse", len(kept), fresh.Preemptions)
			}
			if a, b := summary(reused), summary(fresh); a != b {
				t.Errorf("reused arrays: %s\nnew arrays:    %s", a, b)
			}
		})
	}
}

func summary(r *sim.Result) string {
	return fmt.Sprintf("jobs %d avg JCT %.9g makespan %.9g preemptions %d rounds %d", r.Jobs, r.AvgJCTS, r.MakespanS, r.Preemptions, r.Rounds)
}

// The memoised oracle answers as the plain one, for every job type, GPU type, count and
// spread, asked twice (the second answer comes from the memo).
func TestMemoizedTablePredictor(t *testing.T) {
	tab := table(t)
	plain := sim.TablePredictor{Table: tab, CrossNodeEfficiency: 0.7}
	memo := plain.Memoized()
	n := 0
	for _, jt := range tab.JobTypes()[:6] {
		j := &cluster.Job{Hetgpu: cluster.Annotations{ModelName: jt}}
		for _, typ := range tab.GPUTypes() {
			for _, gpus := range []int{1, 2, 4, 8} {
				for _, nodes := range []int{1, 2, 3} {
					want := plain.PredictSpread(j, typ, gpus, nodes)
					for try := 0; try < 2; try++ {
						if got := memo.PredictSpread(j, typ, gpus, nodes); got != want {
							t.Fatalf("%s on %d %s over %d nodes (try %d): memoised %+v, plain %+v", jt, gpus, typ, nodes, try, got, want)
						}
						if got, want := memo.Predict(j, typ, gpus), plain.Predict(j, typ, gpus); got != want {
							t.Fatalf("%s on %d %s: memoised Predict %+v, plain %+v", jt, gpus, typ, got, want)
						}
					}
					if want.Throughput > 0 {
						n++
					}
				}
			}
		}
	}
	if n == 0 {
		t.Fatal("no answer with a throughput: the case checks nothing")
	}
}
