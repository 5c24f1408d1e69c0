package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/hetgpu/hetgpu/sidecar/backends/nomad/nomadtest"
)

// TestJobUpdateSemantics applies each change of nomadtest.UpdateCases to a running GPU job on
// a real agent and checks which ones Nomad applies in place (the allocation keeps running)
// and which replace the allocation; the fake is tested against the same table. A re-hold is
// destructive by nature (it drops the device pin), so the sidecar issues it only once Nomad
// has nothing left running in the group. It also pins a batch rule: any new version of a
// batch job, a ui-only one included, re-runs its finished groups.
func TestJobUpdateSemantics(t *testing.T) {
	nomadBin := nomadBinary(t, "Nomad's job update semantics")
	bins := buildBinaries(t, binDevice, binDriver, binToy)
	c := startCluster(t, nomadBin, bins, []clusterClient{{Name: "v100", Fake: []string{"2x V100"}}}, "")
	killToys(t, c, bins)

	registerJob(t, c.API, `
job "semantics" {
  type = "batch"
  group "train" {
    restart {
      attempts = 0
      mode     = "fail"
    }
    task "train" {
      driver = "hetgpu"`+toyTask(bins.Toy, `"-steps", "3000", "-step-time", "100ms", "-batch", "64"`, `
        device "nvidia/gpu" {
          count = 1
        }`)+`
    }
  }
}`)
	for _, tc := range nomadtest.UpdateCases() {
		a := waitAlloc(t, c.API, "semantics", "running")
		var devs []string
		for _, d := range a.AllocatedResources.Tasks["train"].Devices {
			devs = append(devs, d.DeviceIDs...)
		}
		j, _, err := c.API.Jobs().Info("semantics", nil)
		must(t, err)
		tc.Change(j, a.NodeID, devs)
		resp, _, err := c.API.Jobs().Register(j, nil)
		must(t, err)
		waitEval(t, c.API, resp.EvalID)
		got, _, err := c.API.Allocations().Info(a.ID, nil)
		must(t, err)
		replaced := got.DesiredStatus != "run"
		t.Logf("%-32s allocation %s: desired %s (%s), client %s", tc.Name, a.ID[:8], got.DesiredStatus, got.DesiredDescription, got.ClientStatus)
		if replaced != tc.Destructive {
			t.Errorf("%s: Nomad replaced the allocation = %v, the fake says %v", tc.Name, replaced, tc.Destructive)
		}
	}

	// A finished batch group runs again when a later job version is registered.
	registerJob(t, c.API, `
job "rerun" {
  type = "batch"
  group "a" {
    task "a" {
      driver = "hetgpu"`+toyTask(bins.Toy, `"-steps", "5", "-step-time", "100ms", "-batch", "64"`, "")+`
    }
  }
}`)
	waitDead(t, c.API, "rerun", 90*time.Second)
	j, _, err := c.API.Jobs().Info("rerun", nil)
	must(t, err)
	j.UI = &api.JobUIConfig{Description: "a new version"}
	resp, _, err := c.API.Jobs().Register(j, nil)
	must(t, err)
	waitEval(t, c.API, resp.EvalID)
	stubs, _, err := c.API.Jobs().Allocations("rerun", true, nil)
	must(t, err)
	var st []string
	for _, s := range stubs {
		st = append(st, fmt.Sprintf("v%d %s/%s", s.JobVersion, s.ClientStatus, s.DesiredStatus))
	}
	t.Logf("finished batch job after a ui-only new version: %s", strings.Join(st, ", "))
	if len(stubs) != 2 {
		t.Errorf("a new version of a finished batch job: %d allocations (%v), want the old one and a re-run", len(stubs), st)
	}
}

// waitEval waits until an evaluation is no longer pending.
func waitEval(t *testing.T, c *api.Client, id string) {
	t.Helper()
	waitFor(t, 30*time.Second, "evaluation "+id, func() bool {
		e, _, err := c.Evaluations().Info(id, nil)
		return err == nil && e.Status != api.EvalStatusPending
	})
	time.Sleep(time.Second) // the plan's allocation updates land just after
}
