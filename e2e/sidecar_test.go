package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/hetgpu/hetgpu/sidecar/backends/nomad/nomadtest"
)

// TestSidecarPinsJobspecs runs the whole product on loopback: one Nomad server and three
// clients whose hetgpu device plugins pose as different GPU mixes (4x T4; 8x V100; 8x A100 with
// 4x V100, so the data-parallel example has two nodes of one type), the hetgpu task driver on
// each, and the sidecar. It registers every jobspec in jobspecs/ and checks that held jobs wait,
// then run on the node and exactly the GPU IDs the sidecar pinned; that the ui block and a
// version tag show the decision; that a sidecar killed mid-run and restarted loses no job and
// no decision; and that the driver's observations reach the catalog.
//
// Needs NOMAD_BIN (a Nomad >= 1.10 binary); HETGPU_BIN may hold prebuilt binaries.
func TestSidecarPinsJobspecs(t *testing.T) {
	nomadBin, bins := allBinaries(t, "the sidecar end to end")
	port := freePort(t)
	sidecarURL := fmt.Sprintf("http://127.0.0.1:%d", port)
	c := startCluster(t, nomadBin, bins, []clusterClient{
		{Name: "t4", Fake: []string{"4x T4"}},
		{Name: "v100", Fake: []string{"8x V100"}},
		{Name: "a100", Fake: []string{"8x A100-SXM4-40GB", "4x V100"}},
	}, fmt.Sprintf("    sidecar_addr = %q", sidecarURL))

	// 1. Submit every jobspec before the sidecar runs: held jobs must wait.
	specs, err := filepath.Glob("../jobspecs/*.nomad.hcl")
	if err != nil || len(specs) < 6 {
		t.Fatalf("jobspecs: %v (%d)", err, len(specs))
	}
	held := map[string]*api.Job{}
	var plain []string
	for _, f := range specs {
		if filepath.Base(f) == "hetgpu-sidecar.nomad.hcl" {
			continue // the sidecar itself, not a GPU workload (TestHASidecarAsNomadJobWithACL runs it)
		}
		if anyDriverSpecs[filepath.Base(f)] != "" {
			continue // other drivers' examples: TestAnyDriver runs them with the drivers this machine has
		}
		job := scRegister(t, c.API, f, "", bins.Toy)
		if scHeld(job) {
			held[*job.ID] = job
		} else {
			plain = append(plain, *job.ID)
		}
	}
	if len(held) < 5 || len(plain) != 1 {
		t.Fatalf("held %d, plain %v", len(held), plain)
	}
	for id := range held {
		scWaitBlockedOnHold(t, c.API, id)
		if allocs, _, _ := c.API.Jobs().Allocations(id, true, nil); len(allocs) != 0 {
			t.Fatalf("held job %s has allocations before the sidecar runs", id)
		}
	}

	// 2. Start the sidecar.
	sidecar := startSidecar(t, c, bins, port, `reconcile = "2s"`)

	// 3. Each held group is pinned and runs exactly there.
	for id := range held {
		scCheckPinned(t, c.API, sidecarURL, id)
	}

	// The dashboard's fleet on the real agent: every node and GPU, the pinned ones held.
	var fleet struct {
		NodeCount int  `json:"node_count"`
		GPUCount  int  `json:"gpu_count"`
		Readings  bool `json:"readings"`
		Totals    []struct {
			GPUType string `json:"gpu_type"`
			Busy    int    `json:"busy"`
		} `json:"totals"`
	}
	must(t, scGet(sidecarURL+"/v1/fleet", &fleet))
	busy := 0
	for _, tt := range fleet.Totals {
		busy += tt.Busy
	}
	t.Logf("fleet: %d GPUs on %d nodes, %d busy, live readings %v", fleet.GPUCount, fleet.NodeCount, busy, fleet.Readings)
	if fleet.NodeCount != 3 || fleet.GPUCount != 24 || busy == 0 {
		t.Errorf("fleet = %d GPUs on %d nodes, %d busy; want 24 GPUs on 3 nodes, some busy", fleet.GPUCount, fleet.NodeCount, busy)
	}
	if page, err := httpGet(sidecarURL + "/ui/fleet"); err != nil || !strings.Contains(page, "GPUs on") {
		t.Errorf("the fleet page: %v", err)
	}

	// 4. Kill the sidecar mid-run; a job submitted meanwhile waits; after a restart nothing is
	// lost.
	var before scDecisions
	must(t, scGet(sidecarURL+"/v1/decisions?limit=1000", &before))
	if len(before.Decisions) < len(held) {
		t.Fatalf("%d decisions before the kill, want at least %d", len(before.Decisions), len(held))
	}
	sidecar.Stop(syscall.SIGKILL)
	late := scRegister(t, c.API, "../jobspecs/resnet50-train.nomad.hcl", "resnet50-train-late", bins.Toy)
	scWaitBlockedOnHold(t, c.API, *late.ID)
	sidecar.Start()
	scCheckPinned(t, c.API, sidecarURL, *late.ID)
	var after scDecisions
	must(t, scGet(sidecarURL+"/v1/decisions?limit=1000", &after))
	kept := map[uint64]string{}
	for _, d := range after.Decisions {
		kept[d.Seq] = d.JobKey + " " + d.Status
	}
	for _, d := range before.Decisions {
		if kept[d.Seq] != d.JobKey+" "+d.Status {
			t.Errorf("decision %d (%s %s) lost or changed across the restart: now %q", d.Seq, d.JobKey, d.Status, kept[d.Seq])
		}
	}

	// 5. Every job finishes; the driver's observations reach the catalog.
	ids := append(plain, *late.ID)
	for id := range held {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	completed := 0
	for _, id := range ids {
		waitFor(t, 4*time.Minute, "job "+id+" to finish", func() bool {
			j, _, err := c.API.Jobs().Info(id, nil)
			return err == nil && j.Status != nil && *j.Status == "dead"
		})
		allocs, _, _ := c.API.Jobs().Allocations(id, true, nil)
		gpuGroups := map[string]bool{}
		if j, _, err := c.API.Jobs().Info(id, nil); err == nil {
			for _, tg := range j.TaskGroups {
				gpuGroups[*tg.Name] = scHasGPU(tg)
			}
		}
		for _, a := range allocs {
			if a.ClientStatus == "complete" {
				if gpuGroups[a.TaskGroup] { // a run without GPUs (a gang's launcher) is not observed
					completed++
				}
			} else {
				t.Errorf("job %s allocation %s ended %s", id, a.ID, a.ClientStatus)
			}
		}
	}
	waitFor(t, 60*time.Second, fmt.Sprintf("%d observations in the catalog", completed), func() bool {
		var h struct{ Observations int }
		return scGet(sidecarURL+"/v1/health", &h) == nil && h.Observations >= completed
	})
	if sidecar.Exited() {
		t.Error("the sidecar exited on its own")
	}
}

// startSidecar runs `hetgpu sidecar` against the cluster on port with the given extra
// configuration and waits for its API.
func startSidecar(t *testing.T, c *cluster, bins binaries, port int, extra string) *proc {
	t.Helper()
	return startSidecarNomad(t, c, bins, port, "", extra)
}

// startSidecarNomad is startSidecar with nomadExtra inside the configuration's nomad block
// (a token, sample_every).
func startSidecarNomad(t *testing.T, c *cluster, bins binaries, port int, nomadExtra, extra string, args ...string) *proc {
	t.Helper()
	scDir := t.TempDir()
	cfg := fmt.Sprintf(`
listen    = "127.0.0.1:%d"
state_dir = %q
debounce  = "200ms"
log_level = "info"
nomad {
  address = %q
%s
}
%s
`, port, filepath.Join(scDir, "state"), c.HTTP, nomadExtra, extra)
	cfgPath := filepath.Join(scDir, "sidecar.hcl")
	must(t, os.WriteFile(cfgPath, []byte(cfg), 0o644))
	env := []string{"NOMAD_ADDR=", "NOMAD_TOKEN=", "NOMAD_NAMESPACE=", "HETGPU_TOKEN="}
	sidecar := startProc(t, "sidecar", scDir, env, append([]string{bins.Hetgpu, "sidecar", "-config", cfgPath}, args...)...)
	waitFor(t, 30*time.Second, "the sidecar API", func() bool {
		var h map[string]any
		return scGet(fmt.Sprintf("http://127.0.0.1:%d/v1/health", port), &h) == nil && h["backend"] == "nomad"
	})
	return sidecar
}

type scDecisions struct {
	Decisions []struct {
		Seq    uint64 `json:"seq"`
		JobKey string `json:"job_key"`
		Status string `json:"status"`
	} `json:"decisions"`
}

// scQueue is what the tests read of GET /v1/queue (service.QueueView).
type scQueue struct {
	Jobs []struct {
		JobID      string  `json:"job_id"`
		Group      string  `json:"group"`
		Status     string  `json:"status"`
		Reason     string  `json:"reason"`
		Infeasible bool    `json:"infeasible"`
		FreeInS    float64 `json:"free_in_s"`
	} `json:"jobs"`
	Invalid []struct {
		JobKey string `json:"job_key"`
		Error  string `json:"error"`
	} `json:"invalid"`
}

func scGet(url string, v any) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != 200 {
		return fmt.Errorf("%s: %d %s", url, resp.StatusCode, b)
	}
	return json.Unmarshal(b, v)
}

