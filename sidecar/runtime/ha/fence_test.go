package ha_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/hetgpu/hetgpu/internal/poll"
	"github.com/hetgpu/hetgpu/model/cluster"
	"github.com/hetgpu/hetgpu/sidecar/backends/nomad"
	"github.com/hetgpu/hetgpu/sidecar/backends/nomad/nomadtest"
	"github.com/hetgpu/hetgpu/sidecar/runtime/ha"
	"github.com/hetgpu/hetgpu/sidecar/runtime/service/servicetest"
)

// firstFit pins a pending job to the first GPUs of the first node.
func firstFit(snap *cluster.Snapshot) cluster.Decision {
	j := snap.Pending[0]
	n := snap.Nodes[0]
	g := n.Devices[0]
	a := cluster.Assignment{NodeID: n.ID, DeviceGroup: g.ID()}
	for _, in := range g.Instances[:j.GPUs] {
		a.InstanceIDs = append(a.InstanceIDs, in.ID)
	}
	return cluster.Decision{Namespace: j.Namespace, JobID: j.ID, Group: j.Group, GPUType: g.GPUType, Assign: []cluster.Assignment{a}}
}

// A leader whose renewals stop reaching Nomad stops pinning before its lease ends: at
// last renewal + TTL - margin its backend refuses the round's pins, while Nomad still
// shows the lock held.
func TestPartitionedLeaderStopsPinningBeforeLeaseEnds(t *testing.T) {
	f := nomadtest.New()
	t.Cleanup(f.Close)
	f.AddNode("node-a100-00", "a100", "NVIDIA A100-SXM4-40GB", 8)
	clk := &clock{}
	a := startReplica(t, f, "a", func(c *ha.Config) { c.Now = clk.now; c.Renew = time.Second })
	poll.Until(t, "a to lead", func() bool { return a.role() == ha.RoleLeader })
	b, err := nomad.New(nomad.Config{Client: a.link.client(t, 500*time.Millisecond), Fence: a.el})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i, id := range []string{"before", "after"} {
		f.Register(servicetest.HeldJob(id, 1, 1, nil))
		if err := b.Resync(ctx); err != nil {
			t.Fatal(err)
		}
		snap, err := b.Snapshot(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if i == 1 {
			// Partition, and 8.1 s pass on the leader's clock (TTL 10 s, margin 2 s).
			a.link.cut.Store(true)
			clk.advance(8100 * time.Millisecond)
		}
		res, err := b.Pin(ctx, []cluster.Decision{firstFit(snap)})
		_, _, pinned := nomad.PinOf(f.Job("default", id).TaskGroups[0])
		switch {
		case i == 0 && (err != nil || len(res) != 1 || !res[0].Applied || !pinned):
			t.Fatalf("leader's pin = %+v, %v (pinned %v); want applied", res, err, pinned)
		case i == 1 && (!errors.Is(err, ha.ErrLeaseLost) || pinned):
			t.Fatalf("pin after the lease ran out = %+v, %v (pinned %v); want ErrLeaseLost, nothing written", res, err, pinned)
		}
	}
	if lv := f.Variable("default", ha.DefaultLockPath); lv == nil || lv.Lock == nil {
		t.Fatal("Nomad freed the lock before the leader stopped writing")
	}
}
