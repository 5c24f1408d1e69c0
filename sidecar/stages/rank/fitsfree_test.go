package rank

import (
	"testing"

	"github.com/hetgpu/hetgpu/model/cluster/clustertest"
)

// The "can start" feature is set exactly where cluster.Job.FitsFree fits the job.
func TestCanStartLikeFitsFree(t *testing.T) {
	for _, c := range clustertest.FitCases {
		snap, j := c.Snapshot()
		snap.Pending = append(snap.Pending, j)
		var x Extractor
		rows, globals := make([]float64, NumFeatures), make([]float64, NumGlobals)
		x.Extract(snap, nil, 1, rows, globals)
		if got, want := rows[FCanStart] > 0, j.FitsFree(c.Free); got != want {
			t.Errorf("%v: can start %v, FitsFree %v", c, got, want)
		}
	}
}
