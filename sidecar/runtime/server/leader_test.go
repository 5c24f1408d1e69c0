package server_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/hetgpu/hetgpu/sidecar/backends/nomad"
	"github.com/hetgpu/hetgpu/sidecar/runtime/server"
	"github.com/hetgpu/hetgpu/sidecar/runtime/service"
	"github.com/hetgpu/hetgpu/sidecar/runtime/service/servicetest"
)

// replica is a sidecar API with a settable role.
func replica(t *testing.T) (*servicetest.Harness, *servicetest.Leadership, *httptest.Server) {
	l := &servicetest.Leadership{}
	h := servicetest.NewHarness(t, func(c *service.Config, _ *nomad.Config) { c.Leadership = l })
	srv := httptest.NewServer(server.New(server.Config{}, h.Service).Handler())
	t.Cleanup(srv.Close)
	return h, l, srv
}

// A standby answers reads itself and sends writers to the leader with 307 (a client that
// follows it stores the run at the leader only); with no leader known it answers 503.
func TestStandbyRedirectsWrites(t *testing.T) {
	lh, ll, lsrv := replica(t)
	sh, sl, ssrv := replica(t)
	ll.Set(true, lsrv.URL)
	body := `{"namespace":"default","job_id":"resnet","group":"train","gpu_type":"a100","gpus":1,"throughput":10,"runtime_s":60,"alloc_id":"a1"}`
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, tc := range []struct {
		name     string
		leader   string
		wantCode int
		wantLoc  string
	}{
		{"no leader known", "", http.StatusServiceUnavailable, ""},
		{"leader known", lsrv.URL, http.StatusTemporaryRedirect, lsrv.URL + "/v1/observations?x=1"},
	} {
		sl.Set(false, tc.leader)
		resp, err := noFollow.Post(ssrv.URL+"/v1/observations?x=1", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.wantCode || resp.Header.Get("Location") != tc.wantLoc {
			t.Fatalf("%s: POST on a standby = %d Location %q; want %d %q", tc.name, resp.StatusCode, resp.Header.Get("Location"), tc.wantCode, tc.wantLoc)
		}
	}
	// Go's client (the task driver's) follows the redirect with the body.
	resp, err := http.Post(ssrv.URL+"/v1/observations", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted || lh.Store.ObservationCount() != 1 || sh.Store.ObservationCount() != 0 {
		t.Fatalf("followed POST = %d; leader holds %d runs, standby %d; want 202, 1, 0", resp.StatusCode, lh.Store.ObservationCount(), sh.Store.ObservationCount())
	}
	// Reads stay on the standby; its health names the leader.
	var hl map[string]any
	resp, err = noFollow.Get(ssrv.URL + "/v1/health")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&hl); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || hl["role"] != "standby" || hl["leader"] != lsrv.URL || hl["replica_id"] != "test-replica" {
		t.Fatalf("standby health = %d %v", resp.StatusCode, hl)
	}
}
