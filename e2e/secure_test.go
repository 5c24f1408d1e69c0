package e2e

// The secured sidecar on a real agent: HTTPS with client certificates (mTLS) from a CA the
// test generates, read/write/admin tokens, the signed explain link Nomad's UI shows, and the
// task driver delivering run records with the write token and refused with the read token.

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/hetgpu/hetgpu/internal/testcerts"
)

// secureSidecar is a sidecar serving HTTPS with mTLS and tokens.
type secureSidecar struct {
	url    string // https://127.0.0.1:port
	client *http.Client
	proc   *proc
}

const (
	e2eAdminToken = "admin-4f1c"
	e2eReadToken  = "read-77aa"
	e2eWriteToken = "write-9b3e"
)

// get does a GET with an optional bearer token and returns the status, body and type.
func (s *secureSidecar) get(t *testing.T, path, token string) (int, string, string) {
	t.Helper()
	req, err := http.NewRequest("GET", s.url+path, nil)
	must(t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return 0, err.Error(), ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header.Get("Content-Type")
}

// tlsClient trusts the test CA and, when cert is set, presents that client certificate.
func tlsClient(t *testing.T, ca, cert, key string) *http.Client {
	t.Helper()
	tc := &tls.Config{RootCAs: testcerts.Pool(t, ca)}
	if cert != "" {
		tc.Certificates = []tls.Certificate{testcerts.Pair(t, cert, key)}
	}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: tc}}
}

// startSecureSidecar runs the sidecar on all interfaces (allowed: TLS and tokens are set)
// with its state in stateDir; tokens are the config lines for the tokens.
func startSecureSidecar(t *testing.T, c *cluster, bins binaries, certs testcerts.Files, port int, stateDir, tokens string) *secureSidecar {
	t.Helper()
	dir := t.TempDir()
	cfg := fmt.Sprintf(`
listen     = "0.0.0.0:%[1]d"
public_url = "https://127.0.0.1:%[1]d"
state_dir  = %[2]q
reconcile  = "1s"
debounce   = "200ms"
%[3]s
tls {
  cert_file      = %[4]q
  key_file       = %[5]q
  client_ca_file = %[6]q
}
nomad {
  address = %[7]q
}
`, port, stateDir, tokens, certs.ServerCert, certs.ServerKey, certs.CA, c.HTTP)
	path := filepath.Join(dir, "sidecar.hcl")
	must(t, os.WriteFile(path, []byte(cfg), 0o600))
	env := []string{"NOMAD_ADDR=", "NOMAD_TOKEN=", "NOMAD_NAMESPACE=", "HETGPU_TOKEN=", "HETGPU_READ_TOKEN=", "HETGPU_WRITE_TOKEN="}
	s := &secureSidecar{url: fmt.Sprintf("https://127.0.0.1:%d", port), client: tlsClient(t, certs.CA, certs.ClientCert, certs.ClientKey),
		proc: startProc(t, "sidecar", dir, env, bins.Hetgpu, "sidecar", "-config", path)}
	waitFor(t, 30*time.Second, "the sidecar's HTTPS API", func() bool {
		code, body, _ := s.get(t, "/v1/health", "")
		return code == 200 && strings.Contains(body, `"backend": "nomad"`)
	})
	return s
}

// explainLink reads the explain link hetgpu wrote into the job's ui block.
func explainLink(t *testing.T, c *api.Client, id string) string {
	t.Helper()
	job, _, err := c.Jobs().Info(id, nil)
	must(t, err)
	if job.UI != nil {
		for _, l := range job.UI.Links {
			if l != nil && l.Label == "hetgpu: why here" {
				return l.URL
			}
		}
	}
	t.Fatalf("job %s has no hetgpu link in its ui block: %+v", id, job.UI)
	return ""
}

// driverRecords counts the run records of a job the task driver delivered.
func driverRecords(t *testing.T, s *secureSidecar, job string) int {
	t.Helper()
	code, body, _ := s.get(t, "/v1/observations?namespace=default&job="+job, e2eAdminToken)
	if code != 200 {
		t.Fatalf("list observations: %d %s", code, body)
	}
	return strings.Count(body, `"source": "driver"`)
}

