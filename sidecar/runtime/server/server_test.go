package server_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/hetgpu/hetgpu/sidecar/runtime/server"
	"github.com/hetgpu/hetgpu/sidecar/runtime/service"
	"github.com/hetgpu/hetgpu/sidecar/runtime/service/servicetest"
	"github.com/hetgpu/hetgpu/sidecar/runtime/store"
)

type apiClient struct{ servicetest.Client }

func (c apiClient) do(method, path, accept, body string) (int, string, http.Header) {
	c.T.Helper()
	return c.Do(method, path, body, "Accept", accept)
}

// post sends a body with an optional Idempotency-Key.
func (c apiClient) post(path, body, key string) (int, string) {
	c.T.Helper()
	code, b, _ := c.Do(http.MethodPost, path, body, "Idempotency-Key", key)
	return code, b
}

func setup(t *testing.T, token string) (*servicetest.Harness, apiClient) {
	h := servicetest.NewHarness(t, nil)
	srv := httptest.NewServer(server.New(server.Config{Token: token}, h.Service).Handler())
	t.Cleanup(srv.Close)
	return h, apiClient{servicetest.Client{T: t, URL: srv.URL, Token: token}}
}

func TestEndpoints(t *testing.T) {
	h, c := setup(t, "")
	h.Nomad.Register(servicetest.HeldJob("resnet", 2, 1, nil))
	h.Nomad.Register(servicetest.HeldJob("huge", 64, 1, nil))
	h.Round()

	code, body, _ := c.do("GET", "/v1/health", "", "")
	var hl service.Health
	if code != 200 || json.Unmarshal([]byte(body), &hl) != nil || hl.Status != "ok" || hl.Decisions != 1 {
		t.Errorf("health %d %s", code, body)
	}
	code, body, _ = c.do("GET", "/v1/queue", "", "")
	var q service.QueueView
	if code != 200 || json.Unmarshal([]byte(body), &q) != nil || len(q.Jobs) != 2 {
		t.Fatalf("queue %d %s", code, body)
	}
	if q.Jobs[0].Score == 0 || q.Jobs[0].Features == nil || q.Jobs[1].Status != "infeasible" || !q.Jobs[1].Infeasible ||
		q.Jobs[1].Reason != "needs 64 GPUs of one type on one node; the largest node has 8 A100" {
		t.Errorf("queue entries = %+v", q.Jobs)
	}
	code, body, _ = c.do("GET", "/v1/decisions?limit=5", "", "")
	if code != 200 || !strings.Contains(body, `"status": "pinned"`) || !strings.Contains(body, `"job_key": "default/resnet/train"`) {
		t.Errorf("decisions %d %s", code, body)
	}
	code, body, _ = c.do("GET", "/v1/jobs/default/resnet/explain", "", "")
	var ex service.Explanation
	if code != 200 || json.Unmarshal([]byte(body), &ex) != nil || ex.Groups[0].Status != "pinned" || len(ex.Groups[0].Estimates) != 3 {
		t.Errorf("explain json %d %s", code, body)
	}
	for _, tc := range []struct{ path, accept string }{
		{"/v1/jobs/default/resnet/explain?format=html", ""},
		{"/v1/jobs/default/resnet/explain", "text/html,application/xhtml+xml"},
	} {
		code, body, hdr := c.do("GET", tc.path, tc.accept, "")
		if code != 200 || !strings.HasPrefix(hdr.Get("Content-Type"), "text/html") ||
			!strings.Contains(body, "Predicted per GPU type") || !strings.Contains(body, "A100 (chosen)") || !strings.Contains(body, "Alternatives considered") {
			t.Errorf("explain html %s: %d %s", tc.path, code, body)
		}
	}
	code, body, _ = c.do("GET", "/v1/jobs/default/huge/explain?format=html", "", "")
	if code != 200 || !strings.Contains(body, "cannot run on this cluster: needs 64 GPUs") {
		t.Errorf("infeasible explain html %d %s", code, body)
	}
	if code, _, _ := c.do("GET", "/v1/jobs/default/none/explain", "", ""); code != 404 {
		t.Errorf("unknown job explain = %d", code)
	}
	if code, body, _ := c.do("GET", "/v1/jobs/default/resnet/explain?format=xml", "", ""); code != 400 || !strings.Contains(body, "expected html or json") {
		t.Errorf("bad format = %d %s", code, body)
	}
	code, body, _ = c.do("GET", "/metrics", "", "")
	for _, m := range []string{"hetgpu_queue_length 2", "hetgpu_decision_latency_seconds_bucket", `hetgpu_solver_outcomes_total{fallback="false",solver="greedy"} 1`,
		`hetgpu_pins_total{result="applied"} 1`, "hetgpu_pin_conflicts_total 0"} {
		if !strings.Contains(body, m) {
			t.Errorf("metrics lack %q", m)
		}
	}
	if code, _, _ := c.do("GET", "/v1/nope", "", ""); code != 404 {
		t.Errorf("unknown path = %d", code)
	}
	if code, _, _ := c.do("DELETE", "/v1/queue", "", ""); code != 405 {
		t.Errorf("DELETE /v1/queue = %d", code)
	}
	if code, body, _ := c.do("GET", "/v1/decisions?limit=x", "", ""); code != 400 || !strings.Contains(body, "limit") {
		t.Errorf("bad limit = %d %s", code, body)
	}
}

