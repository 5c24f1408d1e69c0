package dashboard_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/hetgpu/hetgpu/sidecar/runtime/app"
	"github.com/hetgpu/hetgpu/sidecar/runtime/service"
)

// simSidecar assembles the sidecar as `hetgpu sidecar` does without Nomad (app.New: the
// simulated backend, the production stages, store, service and API) and drives the simulated
// clock itself, one round per step, so the state the pages show holds still while the
// browser reads them.
func simSidecar(t testing.TB, hours float64) (*app.Sidecar, *httptest.Server) {
	t.Helper()
	t.Setenv("NOMAD_ADDR", "")
	c, err := app.ParseConfig("dashboard.hcl", []byte(`
simulator {
  cluster = "modern-mix"
  trace   = "synthetic:jobs=400,rate=90,seed=7"
}
ranker {
  # Forced, so the learning page shows a learned policy's provenance whatever its verdict.
  policy        = "bundled:default"
  online_tuning = false
}
`))
	if err != nil {
		t.Fatal(err)
	}
	c.StateDir = t.TempDir()
	if err := c.Finish(); err != nil {
		t.Fatal(err)
	}
	s, err := app.New(c, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Store.Close() })
	sb, ok := s.Backend.(*app.SimBackend)
	if !ok {
		t.Fatalf("backend is %T, want the simulated one", s.Backend)
	}
	ctx := context.Background()
	for simT := 0.0; simT <= hours*3600; simT += 600 {
		sb.Engine().AdvanceTo(simT)
		if _, err := s.Service.Round(ctx); err != nil {
			t.Fatalf("round at %.0f s: %v", simT, err)
		}
	}
	srv := httptest.NewServer(s.Server.Handler())
	t.Cleanup(srv.Close)
	return s, srv
}

// chromium finds the browser: HETGPU_CHROMIUM, else Debian's chromium (or Chrome) on PATH.
func chromium() string {
	if p := os.Getenv("HETGPU_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// outDir is out/dashboard at the repository root (gitignored), for screenshots to review.
func outDir(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			break
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = parent
	}
	out := filepath.Join(dir, "out", "dashboard")
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	return out
}

func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
}