// TestSecureSidecarOnRealAgent: the sidecar serves HTTPS with client certificates required
// and pins a job; the explain link read back from the job's ui block opens without a token
// (HTML), while /v1/queue without a token is 401 and the link opens nothing else; the task
// driver posts its run record over mTLS with the write token. The sidecar restarted with
// the driver's token as its read token refuses the driver's next record (403): it stays in
// the driver's spool.
func TestSecureSidecarOnRealAgent(t *testing.T) {
	nomadBin, bins := allBinaries(t, "the secured sidecar end to end")
	certs, err := testcerts.Write(t.TempDir())
	must(t, err)
	port := freePort(t)
	driverCfg := fmt.Sprintf("    sidecar_addr      = \"https://127.0.0.1:%d\"\n    sidecar_token     = %q\n    sidecar_ca_file   = %q\n    sidecar_cert_file = %q\n    sidecar_key_file  = %q",
		port, e2eWriteToken, certs.CA, certs.ClientCert, certs.ClientKey)
	c := startCluster(t, nomadBin, bins, []clusterClient{{Name: "v100", Fake: []string{"2x V100"}}}, driverCfg)
	killToys(t, c, bins)
	stateDir := filepath.Join(t.TempDir(), "state")
	tokens := fmt.Sprintf("token = %q\nread_token = %q\nwrite_token = %q", e2eAdminToken, e2eReadToken, e2eWriteToken)
	sc := startSecureSidecar(t, c, bins, certs, port, stateDir, tokens)

	// The run lasts until the test ends it (after the link refresh): how long the checks take
	// on a busy machine cannot finish it first.
	submitToy(t, c.API, bins, "secure-run", 1000000, "100ms", nil)
	node := runningOn(t, c.API, "secure-run", 90*time.Second)
	job, _, err := c.API.Jobs().Info("secure-run", nil)
	must(t, err)
	if nodes, devs := scPinOf(job.TaskGroups[0]); len(nodes) != 1 || nodes[0] != node || len(devs) == 0 {
		t.Fatalf("job not pinned by the TLS sidecar: nodes %v, GPUs %v", nodes, devs)
	}

	link := explainLink(t, c.API, "secure-run")
	path, ok := strings.CutPrefix(link, sc.url)
	if !ok || !strings.Contains(link, "&exp=") || !strings.Contains(link, "&sig=") {
		t.Fatalf("explain link %q: want a signed link under %s", link, sc.url)
	}
	t.Logf("explain link in the job's ui block: %s", link)
	withoutSig, _, _ := strings.Cut(path, "&exp=")
	queryOnly := path[strings.Index(path, "?"):]
	checks := []struct {
		name, path, token string
		want              int
		contains          string
	}{
		{"the signed link, no token", path, "", 200, "<h1>default / secure-run</h1>"},
		{"the link without its signature", withoutSig, "", 401, "bearer token"},
		{"the signature on another job", strings.Replace(path, "/secure-run/", "/other-run/", 1), "", 403, "does not match this job"},
		{"the signature on the queue", "/v1/queue" + queryOnly, "", 401, "bearer token"},
		{"the queue, no token", "/v1/queue", "", 401, "bearer token"},
		{"the queue, write token", "/v1/queue", e2eWriteToken, 403, "needs a read token"},
		{"the queue, read token", "/v1/queue", e2eReadToken, 200, `"jobs"`},
		{"the dashboard, no token", "/ui/fleet", "", 401, "bearer token"},
	}
	for _, ck := range checks {
		code, body, ctype := sc.get(t, ck.path, ck.token)
		if code != ck.want || !strings.Contains(body, ck.contains) {
			t.Errorf("%s: GET %s = %d %.300s, want %d with %q", ck.name, ck.path, code, body, ck.want, ck.contains)
		}
		if ck.want == 200 && ck.token == "" && !strings.HasPrefix(ctype, "text/html") {
			t.Errorf("%s: Content-Type %q, want HTML", ck.name, ctype)
		}
	}
	checkLinkRefresh(t, c, sc, "secure-run", link)

	// Without a client certificate the TLS handshake fails: mTLS guards even /v1/health.
	if resp, err := tlsClient(t, certs.CA, "", "").Get(sc.url + "/v1/health"); err == nil {
		resp.Body.Close()
		t.Errorf("a client without a certificate got %s", resp.Status)
	}

	// The driver delivers its record with the write token, over mTLS. The run ends as a
	// user's would: SIGINT, the workload checkpoints and exits 0.
	live := liveAllocs(c.API, "secure-run")
	if len(live) != 1 {
		t.Fatalf("before ending the run: %s", jobState(c.API, "secure-run"))
	}
	must(t, c.API.Allocations().Signal(&api.Allocation{ID: live[0].ID, NodeID: live[0].NodeID}, nil, "", "SIGINT"))
	waitDead(t, c.API, "secure-run", 2*time.Minute)
	waitFor(t, 90*time.Second, "the driver's run record of secure-run", func() bool { return driverRecords(t, sc, "secure-run") == 1 })

	// The same token as the sidecar's read token: the driver's next record is refused.
	sc.proc.Stop(syscall.SIGINT)
	tokens = fmt.Sprintf("token = %q\nread_token = %q\nwrite_token = %q", e2eAdminToken, e2eWriteToken, "another-write-token")
	sc = startSecureSidecar(t, c, bins, certs, port, stateDir, tokens)
	submitToy(t, c.API, bins, "refused-run", 30, "100ms", nil)
	runningOn(t, c.API, "refused-run", 90*time.Second)
	waitDead(t, c.API, "refused-run", 2*time.Minute)
	clientLog := c.clients[0].logf.Name()
	waitFor(t, 90*time.Second, "the driver refused with 403", func() bool {
		b, _ := os.ReadFile(clientLog)
		return strings.Contains(string(b), "403 Forbidden") && strings.Contains(string(b), "needs a write token")
	})
	if left, _ := filepath.Glob(filepath.Join(spoolOf(c, "v100"), "*.json")); len(left) != 1 {
		t.Errorf("spooled records after the refusal: %v, want the refused one kept for a retry", left)
	}
	if n := driverRecords(t, sc, "refused-run"); n != 0 {
		t.Errorf("the sidecar stored %d driver records posted with its read token", n)
	}
}