func TestObservations(t *testing.T) {
	h, c := setup(t, "")
	good := `{"namespace":"default","job_id":"j","group":"train","gpu_type":"a100","gpus":2,"throughput":812.5,"energy_j":5e5,"runtime_s":600,"exit_code":0}`
	tests := []struct {
		name, body string
		code       int
		want       string
	}{
		{"one", good, 202, `"accepted": 1`},
		// The same record again (no key, same content) is a duplicate, not stored twice.
		{"array with a retry", "[" + good + "," + strings.Replace(good, `"j"`, `"k"`, 1) + "]", 202, `"accepted": 1,
  "duplicates": 1`},
		{"unknown field", `{"job_id":"j","group":"g","gpu_type":"a100","gpus":1,"runtime_s":1,"samples":5}`, 400, `unknown field \"samples\"`},
		{"wrong type", `{"job_id":"j","group":"g","gpu_type":"a100","gpus":"two","runtime_s":1}`, 400, "field gpus: got a JSON string, expected int"},
		{"syntax", `{"job_id":`, 400, "observation JSON"},
		{"invalid value", `{"job_id":"j","group":"g","gpu_type":"a100","gpus":0,"runtime_s":1}`, 400, "field gpus = 0: expected an integer from 1 to 4096"},
		{"unknown gpu", `{"job_id":"j","group":"g","gpu_type":"Voodoo 5","gpus":1,"runtime_s":1}`, 400, `field gpu_type = \"Voodoo 5\"`},
		{"batch all-or-nothing", "[" + good + `,{"job_id":""}]`, 400, "observation 1: field job_id"},
		{"trailing", good + good, 400, "trailing data"},
		{"too large", `{"job_id":"` + strings.Repeat("x", 9<<20) + `"}`, 413, "request body exceeds max_body_bytes = 1048576"},
		{"too many records", "[" + strings.Repeat(good+",", server.DefaultMaxObservations) + good + "]", 413, "1001 observations in one request exceed max_observations = 1000"},
		// Implausible values: 422 naming field, value and bound; nothing stored.
		{"throughput 1e300", strings.Replace(good, "812.5", "1e300", 1), 422, "field throughput = 1e+300: expected at most 39000 steps/s for 2 a100"},
		{"energy 1e300", strings.Replace(good, "5e5", "1e300", 1), 422, "field energy_j = 1e+300: expected at most"},
		{"runtime 1e300", strings.Replace(good, `"runtime_s":600`, `"runtime_s":1e300`, 1), 422, "field runtime_s = 1e+300: expected at most 3.16224e+07 s"},
		{"year 1", strings.Replace(good, `"exit_code":0`, `"exit_code":0,"time":"0001-01-01T00:00:01Z"`, 1), 422, "field time = 0001-01-01T00:00:01Z"},
		{"500 KB model name", strings.Replace(good, `"exit_code":0`, `"exit_code":0,"model_name":"`+strings.Repeat("m", 500<<10)+`"`, 1), 422, "field model_name = a string of 512000 bytes: expected at most 256 bytes"},
		{"steps beyond the runtime", strings.Replace(good, `"exit_code":0`, `"exit_code":0,"partial":true,"steps":1e9`, 1), 422, "field steps = 1e+09: expected at most"},
		{"power above TDP", strings.Replace(good, `"exit_code":0`, `"exit_code":0,"avg_power_w":5000`, 1), 422, "field avg_power_w = 5000: expected at most 1000 W"},
		{"control characters", strings.Replace(good, `"exit_code":0`, `"exit_code":0,"framework":"a\u0000b"`, 1), 400, "field framework"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, body, _ := c.do("POST", "/v1/observations", "", tt.body)
			if code != tt.code || !strings.Contains(body, tt.want) {
				t.Errorf("POST = %d %s, want %d with %q", code, body, tt.code, tt.want)
			}
		})
	}
	wantRuns(t, h, 2, 2) // bad input and duplicates are never stored
}

