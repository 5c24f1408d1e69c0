package service

import (
	"testing"

	"github.com/hetgpu/hetgpu/model/cluster/clustertest"
)

// The explain page's "fits now" fits a job exactly where cluster.Job.FitsFree does.
func TestFitsLikeFitsFree(t *testing.T) {
	for _, c := range clustertest.FitCases {
		snap, j := c.Snapshot()
		if got, want := freeCapacity(snap).fits(&j, clustertest.GPUType), j.FitsFree(c.Free); got != want {
			t.Errorf("%v: fits %v, FitsFree %v", c, got, want)
		}
	}
}