// TestDashboardInBrowser loads every page in headless Chromium against the embedded
// simulated sidecar.
func TestDashboardInBrowser(t *testing.T) {
	exe := chromium()
	if exe == "" {
		t.Skip("Chromium not found on PATH (nor HETGPU_CHROMIUM): run `make browser` to install Debian's chromium package")
	}
	start := time.Now()
	_, srv := simSidecar(t, 4)
	t.Logf("simulated sidecar ready in %v", time.Since(start).Round(time.Millisecond))

	var fleet struct {
		NodeCount int `json:"node_count"`
		GPUCount  int `json:"gpu_count"`
	}
	getJSON(t, srv.URL+"/v1/fleet", &fleet)
	if fleet.GPUCount != 64 || fleet.NodeCount != 12 {
		t.Fatalf("/v1/fleet: %d GPUs on %d nodes, modern-mix has 64 on 12", fleet.GPUCount, fleet.NodeCount)
	}
	var queue service.QueueView
	getJSON(t, srv.URL+"/v1/queue", &queue)
	if len(queue.Jobs) == 0 {
		t.Fatal("the simulated workload left no job waiting; the queue page would test nothing")
	}

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(exe), chromedp.NoSandbox,
		chromedp.Flag("disable-gpu", true), chromedp.WindowSize(1280, 900))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start Chromium %s: %v", exe, err)
	}
	var mu sync.Mutex
	var problems []string
	go func() {
		for m, err := range chromedp.Console(ctx) {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.IsException() {
				mu.Lock()
				problems = append(problems, m.String()+" at "+m.URL)
				mu.Unlock()
			}
		}
	}()
	run := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		tctx, tcancel := context.WithTimeout(ctx, 20*time.Second)
		defer tcancel()
		if err := chromedp.Do(tctx, steps...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	eval := func(expr string, v any) {
		t.Helper()
		tctx, tcancel := context.WithTimeout(ctx, 10*time.Second)
		defer tcancel()
		raw, err := chromedp.Run(tctx, chromedp.Evaluate[json.RawMessage](expr))
		if err != nil {
			t.Fatalf("evaluate %s: %v", expr, err)
		}
		if err := json.Unmarshal(raw, v); err != nil {
			t.Fatalf("evaluate %s: %v", expr, err)
		}
	}
	out := outDir(t)
	for _, tc := range []struct {
		page string
		// check is a script that is true when the page shows what it should.
		check string
	}{
		{"fleet", `document.querySelectorAll('.gpu').length === 64 && document.querySelectorAll('#totals tr').length === 5`},
		{"queue", `document.querySelectorAll('#queue tr[data-job-key] .why li').length > 0`},
		{"decisions", `document.querySelectorAll('#decisions tr').length > 1 && document.querySelector('svg.plot') !== null`},
		{"learning", `document.querySelector('#policy').textContent === 'bundled:default' && document.querySelector('#policy-meta') !== null && document.querySelectorAll('#errors tr').length > 1`},
		{"energy", `Number(document.querySelector('#energy-runs').textContent) > 0 && document.querySelectorAll('svg.plot').length === 3`},
	} {
		page := tc.page
		run(page, chromedp.Navigate(srv.URL+"/ui/"+page), chromedp.WaitReady("main"))
		var ok bool
		eval(tc.check, &ok)
		if !ok {
			t.Errorf("%s page: %s is false", page, tc.check)
		}
		var size struct{ GPUs, Nodes, Title string }
		eval(`({GPUs: document.querySelector('#fleet-size').dataset.gpus, Nodes: document.querySelector('#fleet-size').dataset.nodes, Title: document.title})`, &size)
		if size.GPUs != "64" || size.Nodes != "12" {
			t.Errorf("%s page shows %s GPUs on %s nodes, want 64 on 12", page, size.GPUs, size.Nodes)
		}
		if !strings.Contains(strings.ToLower(size.Title), page) {
			t.Errorf("%s page title %q", page, size.Title)
		}
		shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatalf("%s screenshot: %v", page, err)
		}
		if err := os.WriteFile(filepath.Join(out, page+".png"), shot, 0o644); err != nil {
			t.Fatal(err)
		}
		// The top of the page at the window's size (the README shows the fleet's).
		top, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(out, page+"-top.png"), top, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	// The queue page lists /v1/queue's jobs in rank order.
	run("queue", chromedp.Navigate(srv.URL+"/ui/queue"), chromedp.WaitReady("#queue"))
	var keys []string
	eval(`Array.from(document.querySelectorAll('#queue tr[data-job-key]')).map(r => r.dataset.jobKey)`, &keys)
	if len(keys) != len(queue.Jobs) {
		t.Fatalf("queue page lists %d jobs, /v1/queue %d", len(keys), len(queue.Jobs))
	}
	for i, j := range queue.Jobs {
		if keys[i] != j.JobKey {
			t.Fatalf("queue page row %d is %s, /v1/queue rank %d is %s", i+1, keys[i], j.Rank, j.JobKey)
		}
	}

	// A job's link opens its explain page.
	first := queue.Jobs[0]
	run("open a job", chromedp.Click(`#queue tr[data-job-key] a.job`), chromedp.WaitReady("h1"))
	var ex struct{ Path, H1 string }
	eval(`({Path: location.pathname, H1: document.querySelector('h1').textContent})`, &ex)
	if ex.Path != "/v1/jobs/"+first.Namespace+"/"+first.JobID+"/explain" || !strings.Contains(ex.H1, first.JobID) {
		t.Errorf("the first queue link opened %s (heading %q), want the explain page of %s", ex.Path, ex.H1, first.JobKey)
	}
	shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err == nil {
		err = os.WriteFile(filepath.Join(out, "explain.png"), shot, 0o644)
	}
	if err != nil {
		t.Fatal(err)
	}

	// Console messages arrive asynchronously; give the last ones a moment.
	time.Sleep(200 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	for _, p := range problems {
		t.Errorf("browser console: %s", p)
	}
	t.Logf("pages checked in %v; screenshots in %s", time.Since(start).Round(time.Millisecond), out)
}
