package nomad

import (
	"strings"
	"testing"

	"github.com/hetgpu/hetgpu/model/cluster"
)

// The ui line shows the ranker's score as the queue, the log and the decision record do
// (issue 14: 6.02 in the ui, 36.02 elsewhere), with enough digits to read as the same number.
func TestDecisionLineShowsTheRankScore(t *testing.T) {
	for _, tt := range []struct {
		score float64
		want  string
	}{
		{36.0213, "score 36.02, rank 3"},
		{-5.25, "score -5.25, rank 3"},
		{0.731, "score 0.731, rank 3"},
	} {
		d := cluster.Decision{Group: "g", GPUType: "a100", Score: tt.score, Rank: 3,
			Assign: []cluster.Assignment{{NodeID: "n1", DeviceGroup: "nvidia/gpu/A100", InstanceIDs: []string{"GPU-1"}}}}
		if l := DecisionLine(&d, map[string]cluster.Node{}, ""); !strings.Contains(l, tt.want) {
			t.Errorf("score %v: line %q lacks %q", tt.score, l, tt.want)
		}
	}
}