// scRegister parses a jobspec through Nomad (HCL2 with the toy workload's path as variable)
// and registers it, optionally under another ID.
func scRegister(t *testing.T, c *api.Client, file, id, toy string) *api.Job {
	t.Helper()
	src, err := os.ReadFile(file)
	must(t, err)
	job, err := c.Jobs().ParseHCLOpts(&api.JobsParseRequest{JobHCL: string(src), Variables: fmt.Sprintf("toy_train = %q\n", toy), Canonicalize: true})
	if err != nil {
		t.Fatalf("parse %s: %v", file, err)
	}
	if id != "" {
		job.ID, job.Name = &id, &id
	}
	if _, _, err := c.Jobs().Register(job, nil); err != nil {
		t.Fatalf("register %s: %v", file, err)
	}
	return job
}

// scHasGPU reports whether a group requests GPUs (hetgpu pins only those).
func scHasGPU(tg *api.TaskGroup) bool {
	for _, t := range tg.Tasks {
		if t.Resources == nil {
			continue
		}
		for _, d := range t.Resources.Devices {
			if d != nil && strings.Contains(d.Name, "gpu") {
				return true
			}
		}
	}
	return false
}

func scIsHold(c *api.Constraint) bool {
	return c.LTarget == "${meta.hetgpu.queue}" && c.RTarget == "waiting-for-hetgpu"
}

