package place

import (
	"math"
	"strings"
	"testing"

	"github.com/hetgpu/hetgpu/model/cluster"
)

// A sharing job left out of a round joins a new job the round put alone on an idle GPU when
// the pair gains and both keep their T_min (co-location where it can be applied: the simulator).
func TestPairOnIdleGPU(t *testing.T) {
	alone := NewPriorPredictor().Predict(&cluster.Job{}, "v100", 1).Throughput
	tests := []struct {
		name       string
		pairIdle   bool
		pair       [2]float64 // a next to bb, bb next to a
		tminA      float64
		tminB      float64
		placed     []string
		wantShared bool
	}{
		{"pair that gains", true, [2]float64{0.7, 0.9}, 0, 0, []string{"a", "bb"}, true},
		{"off: the later job waits", false, [2]float64{0.7, 0.9}, 0, 0, []string{"a"}, false},
		{"pair that loses: the later job waits", true, [2]float64{0.3, 0.4}, 0, 0, []string{"a"}, false},
		{"summed ratio exactly 1: no gain, waits", true, [2]float64{0.5, 0.5}, 0, 0, []string{"a"}, false},
		{"newcomer's T_min not met", true, [2]float64{0.7, 0.9}, 0, 0.95 * alone, []string{"a"}, false},
		{"host's T_min not met", true, [2]float64{0.7, 0.9}, 0.8 * alone, 0, []string{"a"}, false},
		{"both T_min met", true, [2]float64{0.7, 0.9}, 0.6 * alone, 0.85 * alone, []string{"a", "bb"}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pred := pairTable{NewPriorPredictor(), map[[2]string][2]float64{{"A", "B"}: tc.pair}}
			a, b := job("a", 1), job("bb", 1)
			a.Hetgpu.ModelName, b.Hetgpu.ModelName = "A", "B"
			a.Hetgpu.AllowSharing, b.Hetgpu.AllowSharing = true, true
			a.Hetgpu.MinThroughput, b.Hetgpu.MinThroughput = tc.tminA, tc.tminB
			snap := &cluster.Snapshot{Nodes: []cluster.Node{node("n", "v100", "Tesla V100-SXM2-16GB", "z", 1, false)},
				Pending: []cluster.Job{a, b}}
			cfg := Default()
			cfg.PairIdleGPUs = tc.pairIdle
			cfg.HonorMinThroughput = true
			dec := placeWith(t, cfg, snap, pred)
			var got []string
			for _, d := range dec {
				got = append(got, d.JobID)
			}
			if strings.Join(got, ",") != strings.Join(tc.placed, ",") {
				t.Fatalf("placed %v, want %v", got, tc.placed)
			}
			da := decisionFor(dec, "a")
			if da.Shared != tc.wantShared {
				t.Errorf("host decision shared = %t, want %t", da.Shared, tc.wantShared)
			}
			if len(dec) == 2 {
				db := decisionFor(dec, "bb")
				if db.Assign[0].InstanceIDs[0] != da.Assign[0].InstanceIDs[0] || !db.Shared {
					t.Errorf("bb on %v (shared %t), want a's GPU %v", db.Assign, db.Shared, da.Assign)
				}
				if math.Abs(da.PredThroughput-tc.pair[0]*alone) > 1e-9 || math.Abs(db.PredThroughput-tc.pair[1]*alone) > 1e-9 {
					t.Errorf("pair throughputs %v, %v, want %v x %v", da.PredThroughput, db.PredThroughput, tc.pair, alone)
				}
				if !strings.Contains(db.Explanation, "paired on an idle GPU with default/a/g") ||
					!strings.Contains(da.Explanation, "co-runner paired on this idle GPU in the same round: default/bb/g") {
					t.Errorf("explanations:\n%s\n%s", da.Explanation, db.Explanation)
				}
			}
		})
	}
}