// wantRuns checks how many runs the store holds and the predictor learned.
func wantRuns(t *testing.T, h *servicetest.Harness, stored, learned int) {
	t.Helper()
	if n := h.Store.ObservationCount(); n != stored {
		t.Errorf("stored %d observations, want %d", n, stored)
	}
	if n := len(h.Pred.Learned()); n != learned {
		t.Errorf("learned %d observations, want %d", n, learned)
	}
}

// Records are keyed: an Idempotency-Key (per index in a batch) or an allocation and task
// stores each once whatever the retries; partial and failed runs are stored, not learned;
// the answer says exactly what happened.
func TestObservationKeys(t *testing.T) {
	h, c := setup(t, "")
	rec := func(job, extra string) string {
		return `{"job_id":"` + job + `","group":"train","gpu_type":"a100","gpus":1,"throughput":10,"runtime_s":60` + extra + `}`
	}
	steps := []struct {
		name, key, body string
		want            []string
	}{
		{"keyed", "task-1", rec("a", ""), []string{`"accepted": 1`, `"duplicates": 0`, `"learned": 1`}},
		{"same key, other content", "task-1", rec("a", `,"runtime_s":61`), []string{`"accepted": 0`, `"duplicates": 1`, `"duplicate_of": "idem/task-1"`}},
		{"batch under a key", "batch-1", "[" + rec("b", "") + "," + rec("c", "") + "]", []string{`"accepted": 2`}},
		{"batch retried", "batch-1", "[" + rec("b", "") + "," + rec("c", "") + "]", []string{`"accepted": 0`, `"duplicates": 2`}},
		{"allocation and task", "", rec("d", `,"alloc_id":"A1","task":"train"`), []string{`"accepted": 1`}},
		{"same allocation, new key", "other", rec("d", `,"alloc_id":"A1","task":"train","runtime_s":62`), []string{`"duplicates": 1`, `"duplicate_of": "alloc/A1/train"`}},
		{"partial run", "", rec("e", `,"partial":true`), []string{`"accepted": 1`, `"learned": 0`, `"partial": 1`}},
		{"failed run", "", rec("f", `,"exit_code":137`), []string{`"accepted": 1`, `"learned": 0`, `"partial": 1`}},
	}
	for _, st := range steps {
		code, body := c.post("/v1/observations", st.body, st.key)
		for _, w := range st.want {
			if code != 202 || !strings.Contains(body, w) {
				t.Errorf("%s: %d %s, want 202 with %s", st.name, code, body, w)
			}
		}
	}
	wantRuns(t, h, 6, 4) // the partial and failed runs are stored, not learned
}