// checkLinkRefresh plants an explain link that expired an hour ago in the running job's ui
// block (a ui-only job update, as the sidecar's own refresh writes) and waits for the sidecar to
// sign it again: exactly once, with an expiry past the refresh window (15 days of the default
// 30-day TTL) read from the same clock as the test's; the new link opens without a token, and
// the job keeps its one allocation, neither restarted nor re-held. The job runs until the test
// ends it, so nothing but the sidecar's rounds decides when the refresh comes: the wait is
// bounded by rounds the sidecar ran after the plant (it refreshes in the first round that sees
// the job's new version), with a wall-clock guard only against a hung sidecar.
func checkLinkRefresh(t *testing.T, c *cluster, sc *secureSidecar, id, link string) {
	t.Helper()
	live := liveAllocs(c.API, id)
	if len(live) != 1 {
		t.Fatalf("before the refresh: %s", jobState(c.API, id))
	}
	alloc := live[0].ID
	before, _, err := c.API.Jobs().Info(id, nil)
	must(t, err)
	u, err := url.Parse(link)
	must(t, err)
	q := u.Query()
	q.Set("exp", strconv.FormatInt(time.Now().Add(-time.Hour).Unix(), 10))
	u.RawQuery = q.Encode()
	expired := u.String()
	before.UI.Description = strings.ReplaceAll(before.UI.Description, link, expired)
	for _, l := range before.UI.Links {
		if l.URL == link {
			l.URL = expired
		}
	}
	rounds0 := sidecarRounds(t, sc)
	_, _, err = c.API.Jobs().RegisterOpts(before, &api.RegisterOptions{EnforceIndex: true, ModifyIndex: *before.JobModifyIndex, PreserveCounts: true}, nil)
	must(t, err)
	start := time.Now()
	var fresh string
	const maxRounds = 30
	waitFor(t, 5*time.Minute, "the sidecar to sign the expired link again", func() bool {
		fresh = explainLink(t, c.API, id)
		if fresh != expired {
			return true
		}
		if n := sidecarRounds(t, sc) - rounds0; n > maxRounds {
			t.Fatalf("the sidecar ran %d rounds since the expired link was planted and did not re-sign it", n)
		}
		return false
	}, func() string { return fmt.Sprintf("%d sidecar rounds since the plant", sidecarRounds(t, sc)-rounds0) })
	t.Logf("expired explain link re-signed after %s, %d sidecar rounds", time.Since(start).Round(100*time.Millisecond), sidecarRounds(t, sc)-rounds0)
	fu, err := url.Parse(fresh)
	must(t, err)
	exp, err := strconv.ParseInt(fu.Query().Get("exp"), 10, 64)
	if err != nil || time.Until(time.Unix(exp, 0)) < 15*24*time.Hour {
		t.Errorf("re-signed link %s expires %v, want more than the 15-day refresh window from now", fresh, time.Unix(exp, 0))
	}
	path, _ := strings.CutPrefix(fresh, sc.url)
	if code, body, _ := sc.get(t, path, ""); code != 200 {
		t.Errorf("the re-signed link %s: %d %.300s, want 200", fresh, code, body)
	}
	job, _, err := c.API.Jobs().Info(id, nil)
	must(t, err)
	if strings.Contains(job.UI.Description, expired) || !strings.Contains(job.UI.Description, fresh) {
		t.Errorf("the ui description keeps the expired link: %q", job.UI.Description)
	}
	// A few more rounds: the fresh link is not re-signed again.
	r := sidecarRounds(t, sc)
	waitFor(t, 2*time.Minute, "three more sidecar rounds", func() bool { return sidecarRounds(t, sc) >= r+3 })
	if again := explainLink(t, c.API, id); again != fresh {
		t.Errorf("the link was re-signed again: %s, then %s", fresh, again)
	}
	logb, _ := os.ReadFile(sc.proc.logf.Name())
	if n := strings.Count(string(logb), "explain link re-signed before it expired"); n != 1 {
		t.Errorf("the sidecar logged %d link refreshes, want 1", n)
	}
	if live := liveAllocs(c.API, id); len(live) != 1 || live[0].ID != alloc || live[0].ClientStatus != "running" {
		t.Errorf("after the ui-only updates: %s, want allocation %s still running", jobState(c.API, id), alloc)
	}
	a, _, err := c.API.Allocations().Info(alloc, nil)
	must(t, err)
	for task, ts := range a.TaskStates {
		if ts.Restarts != 0 {
			t.Errorf("task %s restarted %d times across the ui-only updates", task, ts.Restarts)
		}
	}
	if n := reheldTags(t, c.API, id); n != 0 {
		t.Errorf("re-held %d times across the ui-only updates", n)
	}
}

