package place

import (
	"testing"

	"github.com/hetgpu/hetgpu/model/cluster"
	"github.com/hetgpu/hetgpu/model/cluster/clustertest"
)

// First fit fits a job exactly where cluster.Job.FitsFree does.
func TestFitsLikeFitsFree(t *testing.T) {
	for _, c := range clustertest.FitCases {
		snap, j := c.Snapshot()
		if got, want := fitOK(NewPacker(snap).Fit(&j, func(string) bool { return true })), j.FitsFree(c.Free); got != want {
			t.Errorf("%v: fits %v, FitsFree %v", c, got, want)
		}
	}
}

func fitOK(_ cluster.Decision, ok bool, err error) bool { return ok && err == nil }
