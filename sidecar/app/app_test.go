package app

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/hetgpu/hetgpu/sidecar/rank"
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

// Online tuning is on by default with the bundled policy (it carries its training state), off
// when configured so; a tuned policy in the state directory is preferred to the bundled one.
func TestStagesTuningAndPreemption(t *testing.T) {
	dir := t.TempDir()
	load := func(src string) *Config {
		c, err := ParseConfig("t.hcl", []byte(src))
		if err != nil {
			t.Fatal(err)
		}
		c.StateDir = dir
		if err := c.Finish(); err != nil {
			t.Fatal(err)
		}
		return c
	}
	st, ref, err := Stages(load(""), dir, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	if st.Tuner == nil || st.Preemptor == nil || ref != "bundled:default" {
		t.Fatalf("defaults: tuner %v, preemptor %v, policy %q", st.Tuner != nil, st.Preemptor != nil, ref)
	}
	st, _, err = Stages(load("ranker {\n online_tuning = false\n}\npreemption {\n enabled = false\n}"), dir, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	if st.Tuner != nil || st.Preemptor != nil {
		t.Fatal("online_tuning = false or preemption.enabled = false ignored")
	}
	ck, err := rank.DefaultCheckpoint()
	if err != nil || ck == nil {
		t.Fatalf("bundled checkpoint: %v", err)
	}
	tuned := filepath.Join(dir, TunedPolicyFile)
	if err := ck.Save(tuned); err != nil {
		t.Fatal(err)
	}
	if _, ref, err = Stages(load(""), dir, hclog.NewNullLogger()); err != nil || ref != "tuned:"+tuned {
		t.Fatalf("with a tuned policy saved: policy %q, err %v", ref, err)
	}
	if err := os.WriteFile(tuned, []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err = Stages(load(""), dir, hclog.NewNullLogger()); err == nil || !strings.Contains(err.Error(), "delete it") {
		t.Fatalf("a corrupt tuned policy: %v", err)
	}
}