// sidecarRounds reads hetgpu_rounds_total (all outcomes) from the sidecar's metrics.
func sidecarRounds(t *testing.T, sc *secureSidecar) int {
	t.Helper()
	code, body, _ := sc.get(t, "/metrics", e2eAdminToken)
	if code != 200 {
		t.Fatalf("sidecar metrics: %d %.300s", code, body)
	}
	n := 0
	for _, line := range strings.Split(body, "\n") {
		if strings.HasPrefix(line, "hetgpu_rounds_total{") {
			if f := strings.Fields(line); len(f) == 2 {
				v, _ := strconv.ParseFloat(f[1], 64)
				n += int(v)
			}
		}
	}
	return n
}

// TestSidecarRefusesExposedListener: `hetgpu sidecar` on a non-loopback address without TLS
// and tokens exits with an error saying why, and starts with insecure = true (warning).
func TestSidecarRefusesExposedListener(t *testing.T) {
	skipUnlessLinux(t)
	bins := buildBinaries(t, binHetgpu)
	dir := t.TempDir()
	port := freePort(t)
	run := func(extra ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		args := append([]string{"sidecar", "-listen", fmt.Sprintf("0.0.0.0:%d", port), "-state-dir", dir}, extra...)
		cmd := exec.CommandContext(ctx, bins.Hetgpu, args...)
		cmd.Env = append(os.Environ(), "NOMAD_ADDR=", "HETGPU_TOKEN=", "HETGPU_READ_TOKEN=", "HETGPU_WRITE_TOKEN=")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := run()
	if err == nil || !strings.Contains(out, "is not a loopback address") || !strings.Contains(out, "insecure = true") {
		t.Fatalf("exposed without TLS or tokens: err %v, output:\n%s", err, out)
	}
	t.Logf("refused: %s", strings.TrimSpace(out))

	// insecure = true: it serves (simulated backend) and warns.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cmd := exec.CommandContext(ctx, bins.Hetgpu, "sidecar", "-listen", fmt.Sprintf("0.0.0.0:%d", port), "-state-dir", dir, "-insecure")
	cmd.Env = append(os.Environ(), "NOMAD_ADDR=", "HETGPU_TOKEN=", "HETGPU_READ_TOKEN=", "HETGPU_WRITE_TOKEN=")
	logPath := filepath.Join(dir, "insecure.log")
	logf, err := os.Create(logPath)
	must(t, err)
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	must(t, cmd.Start())
	defer func() { _ = cmd.Process.Signal(syscall.SIGINT); _ = cmd.Wait() }()
	waitFor(t, 60*time.Second, "the insecure sidecar's API", func() bool {
		var h map[string]any
		return scGet(fmt.Sprintf("http://127.0.0.1:%d/v1/health", port), &h) == nil
	})
	b, _ := os.ReadFile(logPath)
	if !strings.Contains(string(b), "API exposed without protection") || !strings.Contains(string(b), "serving anyway because insecure = true") {
		t.Errorf("no warning for insecure = true in the log:\n%s", b)
	}
}

// TestDriverFindsSidecarThroughNomadService: the task driver has no sidecar_addr, only
// sidecar_service; a Nomad service job registers the sidecar's address under that name, and
// the driver looks it up on the agent's HTTP API (/v1/service/NAME) and delivers its run
// record there with the write token.
func TestDriverFindsSidecarThroughNomadService(t *testing.T) {
	nomadBin, bins := allBinaries(t, "sidecar service discovery end to end")
	// The driver's config is written before the agents pick their ports: it reaches the
	// server's HTTP API through a proxy on a port chosen now.
	var (
		mu      sync.Mutex
		target  *url.URL
		lookups int
	)
	proxy := httptest.NewServer(&httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) {
		mu.Lock()
		defer mu.Unlock()
		if strings.HasPrefix(r.In.URL.Path, "/v1/service/") {
			lookups++
		}
		if target != nil {
			r.SetURL(target)
		}
	}})
	defer proxy.Close()
	const service = "hetgpu-sidecar-e2e"
	port := freePort(t)
	driverCfg := fmt.Sprintf("    sidecar_service = %q\n    nomad_address   = %q\n    sidecar_token   = %q", service, proxy.URL, e2eWriteToken)
	c := startCluster(t, nomadBin, bins, []clusterClient{{Name: "v100", Fake: []string{"2x V100"}}}, driverCfg)
	killToys(t, c, bins)
	u, err := url.Parse(c.HTTP)
	must(t, err)
	mu.Lock()
	target = u
	mu.Unlock()
	startSidecar(t, c, bins, port, fmt.Sprintf("reconcile = \"1s\"\nread_token = %q\nwrite_token = %q", e2eReadToken, e2eWriteToken))
	sidecarURL := fmt.Sprintf("http://127.0.0.1:%d", port)

	// A service job that registers the sidecar's address (its task only keeps the
	// registration alive), as jobspecs/hetgpu-sidecar.nomad.hcl does for the real one.
	job := &api.Job{ID: ptrTo("sidecar-svc"), Name: ptrTo("sidecar-svc"), Type: ptrTo("service"), Datacenters: []string{"*"},
		TaskGroups: []*api.TaskGroup{{
			Name: ptrTo("api"), Count: ptrTo(1),
			Networks: []*api.NetworkResource{{ReservedPorts: []api.Port{{Label: "http", Value: port}}}},
			Services: []*api.Service{{Name: service, Provider: "nomad", PortLabel: "http", Address: "127.0.0.1", Tags: []string{"leader"}}},
			Tasks: []*api.Task{{Name: "keep", Driver: "hetgpu", Config: map[string]any{"command": bins.Toy, "args": []any{"-steps", "100000", "-step-time", "100ms"}},
				Resources: &api.Resources{CPU: ptrTo(100), MemoryMB: ptrTo(64)}}},
		}}}
	_, _, err = c.API.Jobs().Register(job, nil)
	must(t, err)
	waitFor(t, 90*time.Second, "the sidecar's service registration", func() bool {
		regs, _, err := c.API.Services().Get(service, nil)
		return err == nil && len(regs) == 1 && regs[0].Port == port
	})

	submitToy(t, c.API, bins, "found-run", 30, "100ms", nil)
	runningOn(t, c.API, "found-run", 90*time.Second)
	waitDead(t, c.API, "found-run", 2*time.Minute)
	waitFor(t, 90*time.Second, "the driver's record delivered through the service lookup", func() bool {
		recs := runRecordsWith(t, sidecarURL, "found-run", e2eReadToken)
		return strings.Count(recs, `"source": "driver"`) == 1
	})
	mu.Lock()
	defer mu.Unlock()
	if lookups == 0 {
		t.Error("the driver never asked Nomad for the service")
	}
	t.Logf("the driver looked the sidecar up %d times", lookups)
}

// runRecordsWith lists a job's stored run records (raw JSON) with a bearer token.
func runRecordsWith(t *testing.T, base, job, token string) string {
	t.Helper()
	req, err := http.NewRequest("GET", base+"/v1/observations?namespace=default&job="+job, nil)
	must(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("list observations: %s %s", resp.Status, b)
	}
	return string(b)
}
