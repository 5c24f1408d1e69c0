package dashboard_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/hashicorp/nomad/api"

	"github.com/hetgpu/hetgpu/sidecar/runtime/dashboard"
	"github.com/hetgpu/hetgpu/sidecar/runtime/server"
	"github.com/hetgpu/hetgpu/sidecar/runtime/service/servicetest"
)

type client struct{ servicetest.Client }

func (c client) get(path string) (int, string, http.Header) {
	c.T.Helper()
	return c.Do(http.MethodGet, path, "")
}

func (c client) post(path, body string) int {
	c.T.Helper()
	code, _, _ := c.Do(http.MethodPost, path, body)
	return code
}

// nomadSidecar is the service on the Nomad backend against the fake Nomad (4x T4, 8x V100,
// 8x A100), behind the real API server with a token, after one round that pinned one job and
// left a 64-GPU job waiting.
func nomadSidecar(t *testing.T) (*servicetest.Harness, client) {
	h := servicetest.NewHarness(t, nil)
	h.Nomad.Register(servicetest.HeldJob("resnet", 2, 1, nil))
	h.Nomad.Register(servicetest.HeldJob("huge", 64, 1, nil))
	h.Round()
	srv := httptest.NewServer(server.New(server.Config{Token: "s3cret", NomadURL: "http://nomad.example:4646"}, h.Service).Handler())
	t.Cleanup(srv.Close)
	return h, client{servicetest.Client{T: t, URL: srv.URL, Token: "s3cret"}}
}

func TestFleetEndpointOnNomad(t *testing.T) {
	h, c := nomadSidecar(t)
	// The device plugin's readings, as node stats publish them.
	a100 := h.Nomad.Allocs("default", "resnet")
	if len(a100) != 1 || len(a100[0].AllocatedResources.Tasks["train"].Devices) != 1 {
		t.Fatalf("the fake Nomad did not place the pinned job: %+v", a100)
	}
	held := a100[0].AllocatedResources.Tasks["train"].Devices[0].DeviceIDs
	util, temp := int64(87), int64(61)
	used, total := int64(30000), int64(40960)
	h.Nomad.SetPower(held[0], 312.5)
	h.Nomad.SetTopology(held[0], map[string]*api.StatValue{
		"gpu_utilization": {IntNumeratorVal: &util, Unit: "%"},
		"memory":          {IntNumeratorVal: &used, IntDenominatorVal: &total, Unit: "MiB"},
		"temperature":     {IntNumeratorVal: &temp, Unit: "C"},
	})
	h.Round()

	code, body, _ := c.get("/v1/fleet")
	var fl dashboard.Fleet
	if code != 200 || json.Unmarshal([]byte(body), &fl) != nil {
		t.Fatalf("/v1/fleet %d %s", code, body)
	}
	if fl.Backend != "nomad" || fl.NodeCount != 3 || fl.GPUCount != 20 || len(fl.Totals) != 3 {
		t.Fatalf("fleet = %d nodes, %d GPUs, totals %+v", fl.NodeCount, fl.GPUCount, fl.Totals)
	}
	busy, found := 0, false
	for _, n := range fl.Nodes {
		for _, g := range n.GPUs {
			if g.State == dashboard.StateBusy {
				busy++
				if len(g.Allocs) != 1 || g.Allocs[0].JobID != "resnet" {
					t.Errorf("busy GPU %s holders %+v", g.ID, g.Allocs)
				}
			}
			if g.ID == held[0] {
				found = true
				st := g.Stats
				if st == nil || st.PowerW == nil || *st.PowerW != 312.5 || *st.UtilPct != 87 || *st.TempC != 61 ||
					*st.MemUsedMiB != 30000 || *st.MemTotalMiB != 40960 || st.PowerLimitW != nil {
					t.Errorf("readings of %s = %s", g.ID, body)
				}
			}
		}
	}
	if busy != 2 || !found {
		t.Errorf("%d busy GPUs (want the pinned job's 2), reading of %s found %t", busy, held[0], found)
	}

	for _, tc := range []struct {
		query string
		code  int
		gpus  int
		want  string
	}{
		{"?gpu_type=T4", 200, 4, ""},
		{"?state=busy", 200, 2, ""},
		{"?health=unhealthy", 200, 0, ""},
		{"?health=sick", 400, 0, "health = \\\"sick\\\""},
		{"?state=asleep", 400, 0, "state = \\\"asleep\\\""},
	} {
		code, body, _ := c.get("/v1/fleet" + tc.query)
		if code != tc.code || !strings.Contains(body, tc.want) {
			t.Errorf("%s: %d %s", tc.query, code, body)
			continue
		}
		if code == 200 {
			var f dashboard.Fleet
			_ = json.Unmarshal([]byte(body), &f)
			n := 0
			for _, nd := range f.Nodes {
				n += len(nd.GPUs)
			}
			if n != tc.gpus {
				t.Errorf("%s selects %d GPUs, want %d", tc.query, n, tc.gpus)
			}
		}
	}
}

