package place

import (
	"context"
	"reflect"
	"testing"

	"github.com/hetgpu/hetgpu/model/cluster"
	"github.com/hetgpu/hetgpu/sidecar/sched"
)

// anyType runs every job on every GPU type.
type anyType struct{}

func (anyType) Predict(*cluster.Job, string, int) sched.Estimate {
	return sched.Estimate{Throughput: 1}
}

func TestFirstFit(t *testing.T) {
	two := node("two", "t4", "Tesla T4", "a", 2, false)
	four := node("four", "a100", "NVIDIA A100-SXM4-40GB", "b", 4, true)
	busy := cluster.Alloc{ID: "x", Namespace: "default", JobID: "x", Group: "g", NodeID: "four", DeviceIDs: []string{"four-gpu0"}}
	zoned := job("zoned", 1)
	zoned.Constraints = []cluster.Constraint{{LTarget: "${meta.zone}", Operand: "=", RTarget: "b"}}
	named := job("named", 1)
	named.DeviceName = "nvidia/gpu/Tesla T4"
	cases := []struct {
		name     string
		backfill bool
		running  []cluster.Alloc
		jobs     []cluster.Job
		// want: job -> its instances, in decision order
		want []string
	}{
		{name: "fullest node that fits", jobs: []cluster.Job{job("a", 2)}, want: []string{"a:two-gpu0,two-gpu1"}},
		{name: "lowest free IDs", running: []cluster.Alloc{busy}, jobs: []cluster.Job{job("a", 3)},
			want: []string{"a:four-gpu1,four-gpu2,four-gpu3"}},
		{name: "spans nodes of one type only", jobs: []cluster.Job{job("a", 5)}, want: nil},
		{name: "head of line blocks", jobs: []cluster.Job{job("big", 8), job("a", 1)}, want: nil},
		{name: "backfill passes a blocked job", backfill: true, jobs: []cluster.Job{job("big", 8), job("a", 1)},
			want: []string{"a:two-gpu0"}},
		{name: "node constraint", jobs: []cluster.Job{zoned}, want: []string{"zoned:four-gpu0"}},
		{name: "device name", running: []cluster.Alloc{busy}, jobs: []cluster.Job{job("a", 2), named}, backfill: true,
			want: []string{"a:two-gpu0,two-gpu1"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			snap := &cluster.Snapshot{Nodes: []cluster.Node{two, four}, Running: c.running, Pending: c.jobs}
			ranked := make([]sched.Ranked, len(snap.Pending))
			for i := range snap.Pending {
				ranked[i] = sched.Ranked{Job: &snap.Pending[i]}
			}
			ds, _, err := FirstFit{Backfill: c.backfill}.Place(context.Background(), nil, snap, ranked, anyType{})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, d := range ds {
				s := d.JobID + ":"
				for k, a := range d.Assign {
					for m, id := range a.InstanceIDs {
						if k+m > 0 {
							s += ","
						}
						s += id
					}
				}
				got = append(got, s)
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Fatalf("placed %q, want %q", got, c.want)
			}
		})
	}
}