func scHeld(job *api.Job) bool {
	for _, c := range job.Constraints {
		if scIsHold(c) {
			return true
		}
	}
	for _, tg := range job.TaskGroups {
		for _, c := range tg.Constraints {
			if scIsHold(c) {
				return true
			}
		}
	}
	return false
}

// scWaitBlockedOnHold waits for the job's blocked evaluation whose placement failure names the
// hold constraint (what the Nomad UI shows).
func scWaitBlockedOnHold(t *testing.T, c *api.Client, id string) {
	t.Helper()
	waitFor(t, 30*time.Second, "job "+id+" blocked on the hold constraint", func() bool {
		evals, _, err := c.Jobs().Evaluations(id, nil)
		if err != nil {
			return false
		}
		for _, e := range evals {
			for _, m := range e.FailedTGAllocs {
				for k := range m.ConstraintFiltered {
					if strings.Contains(k, "meta.hetgpu.queue") {
						return true
					}
				}
			}
		}
		return false
	})
}

// scCheckPinned waits until every GPU group of the job is pinned and its allocations hold
// exactly the pinned GPUs on the pinned nodes; then checks the ui block, the version tag and
// the explain API.
func scCheckPinned(t *testing.T, c *api.Client, sidecarURL, id string) {
	t.Helper()
	var job *api.Job
	waitFor(t, 90*time.Second, "job "+id+" pinned by the sidecar", func() bool {
		j, _, err := c.Jobs().Info(id, nil)
		if err != nil || scHeld(j) {
			return false
		}
		for _, tg := range j.TaskGroups {
			if nodes, devs := scPinOf(tg); scHasGPU(tg) && (len(nodes) == 0 || len(devs) == 0) {
				return false
			}
		}
		job = j
		return true
	})
	for _, tg := range job.TaskGroups {
		if !scHasGPU(tg) {
			continue // a gang's launcher: released with the pin, placed by Nomad
		}
		nodes, devs := scPinOf(tg)
		waitFor(t, 90*time.Second, fmt.Sprintf("%s/%s placed on its pin", id, *tg.Name), func() bool {
			stubs, _, err := c.Jobs().Allocations(id, false, nil)
			if err != nil {
				return false
			}
			var got []string
			placed := 0
			for _, s := range stubs {
				if s.TaskGroup != *tg.Name || s.DesiredStatus != "run" {
					continue
				}
				a, _, err := c.Allocations().Info(s.ID, nil)
				if err != nil {
					return false
				}
				if !scContains(nodes, a.NodeID) {
					t.Errorf("%s/%s allocation %s on node %s, pinned %v", id, *tg.Name, a.ID, a.NodeID, nodes)
				}
				placed++
				for _, tr := range a.AllocatedResources.Tasks {
					for _, d := range tr.Devices {
						got = append(got, d.DeviceIDs...)
					}
				}
			}
			if placed < *tg.Count {
				return false
			}
			sort.Strings(got)
			if strings.Join(got, ",") != strings.Join(devs, ",") {
				t.Errorf("%s/%s holds GPUs %v, pinned %v", id, *tg.Name, got, devs)
			}
			return true
		})
	}
	if job.UI != nil {
		t.Logf("job %s ui description (%d bytes):\n%s", id, len(job.UI.Description), job.UI.Description)
	}
	if job.UI == nil || !strings.Contains(job.UI.Description, "pinned to") {
		t.Errorf("job %s ui description does not show the decision: %+v", id, job.UI)
	} else if len(job.UI.Links) == 0 || !strings.Contains(job.UI.Links[len(job.UI.Links)-1].URL, "/v1/jobs/default/"+url.PathEscape(id)+"/explain") {
		t.Errorf("job %s ui links = %+v", id, job.UI.Links)
	}
	versions, _, _, err := c.Jobs().Versions(id, false, nil)
	must(t, err)
	tagged := false
	for _, v := range versions {
		if v.VersionTag != nil && strings.HasPrefix(v.VersionTag.Name, "hetgpu-pin-") {
			tagged = true
		}
	}
	if !tagged {
		t.Errorf("job %s has no hetgpu-pin version tag", id)
	}
	var ex map[string]any
	if err := scGet(sidecarURL+"/v1/jobs/default/"+url.PathEscape(id)+"/explain", &ex); err != nil {
		t.Errorf("explain %s: %v", id, err)
	}
}

// scPinOf is nomadtest.PinOf with the device IDs sorted.
func scPinOf(tg *api.TaskGroup) (nodes, devs []string) {
	nodes, devs = nomadtest.PinOf(tg)
	sort.Strings(devs)
	return nodes, devs
}

func scContains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
