package app

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// The sidecar with no Nomad address runs on the simulated cluster and serves the same API.
func TestSimulatedSidecar(t *testing.T) {
	t.Setenv("NOMAD_ADDR", "")
	c, err := ParseConfig("sim.hcl", []byte(`
listen    = "127.0.0.1:0"
reconcile = "200ms"
debounce  = "10ms"
simulator {
  trace = "synthetic:jobs=30,rate=3600,seed=3"
  speed = 20000
}
`))
	if err != nil {
		t.Fatal(err)
	}
	c.StateDir = t.TempDir()
	if err := c.Finish(); err != nil {
		t.Fatal(err)
	}
	s, err := New(c, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	var addr string
	select {
	case addr = <-s.Addr:
	case <-time.After(10 * time.Second):
		t.Fatal("API did not start")
	}
	get := func(path string, v any) {
		t.Helper()
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
			t.Fatal(err)
		}
	}
	var h struct {
		Backend      string
		Rounds       int
		Decisions    int
		Observations int
		StateFile    string `json:"state_file"`
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		get("/v1/health", &h)
		if h.Decisions >= 5 && h.Observations >= 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("simulated sidecar made %d decisions and %d observations in 20 s: %+v", h.Decisions, h.Observations, h)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if h.Backend != "simulated" || !strings.Contains(h.StateFile, "simulated") {
		t.Errorf("health = %+v", h)
	}
	var d struct {
		Decisions []struct {
			JobKey string `json:"job_key"`
			Status string
		}
	}
	get("/v1/decisions?limit=5", &d)
	if len(d.Decisions) == 0 || d.Decisions[0].Status != "pinned" {
		t.Errorf("decisions = %+v", d)
	}
	var ex struct{ Groups []struct{ Status string } }
	get("/v1/jobs/"+strings.Replace(strings.TrimSuffix(d.Decisions[0].JobKey, "/train"), "/", "/", 1)+"/explain", &ex)
	if len(ex.Groups) != 1 {
		t.Errorf("explain = %+v", ex)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run = %v", err)
	}
}
