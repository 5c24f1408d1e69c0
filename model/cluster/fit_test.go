package cluster

import "testing"

// fitsFreeCases are capacity fits by Job.FitsFree.
var fitsFreeCases = []struct {
	name               string
	gpus, per, maxNode int
	free               []int // most first
	want               bool
}{
	{"one node holds it", 4, 0, 0, []int{4, 2}, true},
	{"no single node holds it", 4, 0, 0, []int{3, 3}, false},
	{"spans two nodes", 4, 0, 2, []int{3, 1}, true},
	{"spans at most two", 6, 0, 2, []int{3, 2, 1}, false},
	{"per node: two nodes of two", 4, 2, 0, []int{3, 2, 1}, true},
	{"per node: only one node of two", 4, 2, 0, []int{4, 1}, false},
	{"per node ignores max_nodes (validated elsewhere)", 4, 2, 1, []int{2, 2}, true},
	{"nothing free", 1, 0, 0, nil, false},
	{"no GPUs needed", 0, 0, 0, nil, true},
}

func TestFitsFree(t *testing.T) {
	for _, tc := range fitsFreeCases {
		j := Job{GPUs: tc.gpus, GPUsPerNode: tc.per, Hetgpu: Annotations{MaxNodes: tc.maxNode}}
		if got := j.FitsFree(tc.free); got != tc.want {
			t.Errorf("%s: FitsFree(%v) = %v, want %v", tc.name, tc.free, got, tc.want)
		}
	}
}
