package e2e

// Screenshots of Nomad's own web UI (built from Nomad's source, see shared/tools/nomad-ui)
// with headless Chromium against a real agent, one per state a hetgpu job can be in: held,
// pinned, preempted, waiting, infeasible, invalid, released. docs/nomad-ui.md shows them.

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Environment of the screenshot test.
const (
	envUIDist  = "HETGPU_NOMAD_UI_DIST" // the built UI (ember dist/ with index.html)
	envUIShots = "HETGPU_UI_SHOTS"      // where the PNGs go (default: a temporary folder)
	envChrome  = "HETGPU_CHROMIUM"      // the browser (default: chromium on PATH)
)

// uiServer serves a built Nomad UI under /ui/ and forwards /v1/ to the agent, without
// blocking queries: headless Chromium's virtual time stands still while one is open.
func uiServer(t *testing.T, dist, agentAddr string) string {
	t.Helper()
	target, err := url.Parse(agentAddr)
	must(t, err)
	proxy := &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) {
		r.SetURL(target)
		q := r.In.URL.Query()
		if q.Has("index") {
			q.Del("index")
			q.Del("wait")
			r.Out.URL.RawQuery = q.Encode()
		}
	}, FlushInterval: -1}
	root, err := filepath.Abs(dist)
	must(t, err)
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/", func(w http.ResponseWriter, r *http.Request) {
		if r.Method == "GET" && r.URL.Query().Has("index") {
			// The jobs list drops its POST /v1/jobs/statuses when the GET of the same returns
			// first; under virtual time both fire at once. Let the POST win.
			time.Sleep(300 * time.Millisecond)
		}
		proxy.ServeHTTP(w, r)
	})
	mux.HandleFunc("/ui/", func(w http.ResponseWriter, r *http.Request) {
		rel := strings.TrimPrefix(filepath.Clean(strings.TrimPrefix(r.URL.Path, "/ui")), "/")
		p := filepath.Join(root, rel)
		if st, err := os.Stat(p); err != nil || st.IsDir() {
			if strings.HasPrefix(rel, "assets/") {
				http.NotFound(w, r)
				return
			}
			p = filepath.Join(root, "index.html") // a client-side route
			w.Header().Set("Cache-Control", "no-cache")
		}
		http.ServeFile(w, r, p)
	})
	port := freePort(t)
	srv := &http.Server{Addr: fmt.Sprintf("127.0.0.1:%d", port), Handler: mux}
	go func() { _ = srv.ListenAndServe() }()
	t.Cleanup(func() { _ = srv.Close() })
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	waitFor(t, 10*time.Second, "the UI server", func() bool {
		resp, err := http.Get(base + "/ui/jobs")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	return base
}

// screenshot opens the page in headless Chromium and writes a PNG (in its own process group,
// in a folder of the test's, so the harness ends it whatever happens).
func screenshot(t *testing.T, chrome, page, out string) {
	t.Helper()
	profile := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, chrome, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
		"--user-data-dir="+profile, "--window-size=1400,1100", "--virtual-time-budget=15000", "--screenshot="+out, page)
	cmd.Dir = profile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	b, err := cmd.CombinedOutput()
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // its helpers
	st, serr := os.Stat(out)
	if err != nil || serr != nil || st.Size() == 0 {
		t.Fatalf("screenshot of %s: %v %v\n%s", page, err, serr, b)
	}
	t.Logf("%s: %s (%d KB)", page, out, st.Size()/1024)
}