func TestRunsEndpoints(t *testing.T) {
	_, c := nomadSidecar(t)
	// The pinned job's run as the task driver reports it (2 A100s; energy = average power ×
	// runtime, as a real record), and one of a job hetgpu never decided for.
	if code := c.post("/v1/observations", `[
	  {"namespace":"default","job_id":"resnet","group":"train","gpu_type":"a100","gpus":2,"throughput":1120,"energy_j":600000,"avg_power_w":500,"runtime_s":1200,"batch_size":64},
	  {"namespace":"other","job_id":"x","group":"g","gpu_type":"t4","gpus":1,"throughput":2,"energy_j":36000,"runtime_s":600}]`); code != http.StatusAccepted {
		t.Fatalf("posting observations: %d", code)
	}
	code, body, _ := c.get("/v1/energy")
	var en dashboard.Energy
	if code != 200 || json.Unmarshal([]byte(body), &en) != nil || en.Runs != 2 || len(en.ByType) != 2 || len(en.ByNamespace) != 2 {
		t.Fatalf("/v1/energy %d %s", code, body)
	}
	if g := en.ByType[0]; g.Key != "a100" || g.JPerStep != 600000/(1120*1200.0) || g.JPerSample != 600000/(1120*1200*64.0) {
		t.Errorf("a100 energy = %+v", g)
	}
	code, body, _ = c.get("/v1/learning")
	var l dashboard.Learning
	if code != 200 || json.Unmarshal([]byte(body), &l) != nil || l.Runs != 2 || len(l.Points) != 1 {
		t.Fatalf("/v1/learning %d %s", code, body)
	}
	// servicetest's table predicts 700 steps/s and 300 W per A100.
	if p := l.Points[0]; p.JobKey != "default/resnet/train" || p.PredThroughput != 1400 || p.Throughput != 1120 || p.PredPowerW != 600 ||
		p.PowerW != 500 || p.ThrErr != 0.25 || p.PowerErr != 0.2 {
		t.Errorf("learning point = %+v", p)
	}
}

// Every dashboard route sits behind the API's token, as the other read endpoints.
func TestPagesAndAuth(t *testing.T) {
	_, c := nomadSidecar(t)
	anon := client{servicetest.Client{T: t, URL: c.URL}}
	for _, tc := range []struct {
		path, contains string
	}{
		{"/ui/fleet", `data-gpus="20" data-nodes="3"`},
		{"/ui/fleet?gpu_type=v100&health=healthy", `data-gpu="`},
		{"/ui/queue", `href="http://nomad.example:4646/ui/jobs/huge@default"`},
		{"/ui/decisions?job=res", `href="/v1/jobs/default/resnet/explain?format=html"`},
		{"/ui/learning", `<svg class="plot"`},
		{"/ui/energy", `<svg class="plot"`},
		{"/v1/fleet", `"gpu_count": 20`},
		{"/v1/energy", `"runs": 0`},
		{"/v1/learning", `"policy"`},
	} {
		code, body, hdr := c.get(tc.path)
		if code != 200 || !strings.Contains(body, tc.contains) {
			t.Errorf("GET %s: %d, want 200 with %q; %.300s", tc.path, code, tc.contains, body)
		}
		if strings.HasPrefix(tc.path, "/ui/") && !strings.HasPrefix(hdr.Get("Content-Type"), "text/html") {
			t.Errorf("GET %s: Content-Type %q", tc.path, hdr.Get("Content-Type"))
		}
		if code, _, _ := anon.get(tc.path); code != http.StatusUnauthorized {
			t.Errorf("GET %s without the token: %d, want 401", tc.path, code)
		}
	}
	// The queue page explains why the 64-GPU job waits: no GPU type has 64 free (in the
	// page's words, or the queue's own reason where the queue gives one).
	_, body, _ := c.get("/ui/queue")
	if !strings.Contains(body, "<li>needs 64 GPUs") && !strings.Contains(body, ": needs 64 GPUs") {
		t.Errorf("queue page does not say why the 64-GPU job waits:\n%s", body)
	}
	// The round pinned resnet to 2 of the 8 A100s; the snapshot still shows them free.
	if !strings.Contains(body, "6 A100, 4 T4, 8 V100") {
		t.Errorf("queue page's free GPUs do not count this round's placement:\n%s", body)
	}
	if code, _, hdr := c.get("/ui/"); code != 200 || hdr.Get("Content-Type") == "" {
		// http.Get follows the redirect to /ui/fleet (with the token: same client).
		t.Errorf("GET /ui/: %d", code)
	}
	if code, _, _ := c.get("/ui/nope"); code != http.StatusNotFound {
		t.Errorf("GET /ui/nope: %d", code)
	}
	// The index and the explain page link to the dashboard.
	if _, body, _ := c.get("/"); !strings.Contains(body, `href="/ui/fleet"`) {
		t.Errorf("index does not link the dashboard")
	}
	if _, body, _ := c.get("/v1/jobs/default/resnet/explain?format=html"); !strings.Contains(body, `href="/ui/fleet"`) {
		t.Errorf("explain page does not link the dashboard")
	}
}
