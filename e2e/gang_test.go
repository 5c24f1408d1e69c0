package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

// TestGangPinnedTogether: a launcher (no GPU) and its workers under one job-level hold, plus
// a second GPU group that would fit on its own, are pinned together or not at all on a real
// agent. While a blocker holds the only node the workers fit on, nothing of the job runs
// (the small group that fits the T4 node is not pinned alone); once the blocker finishes, one
// job update pins both GPU groups and releases the launcher, and every allocation of the job
// runs from that one version.
func TestGangPinnedTogether(t *testing.T) {
	e := newFaultEnv(t, "gangs end to end", []clusterClient{
		{Name: "v100", Fake: []string{"8x V100"}}, {Name: "t4", Fake: []string{"4x T4"}},
	}, "")
	c, bins, sidecarURL := e.cluster, e.bins, e.sidecarURL
	e.startSidecar(t)

	// The blocker takes all 8 V100s for about 20 s.
	src, err := os.ReadFile("../jobspecs/resnet50-train.nomad.hcl")
	must(t, err)
	blocker, err := c.API.Jobs().ParseHCLOpts(&api.JobsParseRequest{JobHCL: string(src),
		Variables: fmt.Sprintf("toy_train = %q\n", bins.Toy), Canonicalize: true})
	must(t, err)
	blocker.ID, blocker.Name = ptrTo("blocker"), ptrTo("blocker")
	blocker.TaskGroups[0].Tasks[0].Resources.Devices[0].Count = ptrTo(uint64(8))
	blocker.TaskGroups[0].Tasks[0].Config["args"] = []any{"-steps", "200", "-step-time", "100ms", "-batch", "64"}
	_, _, err = c.API.Jobs().Register(blocker, nil)
	must(t, err)
	scCheckPinned(t, c.API, sidecarURL, "blocker")

	// The gang: launcher + workers (8 GPUs: only the V100 node) + eval (2 GPUs: the T4 node
	// would do).
	gsrc, err := os.ReadFile("../jobspecs/gang-launcher.nomad.hcl")
	must(t, err)
	gang, err := c.API.Jobs().ParseHCLOpts(&api.JobsParseRequest{JobHCL: string(gsrc),
		Variables: fmt.Sprintf("toy_train = %q\n", bins.Toy), Canonicalize: true})
	must(t, err)
	var workers *api.TaskGroup
	for _, tg := range gang.TaskGroups {
		if *tg.Name == "workers" {
			workers = tg
		}
	}
	workers.Tasks[0].Resources.Devices[0].Count = ptrTo(uint64(8))
	evalGroup, err := copyGroup(workers)
	must(t, err)
	evalGroup.Name = ptrTo("eval")
	evalGroup.Tasks[0].Resources.Devices[0].Count = ptrTo(uint64(2))
	gang.TaskGroups = append(gang.TaskGroups, evalGroup)
	_, _, err = c.API.Jobs().Register(gang, nil)
	must(t, err)

	// The sidecar sees the gang and holds it back whole while the blocker runs.
	var why string
	waitFor(t, 30*time.Second, "the gang waiting in the sidecar's queue", func() bool {
		var q scQueue
		if err := scGet(sidecarURL+"/v1/queue", &q); err != nil {
			why = err.Error()
			return false
		}
		n := 0
		for _, j := range q.Jobs {
			if j.JobID == "gang-launcher" && j.Status != "decided" {
				n++
				why = j.Group + ": " + j.Reason
			}
		}
		return n == 2
	}, func() string { return why })
	for range 5 {
		j, _, err := c.API.Jobs().Info("gang-launcher", nil)
		must(t, err)
		// Versions while it waits are only the ui notes saying why (tagged hetgpu-wait-N).
		if !scHeld(j) || *j.Version != uint64(waitNotes(t, c.API, "gang-launcher")) {
			t.Fatalf("gang rewritten while its workers cannot be placed (version %d): %s", *j.Version, jobState(c.API, "gang-launcher"))
		}
		if allocs, _, _ := c.API.Jobs().Allocations("gang-launcher", true, nil); len(allocs) != 0 {
			t.Fatalf("part of the gang runs: %s", jobState(c.API, "gang-launcher"))
		}
		time.Sleep(time.Second)
	}
	metrics, err := httpGet(sidecarURL + "/metrics")
	must(t, err)
	if !strings.Contains(metrics, "hetgpu_gangs_deferred_total") || strings.Contains(metrics, "hetgpu_gangs_deferred_total 0") {
		t.Errorf("hetgpu_gangs_deferred_total did not count the deferred gang")
	}

	// Once the blocker is done the whole gang is pinned in one update and runs.
	scCheckPinned(t, c.API, sidecarURL, "gang-launcher")
	waitFor(t, 60*time.Second, "every group of the gang running", func() bool {
		stubs, _, err := c.API.Jobs().Allocations("gang-launcher", true, nil)
		if err != nil {
			return false
		}
		groups := map[string]bool{}
		for _, a := range stubs {
			if a.ClientStatus == "running" || a.ClientStatus == "complete" {
				groups[a.TaskGroup] = true
			}
		}
		return len(groups) == 3
	}, func() string { return jobState(c.API, "gang-launcher") })
	stubs, _, err := c.API.Jobs().Allocations("gang-launcher", true, nil)
	must(t, err)
	versions, _, _, err := c.API.Jobs().Versions("gang-launcher", false, nil)
	must(t, err)
	pins, pinVersion := 0, uint64(0)
	for _, v := range versions {
		if v.VersionTag != nil && strings.HasPrefix(v.VersionTag.Name, "hetgpu-pin-") {
			pins++
			pinVersion = *v.Version
		}
	}
	for _, a := range stubs {
		if a.JobVersion != pinVersion {
			t.Errorf("allocation %s of %s runs version %d, want %d (the one pin of the gang)", a.ID[:8], a.TaskGroup, a.JobVersion, pinVersion)
		}
	}
	if pins != 1 {
		t.Errorf("%d pin versions of the gang, want 1", pins)
	}
	metrics, err = httpGet(sidecarURL + "/metrics")
	must(t, err)
	if !strings.Contains(metrics, "hetgpu_gang_partial_pins_total 0") {
		t.Errorf("a gang was pinned in part")
	}
	waitDead(t, c.API, "gang-launcher", 2*time.Minute)
}

// copyGroup deep-copies a task group.
func copyGroup(tg *api.TaskGroup) (*api.TaskGroup, error) {
	data, err := json.Marshal(tg)
	if err != nil {
		return nil, err
	}
	var out api.TaskGroup
	return &out, json.Unmarshal(data, &out)
}

// waitNotes counts a job's versions tagged hetgpu-wait (the ui notes of a held job that waits).
func waitNotes(t *testing.T, c *api.Client, id string) int {
	t.Helper()
	return taggedVersions(t, c, id, "hetgpu-wait-")
}
