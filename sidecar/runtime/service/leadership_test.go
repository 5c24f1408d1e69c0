package service_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/hetgpu/hetgpu/internal/poll"
	"github.com/hetgpu/hetgpu/model/cluster"
	"github.com/hetgpu/hetgpu/sidecar/backends/nomad"
	"github.com/hetgpu/hetgpu/sidecar/runtime/service"
	"github.com/hetgpu/hetgpu/sidecar/runtime/service/servicetest"
)

// A standby watches but runs no round: a held job stays held until the replica leads.
func TestStandbyRunsNoRoundUntilItLeads(t *testing.T) {
	l := &servicetest.Leadership{}
	l.Set(false, "http://leader:4656")
	h := servicetest.NewHarness(t, func(c *service.Config, _ *nomad.Config) {
		c.Leadership, c.Reconcile = l, 20*time.Millisecond
	})
	h.Nomad.Register(servicetest.HeldJob("resnet", 1, 1, nil))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Service.Run(ctx) }()
	defer func() {
		cancel()
		<-done
	}()
	poll.Until(t, "five skipped rounds", func() bool { return l.HeldCalls() >= 5 })
	if hl := h.Service.Health(); hl.Rounds != 0 || hl.Role != "standby" || hl.Leader != "http://leader:4656" || hl.Status != "ok" {
		t.Fatalf("standby health = %+v; want no rounds, role standby, the leader, status ok", hl)
	}
	if _, _, ok := nomad.PinOf(h.Nomad.Job("default", "resnet").TaskGroups[0]); ok {
		t.Fatal("a standby pinned a job")
	}
	l.Set(true, "http://me:4656")
	poll.Until(t, "the new leader to pin the job", func() bool {
		_, _, ok := nomad.PinOf(h.Nomad.Job("default", "resnet").TaskGroups[0])
		return ok
	})
	if hl := h.Service.Health(); hl.Role != "leader" || hl.Rounds == 0 {
		t.Fatalf("leader health = %+v", hl)
	}
}

func run(job, alloc string) cluster.Observation {
	return cluster.Observation{Namespace: "default", JobID: job, Group: "train", GPUType: "a100", GPUs: 1,
		Throughput: 10, RuntimeS: 60, AllocID: alloc, ModelName: "resnet50"}
}

// A run is acknowledged only once it is shared; a standby stores nothing.
func TestObserveSharesBeforeAcknowledging(t *testing.T) {
	l := &servicetest.Leadership{}
	l.Set(true, "")
	shareErr := errors.New("nomad unreachable")
	var shares int
	var fail bool
	h := servicetest.NewHarness(t, func(c *service.Config, _ *nomad.Config) {
		c.Leadership = l
		c.Share = func(context.Context) error {
			shares++
			if fail {
				return shareErr
			}
			return nil
		}
	})
	ctx := context.Background()
	for _, tc := range []struct {
		name       string
		leads      bool
		fail       bool
		alloc      string
		wantErr    error
		wantStored int
		wantLearn  int
		wantShares int
	}{
		{"standby refuses", false, false, "a1", service.ErrStandby, 0, 0, 0},
		{"share fails: stored and learned, not acknowledged", true, true, "a1", shareErr, 1, 1, 1},
		{"retry: a duplicate, shared, acknowledged", true, false, "a1", nil, 1, 1, 2},
		{"fresh run", true, false, "a2", nil, 2, 2, 3},
	} {
		l.Set(tc.leads, "http://leader:4656")
		fail = tc.fail
		_, err := h.Service.ObserveBatch(ctx, []cluster.Observation{run("resnet", tc.alloc)}, service.SourceDriver, "")
		if !errors.Is(err, tc.wantErr) && !(tc.wantErr == nil && err == nil) {
			t.Fatalf("%s: ObserveBatch = %v, want %v", tc.name, err, tc.wantErr)
		}
		if n, l, s := h.Store.ObservationCount(), len(h.Pred.Learned()), shares; n != tc.wantStored || l != tc.wantLearn || s != tc.wantShares {
			t.Fatalf("%s: %d stored, %d learned, %d shares; want %d, %d, %d", tc.name, n, l, s, tc.wantStored, tc.wantLearn, tc.wantShares)
		}
	}
}

// One replica (no Leadership) reports role "single" and keeps every other health key.
func TestHealthSingleReplica(t *testing.T) {
	h := servicetest.NewHarness(t, nil)
	h.Round()
	if hl := h.Service.Health(); hl.Role != "single" || hl.Leader != "" || hl.ReplicaID != "" || hl.Rounds != 1 || hl.Backend != "nomad" {
		t.Fatalf("single replica health = %+v", hl)
	}
}

// A replica that stood by for long and just took over is not reported stale before it had
// the reconcile periods to run its first round.
func TestHealthFreshLeaderNotStale(t *testing.T) {
	l := &servicetest.Leadership{}
	now := time.Now()
	h := servicetest.NewHarness(t, func(c *service.Config, _ *nomad.Config) {
		c.Leadership, c.Reconcile = l, time.Second
		c.Now = func() time.Time { return now }
	})
	now = now.Add(time.Minute)
	if hl := h.Service.Health(); hl.Status != "ok" || hl.Role != "standby" {
		t.Fatalf("standby a minute after start: %+v", hl)
	}
	l.Set(true, "")
	if hl := h.Service.Health(); hl.Status != "ok" || hl.Role != "leader" {
		t.Fatalf("leader just after taking over: status %s, role %s; want ok", hl.Status, hl.Role)
	}
}
