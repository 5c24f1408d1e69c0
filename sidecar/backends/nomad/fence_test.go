package nomad

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/hetgpu/hetgpu/model/cluster"
)

type fenceFunc func(context.Context) error

func (f fenceFunc) Held(ctx context.Context) error { return f(ctx) }

// A replica whose fence is closed (lost or expiring lease) writes nothing: no pin, no
// preemption, no re-hold reaches Nomad.
func TestFencedReplicaWritesNothing(t *testing.T) {
	lost := errors.New("leader lease lost")
	for _, tc := range []struct {
		name    string
		fence   cluster.Fence
		wantErr error
	}{
		{"single replica (no fence)", nil, nil},
		{"leader", fenceFunc(func(context.Context) error { return nil }), nil},
		{"lease lost", fenceFunc(func(context.Context) error { return lost }), lost},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, func(c *Config) { c.Fence = tc.fence })
			f.srv.Register(heldJob("bert", 1, 1, map[string]string{"hetgpu.preemptible": "true"}))
			f.resync(t)
			snap := f.snapshot(t)
			f.srv.ResetCalls()
			res, err := f.b.Pin(context.Background(), []cluster.Decision{decide(snap, snap.Pending[0], "node-v100-00")})
			registers := 0
			for route, n := range f.srv.Calls() {
				if strings.HasPrefix(route, "PUT ") || strings.HasPrefix(route, "POST ") {
					registers += n
				}
			}
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) || len(res) != 0 || registers != 0 {
					t.Fatalf("fenced Pin = %+v, %v with %d registers; want %v and no write", res, err, registers, tc.wantErr)
				}
				pres, err := f.b.Preempt(context.Background(), []cluster.Preemption{{Namespace: "default", JobID: "bert", Group: "train", Reason: "test"}})
				if !errors.Is(err, tc.wantErr) || len(pres) != 0 {
					t.Fatalf("fenced Preempt = %+v, %v; want %v", pres, err, tc.wantErr)
				}
				if _, _, ok := PinOf(f.srv.Job("default", "bert").TaskGroups[0]); ok {
					t.Fatal("a fenced replica's pin reached Nomad")
				}
				return
			}
			if err != nil || len(res) != 1 || !res[0].Applied || registers == 0 {
				t.Fatalf("Pin = %+v, %v with %d registers; want applied", res, err, registers)
			}
		})
	}
}