func TestToken(t *testing.T) {
	_, c := setup(t, "s3cret")
	anon := c
	anon.Token = ""
	if code, _, _ := anon.do("GET", "/v1/health", "", ""); code != 200 && code != 503 {
		t.Errorf("health without token = %d, want it open", code)
	}
	for _, p := range []string{"/v1/queue", "/metrics", "/v1/decisions"} {
		if code, _, hdr := anon.do("GET", p, "", ""); code != 401 || hdr.Get("WWW-Authenticate") == "" {
			t.Errorf("%s without token = %d", p, code)
		}
	}
	wrong := c
	wrong.Token = "guess"
	if code, _, _ := wrong.do("POST", "/v1/observations", "", "{}"); code != 401 {
		t.Errorf("wrong token = %d", code)
	}
	if code, _, _ := c.do("GET", "/v1/queue", "", ""); code != 200 {
		t.Errorf("right token = %d", code)
	}
}

func FuzzObservations(f *testing.F) {
	f.Add(`{"job_id":"j","group":"g","gpu_type":"a100","gpus":2,"throughput":1,"runtime_s":1}`)
	f.Add(`[{"job_id":"j"}]`)
	f.Add(`{"time":"2026-13-40T99:00:00Z"}`)
	f.Add(`[[[[`)
	h := servicetest.NewHarness(f, nil)
	handler := server.New(server.Config{}, h.Service).Handler()
	f.Fuzz(func(t *testing.T, body string) {
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, httptest.NewRequest("POST", "/v1/observations", strings.NewReader(body)))
		if rec.Code == 500 {
			t.Fatalf("500 for %q: %s", body, rec.Body)
		}
		if rec.Code != 202 && !strings.Contains(rec.Body.String(), `"error"`) {
			t.Fatalf("%d without an error message: %s", rec.Code, rec.Body)
		}
	})
}

// TestListObservations: GET /v1/observations lists stored records newest first, filtered by
// job, bounded by limit.
func TestListObservations(t *testing.T) {
	_, c := setup(t, "")
	rec := func(job, alloc string, partial bool) string {
		return fmt.Sprintf(`{"namespace":"default","job_id":%q,"group":"train","alloc_id":%q,"partial":%v,"gpu_type":"a100","gpus":2,"throughput":812.5,"energy_j":5e5,"runtime_s":600}`, job, alloc, partial)
	}
	for _, b := range []string{rec("a", "a1", true), rec("b", "b1", false), rec("a", "a2", false)} {
		if code, body, _ := c.do("POST", "/v1/observations", "", b); code != 202 {
			t.Fatalf("POST = %d %s", code, body)
		}
	}
	list := func(query string) []store.ObservationRecord {
		t.Helper()
		code, body, _ := c.do("GET", "/v1/observations"+query, "", "")
		if code != 200 {
			t.Fatalf("GET %s = %d %s", query, code, body)
		}
		var r struct {
			Observations []store.ObservationRecord `json:"observations"`
		}
		if err := json.Unmarshal([]byte(body), &r); err != nil {
			t.Fatal(err)
		}
		return r.Observations
	}
	if got := list("?job=a"); len(got) != 2 || got[0].Obs.AllocID != "a2" || got[1].Obs.AllocID != "a1" || !got[1].Obs.Partial || got[0].Source != "driver" {
		t.Errorf("job a, newest first = %+v", got)
	}
	if got := list("?limit=1"); len(got) != 1 || got[0].Obs.AllocID != "a2" {
		t.Errorf("limit 1 = %+v", got)
	}
	if got := list(""); len(got) != 3 {
		t.Errorf("all = %d records, want 3", len(got))
	}
	if code, body, _ := c.do("GET", "/v1/observations?limit=0", "", ""); code != 400 || !strings.Contains(body, "limit") {
		t.Errorf("bad limit = %d %s", code, body)
	}
}
