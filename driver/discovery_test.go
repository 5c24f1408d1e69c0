package driver

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/hetgpu/hetgpu/driver/report"
	"github.com/hetgpu/hetgpu/model/cluster"
)

// nomadServices answers GET /v1/service/{name} as the agent does
// (command/agent/service_registration_endpoint.go): a JSON array of registrations with
// Nomad's field names, [] when none, and the index headers.
type nomadServices struct {
	mu    sync.Mutex
	regs  map[string][]map[string]any
	asked []string // X-Nomad-Token of each request
}

func (n *nomadServices) set(name string, urls map[string][]string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	var regs []map[string]any
	i := 0
	for raw, tags := range urls {
		u, _ := url.Parse(raw)
		host, port, _ := net.SplitHostPort(u.Host)
		p, _ := strconv.Atoi(port)
		i++
		regs = append(regs, map[string]any{
			"ID": fmt.Sprintf("_nomad-task-%d-sidecar-%s-http", i, name), "ServiceName": name, "Namespace": "default",
			"NodeID": "node-1", "Datacenter": "dc1", "JobID": "hetgpu-sidecar", "AllocID": fmt.Sprintf("alloc-%d", i),
			"Tags": tags, "Address": host, "Port": p, "CreateIndex": 10 + i, "ModifyIndex": 10 + i,
		})
	}
	n.regs = map[string][]map[string]any{name: regs}
}

func (n *nomadServices) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n.mu.Lock()
	defer n.mu.Unlock()
	name, ok := strings.CutPrefix(r.URL.Path, "/v1/service/")
	if !ok || r.Method != http.MethodGet {
		http.NotFound(w, r)
		return
	}
	n.asked = append(n.asked, r.Header.Get("X-Nomad-Token")+" ns="+r.URL.Query().Get("namespace"))
	regs := n.regs[name]
	if regs == nil {
		regs = []map[string]any{}
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Nomad-Index", "42")
	w.Header().Set("X-Nomad-Knownleader", "true")
	w.Header().Set("X-Nomad-Lastcontact", "0")
	_ = json.NewEncoder(w).Encode(regs)
}

// replica takes observations with the write token; as a standby it redirects writers to
// the leader with 307, as the HA sidecar does.
type replica struct {
	mu       sync.Mutex
	leader   string // set: answer 307 to this base URL
	got      int
	auths    []string
	srv      *httptest.Server
	failNext bool
}

func newReplica(t *testing.T) *replica {
	f := &replica{}
	f.srv = httptest.NewServer(f)
	t.Cleanup(f.srv.Close)
	return f
}

func (f *replica) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.leader != "" {
		http.Redirect(w, r, f.leader+r.URL.Path, http.StatusTemporaryRedirect)
		return
	}
	f.auths = append(f.auths, r.Header.Get("Authorization"))
	var o cluster.Observation
	if b, _ := io.ReadAll(r.Body); json.Unmarshal(b, &o) != nil || o.JobID == "" {
		http.Error(w, "empty or bad body", http.StatusBadRequest)
		return
	}
	if r.Header.Get("Authorization") != "Bearer w-token" {
		http.Error(w, "wrong token", http.StatusUnauthorized)
		return
	}
	f.got++
	w.WriteHeader(http.StatusAccepted)
	_, _ = io.WriteString(w, `{"accepted":1}`)
}

func (f *replica) count() int { f.mu.Lock(); defer f.mu.Unlock(); return f.got }

