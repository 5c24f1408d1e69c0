package e2e

import (
	"fmt"
	"testing"
	"time"
)

// TestBaselinePolicyDrivesTheSidecar: with `policy = "tiresias"` (baselines.LAS and first-fit) or
// `policy = "gavel"` (baselines.Gavel: the max-min fair LP over GPU types, grants each round) the
// sidecar schedules with a registered baseline on the real agent: held jobs are pinned, run and
// finish, and their decision records come from the baseline's pipeline.
func TestBaselinePolicyDrivesTheSidecar(t *testing.T) {
	for _, policy := range []string{"tiresias", "gavel"} {
		t.Run(policy, func(t *testing.T) {
			e := newFaultEnv(t, "the "+policy+" policy end to end", []clusterClient{
				{Name: "v100a", Fake: []string{"2x V100"}}, {Name: "t4a", Fake: []string{"2x T4"}},
			}, "")
			c, bins := e.cluster, e.bins
			sidecar := startSidecar(t, c, bins, e.port, fmt.Sprintf("reconcile = \"1s\"\npolicy = %q", policy))

			start := time.Now()
			for i := 0; i < 2; i++ {
				submitToy(t, c.API, bins, fmt.Sprintf("%s-%d", policy, i), 100, "100ms", nil)
			}
			for i := 0; i < 2; i++ {
				id := fmt.Sprintf("%s-%d", policy, i)
				waitDead(t, c.API, id, 3*time.Minute)
				if n := finishedRuns(t, e.sidecarURL, id); n != 1 {
					t.Fatalf("%s: %d finished runs recorded, want 1: %s", id, n, jobState(c.API, id))
				}
			}
			var d scDecisions
			must(t, scGet(e.sidecarURL+"/v1/decisions?limit=10", &d))
			pinned := 0
			for _, r := range d.Decisions {
				if r.Status == "pinned" {
					pinned++
				}
			}
			if pinned < 2 {
				t.Fatalf("%d pinned decision records, want 2: %+v", pinned, d.Decisions)
			}
			t.Logf("%s pinned and finished 2 held jobs in %s", policy, time.Since(start).Round(time.Second))
			if sidecar.Exited() {
				t.Error("the sidecar exited on its own")
			}
		})
	}
}
