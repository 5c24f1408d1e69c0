package queue

import (
	"testing"

	"github.com/hetgpu/hetgpu/model/cluster/clustertest"
)

// The queue stage's guarantee room fits a job exactly where cluster.Job.FitsFree does.
func TestFitsLikeFitsFree(t *testing.T) {
	for _, c := range clustertest.FitCases {
		snap, j := c.Snapshot()
		if got, want := newNodeRoom(nil, snap, nil).fits(&j), j.FitsFree(c.Free); got != want {
			t.Errorf("%v: fits %v, FitsFree %v", c, got, want)
		}
	}
}