// TestSidecarThroughNomadService: the driver finds the sidecar by its Nomad service name,
// prefers the replica tagged leader, follows a standby's 307 with body and token, and finds
// the sidecar again once the one it used is gone.
func TestSidecarThroughNomadService(t *testing.T) {
	nomad := &nomadServices{}
	nsrv := httptest.NewServer(nomad)
	defer nsrv.Close()
	leader, standby := newReplica(t), newReplica(t)
	// Another host name: Go's client drops Authorization on a redirect to another host.
	standby.leader = strings.Replace(leader.srv.URL, "127.0.0.1", "localhost", 1)
	reporter := func(t *testing.T) *report.Reporter {
		cfg := defaultPluginConfig()
		cfg.SidecarService, cfg.NomadAddress, cfg.NomadToken, cfg.SidecarToken = "hetgpu-sidecar", nsrv.URL, "nomad-secret", "w-token"
		cfg.NomadNamespace = "infra"
		cfg.SpoolDir = t.TempDir()
		if err := checkSidecarConfig(cfg); err != nil {
			t.Fatal(err)
		}
		rc, err := reportConfig(cfg, hclog.NewNullLogger())
		if err != nil {
			t.Fatal(err)
		}
		rep, err := report.New(rc)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := rep.Submit("", cluster.Observation{Namespace: "default", JobID: "j", Group: "g", GPUType: "a100", GPUs: 1, RuntimeS: 1}); err != nil {
			t.Fatal(err)
		}
		return rep
	}
	tests := []struct {
		name            string
		services        map[string][]string
		wantErr         string
		leader, standby int // records each replica took in this case
	}{
		{"no instance registered", nil, `Nomad service "hetgpu-sidecar": no instance registered`, 0, 0},
		{"the replica tagged leader", map[string][]string{standby.srv.URL: {"http"}, leader.srv.URL: {"http", LeaderTag}}, "", 1, 0},
		{"only a standby: 307 to the leader", map[string][]string{standby.srv.URL: nil}, "", 1, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			nomad.set("hetgpu-sidecar", tt.services)
			l0, s0 := leader.count(), standby.count()
			err := reporter(t).Flush(context.Background())
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("Flush = %v, want %q", err, tt.wantErr)
			}
			if leader.count()-l0 != tt.leader || standby.count()-s0 != tt.standby {
				t.Errorf("leader took %d, standby %d; want %d, %d", leader.count()-l0, standby.count()-s0, tt.leader, tt.standby)
			}
		})
	}
	for _, a := range leader.auths {
		if a != "Bearer w-token" {
			t.Errorf("the leader got Authorization %q; the token must follow the redirect", a)
		}
	}
	for _, tok := range nomad.asked {
		if tok != "nomad-secret ns=infra" {
			t.Errorf("Nomad was asked with %q, want nomad_token in nomad_namespace", tok)
		}
	}

	// The sidecar moves: the first delivery fails on the old address, the next one asks
	// Nomad again and reaches the new one.
	old, moved := newReplica(t), newReplica(t)
	nomad.set("hetgpu-sidecar", map[string][]string{old.srv.URL: nil})
	rep := reporter(t)
	if err := rep.Flush(context.Background()); err != nil || old.count() != 1 {
		t.Fatalf("first delivery: %v, old replica took %d", err, old.count())
	}
	old.srv.Close()
	nomad.set("hetgpu-sidecar", map[string][]string{moved.srv.URL: {LeaderTag}})
	if _, err := rep.Submit("", cluster.Observation{Namespace: "default", JobID: "j2", Group: "g", GPUType: "a100", GPUs: 1, RuntimeS: 1}); err != nil {
		t.Fatal(err)
	}
	if err := rep.Flush(context.Background()); err == nil {
		t.Fatal("delivery to the closed replica succeeded")
	}
	if err := rep.Flush(context.Background()); err != nil || moved.count() != 1 {
		t.Fatalf("after the move: %v, new replica took %d, want 1", err, moved.count())
	}
}

func TestSidecarConfigErrors(t *testing.T) {
	tests := []struct {
		name string
		set  func(c *PluginConfig)
		want string
	}{
		{"both", func(c *PluginConfig) { c.SidecarAddr, c.SidecarService = "http://x:1", "s" }, `want one of them`},
		{"bad nomad address", func(c *PluginConfig) { c.SidecarService, c.NomadAddress = "s", "127.0.0.1:4646" }, `"nomad_address": got "127.0.0.1:4646"`},
		{"cert without key", func(c *PluginConfig) { c.SidecarCertFile = "/c.pem" }, `"sidecar_key_file" = "": want both`},
	}
	for _, tt := range tests {
		c := defaultPluginConfig()
		tt.set(&c)
		if err := checkSidecarConfig(c); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want %q", tt.name, err, tt.want)
		}
	}
	c := defaultPluginConfig()
	c.SidecarCAFile = "/nope/ca.pem"
	if _, err := sidecarTLS(c); err == nil || !strings.Contains(err.Error(), `"sidecar_ca_file" = "/nope/ca.pem"`) {
		t.Errorf("missing CA file: %v", err)
	}
}
