package preempt

import (
	"testing"

	"github.com/hetgpu/hetgpu/model/cluster/clustertest"
)

// The preemption planner fits a job exactly where cluster.Job.FitsFree does.
func TestFitsLikeFitsFree(t *testing.T) {
	for _, c := range clustertest.FitCases {
		snap, j := c.Snapshot()
		st := newState(snap)
		if got, want := fitOK(st.fit(&j, clustertest.GPUType, st.feasible(&j))), j.FitsFree(c.Free); got != want {
			t.Errorf("%v: fits %v, FitsFree %v", c, got, want)
		}
	}
}

func fitOK(_ []spot, ok bool) bool { return ok }
