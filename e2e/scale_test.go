package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"

	"github.com/hetgpu/hetgpu/sidecar/research/livebench"
)

// TestLiveRoundsRealAgent is `hetgpu bench live` against a real agent: one server and
// HETGPU_E2E_SCALE clients with 8 fake GPUs each (4 types in turn), the sidecar's Nomad
// backend and service in this process. 3 one-GPU jobs per client run throughout (sleep on
// the hetgpu driver, pinned by the sidecar); each of HETGPU_E2E_SCALE_ROUNDS (default 5)
// measured rounds decides 2 held groups per client (1 or 2 GPUs), which are purged before
// the next. It logs the same summary as the command (a measurement: it only fails when
// groups are not pinned). Skipped unless HETGPU_E2E_SCALE is set.
func TestLiveRoundsRealAgent(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("HETGPU_E2E_SCALE"))
	if n <= 0 {
		t.Skip("HETGPU_E2E_SCALE is not set: set it to the number of Nomad clients to measure live rounds on a real agent")
	}
	rounds := 5
	if r, err := strconv.Atoi(os.Getenv("HETGPU_E2E_SCALE_ROUNDS")); err == nil && r > 0 {
		rounds = r
	}
	nomadBin := nomadBinary(t, "live rounds on a real agent")
	bins := buildBinaries(t, binDevice, binDriver)
	types := []string{"8x T4", "8x V100", "8x A100-SXM4-40GB", "8x H100"}
	var clients []clusterClient
	for i := 0; i < n; i++ {
		clients = append(clients, clusterClient{Name: fmt.Sprintf("c%02d", i), Fake: []string{types[i%len(types)]}})
	}
	t0 := time.Now()
	c := startCluster(t, nomadBin, bins, clients, "")
	t.Logf("%d clients ready in %v", n, time.Since(t0).Round(time.Second))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sc, err := livebench.NewSidecar(ctx, c.HTTP, t.TempDir(), hclog.New(&hclog.LoggerOptions{Name: "sidecar", Level: hclog.Warn}))
	must(t, err)
	defer sc.Close()

	submit := func(id string, gpus uint64) {
		job := &api.Job{ID: &id, Name: &id, Type: ptrTo("batch"), Datacenters: []string{"*"},
			Constraints: []*api.Constraint{api.NewConstraint("${meta.hetgpu.queue}", "=", "waiting-for-hetgpu")},
			Meta:        map[string]string{"hetgpu.enable": "true", "hetgpu.model": "resnet/ResNet-50", "hetgpu.batch_size": "64", "hetgpu.runtime": "1h"},
			TaskGroups: []*api.TaskGroup{{Name: ptrTo("train"), Count: ptrTo(1),
				RestartPolicy: &api.RestartPolicy{Attempts: ptrTo(0), Mode: ptrTo("fail")},
				Tasks: []*api.Task{{Name: "train", Driver: "hetgpu", KillTimeout: ptrTo(time.Second), Config: map[string]any{"command": "/bin/sleep", "args": []string{"3600"}},
					Resources: &api.Resources{CPU: ptrTo(20), MemoryMB: ptrTo(32),
						Devices: []*api.RequestedDevice{{Name: "nvidia/gpu", Count: &gpus}}}}}}}}
		if _, _, err := c.API.Jobs().Register(job, nil); err != nil {
			t.Fatalf("register %s: %v", id, err)
		}
		t.Cleanup(func() { _, _, _ = c.API.Jobs().Deregister(id, true, nil) })
	}
	pending := func() int {
		s, err := sc.Backend.Snapshot(ctx)
		if err != nil {
			return -1
		}
		return len(s.Pending)
	}
	running := func() int {
		stubs, _, err := c.API.Allocations().List(nil)
		if err != nil {
			return -1
		}
		k := 0
		for _, a := range stubs {
			if a.ClientStatus == api.AllocClientStatusRunning || a.ClientStatus == api.AllocClientStatusPending {
				k++
			}
		}
		return k
	}

	// The running load, pinned by the sidecar itself.
	base := 3 * n
	for i := 0; i < base; i++ {
		submit(fmt.Sprintf("running-%03d", i), 1)
	}
	waitFor(t, 2*time.Minute, "the sidecar to see the running load's jobs", func() bool { return pending() == base })
	for pinned := 0; pinned < base; {
		rs, err := sc.Round(ctx)
		must(t, err)
		pinned += rs.Applied
	}
	waitFor(t, 5*time.Minute, fmt.Sprintf("%d running allocations", base), func() bool { return running() == base },
		func() string { return fmt.Sprintf("%d running", running()) })
	t.Logf("%d running allocations after %v", base, time.Since(t0).Round(time.Second))

	per := 2 * n
	var stats []livebench.RoundStats
	for r := 0; r < rounds; r++ {
		var ids []string
		for k := 0; k < per; k++ {
			id := fmt.Sprintf("r%02d-%03d", r, k)
			submit(id, uint64(1+k%2))
			ids = append(ids, id)
		}
		waitFor(t, 2*time.Minute, "the sidecar to see the round's groups", func() bool { return pending() == per })
		rs, err := sc.Round(ctx)
		must(t, err)
		if rs.Applied != per {
			t.Errorf("round %d pinned %d of %d groups (%d decisions)", r, rs.Applied, per, rs.Pins)
		}
		stats = append(stats, rs)
		t.Logf("round %d: %v (service %v), %d pins, %d calls, phases %v", r, rs.Round.Round(time.Millisecond),
			rs.Service.Round(time.Millisecond), rs.Applied, rs.Calls, rs.Phases)
		waitFor(t, 5*time.Minute, "the round's allocations to run", func() bool { return running() == base+per },
			func() string { return fmt.Sprintf("%d running", running()) })
		for _, id := range ids {
			if _, _, err := c.API.Jobs().Deregister(id, true, nil); err != nil {
				t.Fatalf("purge %s: %v", id, err)
			}
		}
		waitFor(t, 5*time.Minute, "the round's allocations to stop", func() bool { return running() == base },
			func() string { return fmt.Sprintf("%d running", running()) })
		purged := time.Now()
		resynced := false
		waitFor(t, 2*time.Minute, "the sidecar to see the GPUs free", func() bool {
			// Maintenance (every round, at least every 5 s in the sidecar) finds the purged
			// jobs' allocations gone; the sidecar's periodic resync (every minute) is the
			// safety net for what it misses, run here after 30 s.
			if _, err := sc.Backend.Maintain(ctx); err != nil {
				return false
			}
			if !resynced && time.Since(purged) > 30*time.Second {
				resynced = true
				s, _ := sc.Backend.Snapshot(ctx)
				t.Logf("round %d: %d of the purged groups' allocations still counted after 30 s of maintenance; resyncing", r, len(s.Running)-base)
				if _, _, err := sc.Resync(ctx); err != nil {
					t.Logf("resync: %v", err)
				}
			}
			s, err := sc.Backend.Snapshot(ctx)
			return err == nil && len(s.Running) == base && len(s.Pending) == 0
		}, func() string {
			s, err := sc.Backend.Snapshot(ctx)
			if err != nil {
				return err.Error()
			}
			var ids []string
			for _, a := range s.Running {
				if !strings.HasPrefix(a.JobID, "running-") {
					ids = append(ids, a.ID+" "+a.JobID)
				}
			}
			_, qm, _ := c.API.Allocations().List(nil)
			var li uint64
			if qm != nil {
				li = qm.LastIndex
			}
			var evs []string
			if len(ids) > 0 {
				id := strings.Fields(ids[0])[0]
				sctx, scancel := context.WithTimeout(ctx, 3*time.Second)
				ch, err := c.API.EventStream().Stream(sctx, map[api.Topic][]string{api.TopicAllocation: {"*"}}, 0, &api.QueryOptions{Namespace: "*"})
				if err == nil {
					for e := range ch {
						for _, ev := range e.Events {
							if ev.Key == id {
								a, _ := ev.Allocation()
								if a != nil {
									evs = append(evs, fmt.Sprintf("%d %s %s/%s mi=%d", ev.Index, ev.Type, a.DesiredStatus, a.ClientStatus, a.ModifyIndex))
								}
							}
						}
					}
				}
				scancel()
				info, _, err := c.API.Allocations().Info(id, nil)
				if err == nil {
					evs = append(evs, fmt.Sprintf("now %s/%s mi=%d", info.DesiredStatus, info.ClientStatus, info.ModifyIndex))
				} else {
					evs = append(evs, err.Error())
				}
			}
			return fmt.Sprintf("%d running (others: %v), %d pending; watcher at index %d, allocations at %d; events of the first: %v", len(s.Running), ids, len(s.Pending), sc.Backend.Index(), li, evs)
		})
	}
	res := livebench.Summarise(livebench.Config{Nodes: n, GPUsPerNode: 8, GPUTypes: min(n, len(types)), Pending: per, Running: base}, stats)
	resync, calls, err := sc.Resync(ctx)
	must(t, err)
	res.ResyncMS, res.ResyncCalls = float64(resync.Microseconds())/1000, calls
	out, _ := json.MarshalIndent(res, "", "  ")
	t.Logf("real agent, %d clients x 8 fake GPUs, %d running, %d groups per round:\n%s", n, base, per, out)
}
