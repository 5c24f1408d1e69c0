package e2e

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

// TestSidecarPreempts: on one node with 2 GPUs, a long preemptible job runs; a short job
// arrives; the sidecar re-holds the long one (Nomad stops it), pins the short one on the freed
// GPUs, and pins the long one again once the short one finished.
func TestSidecarPreempts(t *testing.T) {
	nomadBin, bins := allBinaries(t, "preemption end to end")
	port := freePort(t)
	sidecarURL := fmt.Sprintf("http://127.0.0.1:%d", port)
	c := startCluster(t, nomadBin, bins, []clusterClient{{Name: "v100", Fake: []string{"2x V100"}}},
		fmt.Sprintf("    sidecar_addr = %q", sidecarURL))

	sidecar := startSidecar(t, c, bins, port, "reconcile = \"1s\"\npreemption {\n  min_run = \"0s\"\n}")

	submit := func(id, runtime string, steps int) {
		src, err := os.ReadFile("../jobspecs/resnet50-train.nomad.hcl")
		must(t, err)
		job, err := c.API.Jobs().ParseHCLOpts(&api.JobsParseRequest{JobHCL: string(src),
			Variables: fmt.Sprintf("toy_train = %q\n", bins.Toy), Canonicalize: true})
		must(t, err)
		job.ID, job.Name = &id, &id
		job.Meta["hetgpu.preemptible"] = "true"
		job.Meta["hetgpu.runtime"] = runtime
		job.Meta["hetgpu.steps"] = fmt.Sprint(steps)
		job.TaskGroups[0].Tasks[0].Config["args"] = []any{"-steps", fmt.Sprint(steps), "-step-time", "100ms", "-batch", "64"}
		if _, _, err := c.API.Jobs().Register(job, nil); err != nil {
			t.Fatalf("register %s: %v", id, err)
		}
	}
	running := func(id string) bool {
		allocs, _, err := c.API.Jobs().Allocations(id, false, nil)
		if err != nil {
			return false
		}
		for _, a := range allocs {
			if a.ClientStatus == "running" {
				return true
			}
		}
		return false
	}

	submit("long", "10h", 100000)
	waitFor(t, 90*time.Second, "the long job running", func() bool { return running("long") })
	started := time.Now()
	time.Sleep(3 * time.Second) // a run long enough to count in whole seconds
	submit("short", "1m", 30)
	waitFor(t, 90*time.Second, "the long job re-held for the short one", func() bool {
		j, _, err := c.API.Jobs().Info("long", nil)
		return err == nil && scHeld(j) && j.UI != nil && strings.Contains(j.UI.Description, "preempted")
	})
	// The preemption wrote how long the long job ran into its group's meta: it resumes from its
	// checkpoint, so only the rest of its runtime is left.
	lj, _, err := c.API.Jobs().Info("long", nil)
	must(t, err)
	ran, err := time.ParseDuration(lj.TaskGroups[0].Meta["hetgpu.ran"])
	if err != nil || ran < 3*time.Second || ran > time.Since(started)+time.Second {
		t.Errorf("hetgpu.ran = %q (%v), want the %s or so the long job ran", lj.TaskGroups[0].Meta["hetgpu.ran"], err, time.Since(started).Round(time.Second))
	}
	if !strings.Contains(lj.UI.Description, "so far") {
		t.Errorf("the re-held line does not say how long the job ran: %q", lj.UI.Description)
	}
	t.Logf("preempted after running %s (hetgpu.ran)", ran)
	waitFor(t, 90*time.Second, "the short job pinned", func() bool {
		j, _, err := c.API.Jobs().Info("short", nil)
		return err == nil && !scHeld(j)
	}, func() string {
		q, _ := httpGet(sidecarURL + "/v1/queue")
		d, _ := httpGet(sidecarURL + "/v1/decisions?limit=4")
		a, _, _ := c.API.Jobs().Allocations("long", true, nil)
		var st []string
		for _, x := range a {
			st = append(st, x.ClientStatus+"/"+x.DesiredStatus)
		}
		return "queue: " + q + "\ndecisions: " + d + "\nlong allocs: " + strings.Join(st, ",")
	})
	scCheckPinned(t, c.API, sidecarURL, "short")
	waitFor(t, 2*time.Minute, "the short job to finish", func() bool {
		j, _, err := c.API.Jobs().Info("short", nil)
		return err == nil && j.Status != nil && *j.Status == "dead"
	})
	waitFor(t, 90*time.Second, "the long job pinned and running again", func() bool {
		j, _, err := c.API.Jobs().Info("long", nil)
		return err == nil && !scHeld(j) && running("long")
	})
	allocs, _, err := c.API.Jobs().Allocations("long", true, nil)
	must(t, err)
	if len(allocs) < 2 {
		t.Fatalf("the long job has %d allocations, want the stopped one and the new one", len(allocs))
	}
	var m string
	waitFor(t, 30*time.Second, "the preemption metric", func() bool {
		resp, err := httpGet(sidecarURL + "/metrics")
		m = resp
		return err == nil && strings.Contains(m, `hetgpu_preemptions_total{result="applied"} 1`)
	}, func() string { return m })
	_, _, _ = c.API.Jobs().Deregister("long", true, nil)
	if sidecar.Exited() {
		t.Error("the sidecar exited on its own")
	}
}

func httpGet(url string) (string, error) {
	resp, err := http.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}
