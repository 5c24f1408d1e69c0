package queue

import (
	"testing"
	"time"

	"github.com/hetgpu/hetgpu/model/cluster"
)

// TestNextRound: a round that leaves a queue below its guarantee with a waiting job the
// guarantee admits asks for another after RetryBelow; a job larger than what the guarantee has
// left, a queue at its guarantee, or nothing waiting asks for none.
func TestNextRound(t *testing.T) {
	s, err := New(Config{Queues: []Spec{{Name: "a", Namespaces: []string{"a"}, Guarantee: 4}, {Name: "b", Namespaces: []string{"b"}}}})
	if err != nil {
		t.Fatal(err)
	}
	pend := func(ns string, g int) cluster.Job { return cluster.Job{Namespace: ns, ID: "p", Group: "g", GPUs: g} }
	for _, tt := range []struct {
		name    string
		running int
		pending []cluster.Job
		want    time.Duration // 0: no round asked for
	}{
		{"below with an admitted job", 2, []cluster.Job{pend("a", 1)}, RetryBelow},
		{"below, the job fills the guarantee", 2, []cluster.Job{pend("a", 2)}, RetryBelow},
		{"below, the job is larger than what is left", 2, []cluster.Job{pend("a", 4)}, 0},
		{"at the guarantee", 4, []cluster.Job{pend("a", 1)}, 0},
		{"below, nothing waiting", 2, nil, 0},
		{"another queue waits (no guarantee)", 2, []cluster.Job{pend("b", 1)}, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			snap := &cluster.Snapshot{Now: t0, Nodes: []cluster.Node{node("n", "a100", 8)},
				Running: []cluster.Alloc{alloc("a", "r", "n", "a100", 0, tt.running, t0)}, Pending: tt.pending}
			got := s.NextRound(snap)
			switch {
			case tt.want == 0 && !got.IsZero():
				t.Errorf("asked for a round at %v, want none", got)
			case tt.want > 0 && !got.Equal(t0.Add(tt.want)):
				t.Errorf("next round %v, want %v", got, t0.Add(tt.want))
			}
		})
	}
}