// TestNomadUIScreenshots drives one cluster through every state of a hetgpu job and
// photographs the job's page in Nomad's UI at each; the conditions waited for are what the
// state means (Nomad's blocked evaluation, hetgpu's pin, its re-hold line, its queue, its ui
// lines), so each picture shows the state it is named after.
func TestNomadUIScreenshots(t *testing.T) {
	dist := os.Getenv(envUIDist)
	if dist == "" {
		t.Skipf("%s is not set: build Nomad's web UI (shared/tools/nomad-ui/build.sh) and point it at the dist folder", envUIDist)
	}
	if _, err := os.Stat(filepath.Join(dist, "index.html")); err != nil {
		t.Fatalf("%s=%s is not a built Nomad UI: %v", envUIDist, dist, err)
	}
	chrome := os.Getenv(envChrome)
	if chrome == "" {
		for _, c := range []string{"chromium", "chromium-browser", "google-chrome"} {
			if p, err := exec.LookPath(c); err == nil {
				chrome = p
				break
			}
		}
	}
	if chrome == "" {
		t.Skipf("no headless browser: install chromium or set %s", envChrome)
	}
	out := os.Getenv(envUIShots)
	if out == "" {
		out = t.TempDir()
	}
	must(t, os.MkdirAll(out, 0o755))
	nomadBin, bins := allBinaries(t, "the Nomad UI screenshots")
	c := startCluster(t, nomadBin, bins, []clusterClient{{Name: "v100", Fake: []string{"2x V100"}}}, "")
	killToys(t, c, bins)
	ui := uiServer(t, dist, c.HTTP)
	shot := func(state, job string) {
		t.Helper()
		screenshot(t, chrome, ui+"/ui/jobs/"+job+"@default", filepath.Join(out, state+".png"))
	}
	ui1 := func(id string) string {
		j, _, err := c.API.Jobs().Info(id, nil)
		if err != nil || j.UI == nil {
			return ""
		}
		return j.UI.Description
	}
	submit := func(id string, steps int, meta map[string]string, gpus uint64) {
		t.Helper()
		job := toyJob(t, c.API, bins, id, steps, "100ms")
		for k, v := range meta {
			job.Meta[k] = v
		}
		if gpus > 0 {
			job.TaskGroups[0].Tasks[0].Resources.Devices[0].Count = &gpus
		}
		if _, _, err := c.API.Jobs().Register(job, nil); err != nil {
			t.Fatalf("register %s: %v", id, err)
		}
	}

	// held: submitted with the hold, before hetgpu decides (the sidecar is not running yet).
	submit("long-sweep", 100000, map[string]string{"hetgpu.preemptible": "true", "hetgpu.runtime": "10h"}, 0)
	waitFor(t, 60*time.Second, "Nomad's blocked evaluation of the held job", func() bool {
		evals, _, err := c.API.Jobs().Evaluations("long-sweep", nil)
		if err != nil {
			return false
		}
		for _, e := range evals {
			if e.Status == "blocked" {
				return true
			}
		}
		return false
	})
	shot("held", "long-sweep")

	// pinned: the sidecar pins it and Nomad runs it.
	port := freePort(t)
	sidecarURL := fmt.Sprintf("http://127.0.0.1:%d", port)
	startSidecar(t, c, bins, port, fmt.Sprintf("public_url = %q\nreconcile = \"1s\"\npreemption {\n  min_run = \"0s\"\n}", sidecarURL))
	runningOn(t, c.API, "long-sweep", 90*time.Second)
	time.Sleep(3 * time.Second) // a run long enough to count in whole seconds
	shot("pinned", "long-sweep")

	// preempted: the preemptible long run gives way to a short job (which runs ten minutes,
	// long enough for the pictures below).
	submit("short-eval", 6000, map[string]string{"hetgpu.runtime": "10m"}, 0)
	waitFor(t, 90*time.Second, "long-sweep preempted for short-eval", func() bool {
		j, _, err := c.API.Jobs().Info("long-sweep", nil)
		return err == nil && scHeld(j) && strings.Contains(ui1("long-sweep"), "preempted")
	})
	runningOn(t, c.API, "short-eval", 90*time.Second)
	shot("preempted", "long-sweep")

	// waiting: every GPU is busy; hetgpu ranks it in its queue.
	submit("finetune", 100000, map[string]string{"hetgpu.runtime": "4h"}, 0)
	waitFor(t, 60*time.Second, "finetune in the sidecar's queue", func() bool {
		q, err := httpGet(sidecarURL + "/v1/queue")
		return err == nil && strings.Contains(q, "finetune")
	})
	time.Sleep(3 * time.Second) // a few rounds: whatever hetgpu writes for a waiting job is there
	shot("waiting", "finetune")

	// infeasible: more GPUs than any node has.
	submit("too-big", 1000, nil, 8)
	waitFor(t, 60*time.Second, "too-big's infeasible line", func() bool { return strings.Contains(ui1("too-big"), "cannot run on this cluster") })
	shot("infeasible", "too-big")

	// invalid: an annotation hetgpu cannot read.
	submit("bad-annotation", 1000, map[string]string{"hetgpu.runtime": "soon"}, 0)
	waitFor(t, 60*time.Second, "bad-annotation's cannot-decide line", func() bool { return strings.Contains(ui1("bad-annotation"), "hetgpu cannot decide") })
	shot("invalid", "bad-annotation")

	// released: handed back to Nomad's own scheduler (`hetgpu release`), which places it
	// itself once GPUs free up; here they are all busy, so Nomad queues it.
	rel := exec.Command(bins.Hetgpu, "release", "-address", c.HTTP, "finetune")
	rel.Env = append(os.Environ(), "NOMAD_TOKEN=")
	if b, err := rel.CombinedOutput(); err != nil {
		t.Fatalf("hetgpu release finetune: %v\n%s", err, b)
	}
	var released uint64
	waitFor(t, 60*time.Second, "finetune without the hold", func() bool {
		j, _, err := c.API.Jobs().Info("finetune", nil)
		if err == nil && !scHeld(j) {
			released = *j.JobModifyIndex
			return true
		}
		return false
	})
	// The UI shows the placement failures of the job's latest blocked evaluation: wait for
	// Nomad's own evaluation of the released version (GPUs exhausted, no hold constraint).
	waitFor(t, 60*time.Second, "Nomad's evaluation of the released job", func() bool {
		evals, _, err := c.API.Jobs().Evaluations("finetune", nil)
		if err != nil {
			return false
		}
		for _, e := range evals {
			if e.JobModifyIndex >= released && e.Status == "blocked" {
				return true
			}
		}
		return false
	})
	shot("released", "finetune")

	// The jobs list with all of them.
	screenshot(t, chrome, ui+"/ui/jobs", filepath.Join(out, "jobs-list.png"))
}
