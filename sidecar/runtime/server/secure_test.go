package server_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hetgpu/hetgpu/internal/testcerts"
	"github.com/hetgpu/hetgpu/sidecar/runtime/explainlink"
	"github.com/hetgpu/hetgpu/sidecar/runtime/server"
	"github.com/hetgpu/hetgpu/sidecar/runtime/service/servicetest"
)

var linkSecret = []byte("0123456789abcdef0123456789abcdef")

func signer(t *testing.T, now time.Time) *explainlink.Signer {
	t.Helper()
	s, err := explainlink.New(linkSecret, 0, func() time.Time { return now })
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// secured serves a harness with one pinned job ("resnet") and one that cannot run ("huge").
func secured(t *testing.T, cfg server.Config) apiClient {
	t.Helper()
	h := servicetest.NewHarness(t, nil)
	h.Nomad.Register(servicetest.HeldJob("resnet", 2, 1, nil))
	h.Nomad.Register(servicetest.HeldJob("huge", 64, 1, nil))
	h.Round()
	srv := httptest.NewServer(server.New(cfg, h.Service).Handler())
	t.Cleanup(srv.Close)
	return apiClient{servicetest.Client{T: t, URL: srv.URL}}
}

const goodObs = `{"namespace":"default","job_id":"j","group":"train","gpu_type":"a100","gpus":2,"throughput":812.5,"runtime_s":600,"exit_code":0}`

// TestTokenScopes: token is admin, read_token reads, write_token only writes, health is open.
func TestTokenScopes(t *testing.T) {
	c := secured(t, server.Config{Token: "admin", ReadToken: "reader", WriteToken: "writer"})
	tests := []struct {
		method, path, token string
		want                int
	}{
		{"GET", "/v1/health", "", 200},
		{"GET", "/v1/queue", "", 401},
		{"GET", "/v1/queue", "guess", 401},
		{"GET", "/v1/queue", "reader", 200},
		{"GET", "/v1/queue", "admin", 200},
		{"GET", "/v1/queue", "writer", 403},
		{"GET", "/v1/decisions", "writer", 403},
		{"GET", "/v1/jobs/default/resnet/explain", "writer", 403},
		{"GET", "/v1/jobs/default/resnet/explain", "reader", 200},
		{"GET", "/v1/observations", "writer", 403},
		{"GET", "/v1/observations", "reader", 200},
		{"GET", "/ui/fleet", "writer", 403},
		{"GET", "/ui/fleet", "reader", 200},
		{"GET", "/v1/fleet", "reader", 200},
		{"GET", "/metrics", "reader", 200},
		{"GET", "/metrics", "", 401},
		{"POST", "/v1/observations", "", 401},
		{"POST", "/v1/observations", "reader", 403},
		{"POST", "/v1/observations", "writer", 202},
		{"POST", "/v1/observations", "admin", 202},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s %s as %q", tt.method, tt.path, tt.token), func(t *testing.T) {
			cl := c
			cl.T, cl.Token = t, tt.token
			body := ""
			if tt.method == "POST" {
				body = goodObs
			}
			code, resp, _ := cl.do(tt.method, tt.path, "", body)
			if code != tt.want {
				t.Errorf("= %d %s, want %d", code, resp, tt.want)
			}
			if code == 403 && !strings.Contains(resp, "token") {
				t.Errorf("403 without saying which token is needed: %s", resp)
			}
		})
	}
}

// A write token alone guards writes; reads stay open (a loopback sidecar whose operator only
// wants to keep drivers honest).
func TestWriteTokenOnly(t *testing.T) {
	c := secured(t, server.Config{WriteToken: "writer"})
	if code, _, _ := c.do("GET", "/v1/queue", "", ""); code != 200 {
		t.Errorf("GET /v1/queue without a token = %d, want 200 (no read token configured)", code)
	}
	if code, _, _ := c.do("POST", "/v1/observations", "", goodObs); code != 401 {
		t.Errorf("POST without the write token = %d, want 401", code)
	}
}

// TestSignedExplainLinks: a signed link opens exactly its job's explain page (HTML and JSON),
// nothing else; expired or forged ones are 403 with the reason; public_explain opens explain
// for everyone and nothing more.
func TestSignedExplainLinks(t *testing.T) {
	day := time.Date(2026, 3, 10, 15, 4, 5, 0, time.UTC)
	c := secured(t, server.Config{Token: "admin", ReadToken: "reader", Links: signer(t, day)})
	link := signer(t, day).Query("default", "resnet")
	stale := signer(t, day.Add(-31*24*time.Hour)).Query("default", "resnet")
	otherKey, _ := explainlink.New([]byte(strings.Repeat("k", 32)), 0, func() time.Time { return day })
	tests := []struct {
		name, path string
		want       int
		contains   string
	}{
		{"html", "/v1/jobs/default/resnet/explain?format=html&" + link, 200, "Predicted per GPU type"},
		{"json link on the page keeps the signature", "/v1/jobs/default/resnet/explain?format=html&" + link, 200, "format=json&amp;" + strings.ReplaceAll(link, "&", "&amp;")},
		{"json", "/v1/jobs/default/resnet/explain?" + link, 200, `"groups"`},
		{"another job", "/v1/jobs/default/huge/explain?format=html&" + link, 403, "does not match this job"},
		{"another namespace", "/v1/jobs/prod/resnet/explain?" + link, 403, "does not match this job"},
		{"another secret", "/v1/jobs/default/resnet/explain?" + otherKey.Query("default", "resnet"), 403, "does not match this job"},
		{"tampered expiry", "/v1/jobs/default/resnet/explain?" + strings.Replace(link, "exp=17", "exp=18", 1), 403, "does not match"},
		{"expired", "/v1/jobs/default/resnet/explain?" + stale, 403, "has expired (on 2026-0"},
		{"no link", "/v1/jobs/default/resnet/explain?format=html", 401, "bearer token"},
		{"the queue", "/v1/queue?" + link, 401, "bearer token"},
		{"the dashboard", "/ui/fleet?" + link, 401, "bearer token"},
		{"observations", "/v1/observations?" + link, 401, "bearer token"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cl := c
			cl.T = t
			code, body, _ := cl.do("GET", tt.path, "", "")
			if code != tt.want || !strings.Contains(body, tt.contains) {
				t.Errorf("GET %s = %d %.300s, want %d with %q", tt.path, code, body, tt.want, tt.contains)
			}
		})
	}
	if code, _, _ := c.do("POST", "/v1/observations?"+link, "", goodObs); code != 401 {
		t.Errorf("POST with a signed link = %d, want 401", code)
	}
}

func TestPublicExplain(t *testing.T) {
	c := secured(t, server.Config{Token: "admin", PublicExplain: true})
	for _, tt := range []struct {
		path string
		want int
	}{
		{"/v1/jobs/default/resnet/explain?format=html", 200},
		{"/v1/jobs/default/resnet/explain", 200},
		{"/v1/queue", 401},
		{"/v1/decisions", 401},
		{"/ui/fleet", 401},
	} {
		if code, body, _ := c.do("GET", tt.path, "", ""); code != tt.want {
			t.Errorf("GET %s without a token = %d %.200s, want %d", tt.path, code, body, tt.want)
		}
	}
}

// TestRequestLimits: bodies past max_body_bytes and batches past max_observations are 413
// naming the limit; query limits out of range are 400.
func TestRequestLimits(t *testing.T) {
	c := secured(t, server.Config{MaxBodyBytes: 2000, MaxObservations: 3})
	batch := func(n int) string { return "[" + strings.Repeat(goodObs+",", n-1) + goodObs + "]" }
	tests := []struct {
		name, method, path, body string
		want                     int
		contains                 string
	}{
		{"one record", "POST", "/v1/observations", goodObs, 202, `"accepted"`},
		{"three records", "POST", "/v1/observations", batch(3), 202, `"accepted"`},
		{"four records", "POST", "/v1/observations", batch(4), 413, "4 observations in one request exceed max_observations = 3"},
		{"body over the limit", "POST", "/v1/observations", batch(20), 413, "request body exceeds max_body_bytes = 2000"},
		{"padded body", "POST", "/v1/observations", goodObs + strings.Repeat(" ", 3000), 413, "max_body_bytes = 2000"},
		{"decisions limit", "GET", "/v1/decisions?limit=1001", "", 400, "expected an integer from 1 to 1000"},
		{"observations limit", "GET", "/v1/observations?limit=1000000", "", 400, "expected an integer from 1 to 10000"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cl := c
			cl.T = t
			code, body, _ := cl.do(tt.method, tt.path, "", tt.body)
			if code != tt.want || !strings.Contains(body, tt.contains) {
				t.Errorf("%s %s = %d %.300s, want %d with %q", tt.method, tt.path, code, body, tt.want, tt.contains)
			}
		})
	}
}

func TestCheckExposure(t *testing.T) {
	tlsOn := server.TLSFiles{CertFile: "c.pem", KeyFile: "k.pem"}
	tests := []struct {
		name string
		cfg  server.Config
		err  string // "" = serves
		warn bool
	}{
		{"loopback, nothing", server.Config{Listen: "127.0.0.1:4656"}, "", false},
		{"localhost", server.Config{Listen: "localhost:4656"}, "", false},
		{"IPv6 loopback", server.Config{Listen: "[::1]:4656"}, "", false},
		{"all interfaces, nothing", server.Config{Listen: "0.0.0.0:4656"}, "no TLS", false},
		{"empty host", server.Config{Listen: ":4656"}, "insecure = true", false},
		{"TLS without tokens", server.Config{Listen: "10.0.0.5:4656", TLS: tlsOn}, "no token for reads", false},
		{"token without TLS", server.Config{Listen: "10.0.0.5:4656", Token: "t"}, "no TLS", false},
		{"TLS, read token only", server.Config{Listen: "10.0.0.5:4656", TLS: tlsOn, ReadToken: "r"}, "poison the predictor", false},
		{"TLS and admin token", server.Config{Listen: "10.0.0.5:4656", TLS: tlsOn, Token: "t"}, "", false},
		{"TLS, read and write tokens", server.Config{Listen: "10.0.0.5:4656", TLS: tlsOn, ReadToken: "r", WriteToken: "w"}, "", false},
		{"insecure", server.Config{Listen: "0.0.0.0:4656", Insecure: true}, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			warn, err := server.CheckExposure(tt.cfg)
			switch {
			case tt.err == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
				t.Errorf("err = %v, want one containing %q", err, tt.err)
			case tt.warn != (warn != ""):
				t.Errorf("warn = %q, want a warning: %v", warn, tt.warn)
			}
		})
	}
}

// Serve refuses an exposed listener before it binds.
func TestServeRefusesExposedListener(t *testing.T) {
	h := servicetest.NewHarness(t, nil)
	err := server.New(server.Config{Listen: "0.0.0.0:0"}, h.Service).Serve(context.Background(), nil)
	if err == nil || !strings.Contains(err.Error(), "insecure = true") {
		t.Fatalf("Serve = %v, want a refusal naming insecure = true", err)
	}
}

func TestLoadTLSErrors(t *testing.T) {
	dir := t.TempDir()
	f := testcerts.MustWrite(t, dir)
	junk := filepath.Join(dir, "junk.pem")
	if err := os.WriteFile(junk, []byte("not pem"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		in   server.TLSFiles
		want string // "" = loads
	}{
		{"server pair", server.TLSFiles{CertFile: f.ServerCert, KeyFile: f.ServerKey}, ""},
		{"with client CA", server.TLSFiles{CertFile: f.ServerCert, KeyFile: f.ServerKey, ClientCAFile: f.CA}, ""},
		{"key missing", server.TLSFiles{CertFile: f.ServerCert}, `tls.key_file = "": expected both`},
		{"cert file missing", server.TLSFiles{CertFile: filepath.Join(dir, "nope.pem"), KeyFile: f.ServerKey}, "tls.cert_file = \"" + filepath.Join(dir, "nope.pem") + "\": open"},
		{"cert not PEM", server.TLSFiles{CertFile: junk, KeyFile: f.ServerKey}, "tls.cert_file = \"" + junk + "\": expected a PEM file with a CERTIFICATE block"},
		{"key not PEM", server.TLSFiles{CertFile: f.ServerCert, KeyFile: junk}, "tls.key_file = \"" + junk + "\": expected a PEM file with a PRIVATE KEY block"},
		{"key of another cert", server.TLSFiles{CertFile: f.ServerCert, KeyFile: f.ClientKey}, "expected the private key of tls.cert_file"},
		{"open health with client CA", server.TLSFiles{CertFile: f.ServerCert, KeyFile: f.ServerKey, ClientCAFile: f.CA, HealthWithoutClientCert: true}, ""},
		{"open health without client CA", server.TLSFiles{CertFile: f.ServerCert, KeyFile: f.ServerKey, HealthWithoutClientCert: true},
			"tls.health_without_client_cert = true: expected tls.client_ca_file too"},
		{"client CA not PEM", server.TLSFiles{CertFile: f.ServerCert, KeyFile: f.ServerKey, ClientCAFile: junk}, "tls.client_ca_file = \"" + junk + "\": expected a PEM file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := server.LoadTLS(tt.in)
			if (tt.want == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), tt.want) {
				t.Errorf("LoadTLS = %v, want %q", err, tt.want)
			}
		})
	}
}

// TestServeTLS: the API over TLS with client certificates required: only a client with a
// certificate of the configured CA gets through, then its token decides. With
// health_without_client_cert a client without a certificate completes the handshake but gets
// only GET/HEAD /v1/health (Nomad's http check); a certificate of another CA still fails it.
func TestServeTLS(t *testing.T) {
	dir := t.TempDir()
	f := testcerts.MustWrite(t, dir)
	serve := func(healthOpen bool) string {
		h := servicetest.NewHarness(t, nil)
		srv := server.New(server.Config{Listen: "127.0.0.1:0", ReadToken: "reader", WriteToken: "writer",
			TLS: server.TLSFiles{CertFile: f.ServerCert, KeyFile: f.ServerKey, ClientCAFile: f.CA, HealthWithoutClientCert: healthOpen}}, h.Service)
		ctx, cancel := context.WithCancel(context.Background())
		addr := make(chan string, 1)
		done := make(chan error, 1)
		go func() { done <- srv.Serve(ctx, func(a string) { addr <- a }) }()
		t.Cleanup(func() { cancel(); <-done })
		return "https://" + <-addr
	}
	bases := map[bool]string{false: serve(false), true: serve(true)}
	base := bases[false]

	pool := testcerts.Pool(t, f.CA)
	// The client presents its certificate whatever CAs the server names: Go's client
	// otherwise sends none that another CA signed, which tests "no certificate" again.
	client := func(cert, key string) *http.Client {
		tc := &tls.Config{RootCAs: pool}
		if cert != "" {
			pair := testcerts.Pair(t, cert, key)
			tc.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &pair, nil }
		}
		return &http.Client{Transport: &http.Transport{TLSClientConfig: tc}, Timeout: 10 * time.Second}
	}
	do := func(c *http.Client, url, method, token string) (int, string, error) {
		var body io.Reader
		if method == "POST" {
			body = strings.NewReader(goodObs)
		}
		req, _ := http.NewRequest(method, url, body)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := c.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), nil
	}
	const noCert = "a client certificate signed by tls.client_ca_file is required (mTLS); without one only GET /v1/health answers"
	tests := []struct {
		name, cert, key, method, path, token string
		strict, healthOpen                   int    // the status without and with health_without_client_cert; 0 = the handshake fails
		contains                             string // in the body where healthOpen is 401
	}{
		{"no client certificate, health", "", "", "GET", "/v1/health", "", 0, 200, ""},
		{"no client certificate, HEAD health", "", "", "HEAD", "/v1/health", "", 0, 200, ""},
		{"no client certificate, queue with token", "", "", "GET", "/v1/queue", "reader", 0, 401, noCert},
		{"no client certificate, queue", "", "", "GET", "/v1/queue", "", 0, 401, noCert},
		{"no client certificate, metrics", "", "", "GET", "/metrics", "reader", 0, 401, noCert},
		{"no client certificate, dashboard", "", "", "GET", "/ui/fleet", "reader", 0, 401, noCert},
		{"no client certificate, observations", "", "", "POST", "/v1/observations", "writer", 0, 401, noCert},
		{"no client certificate, POST health", "", "", "POST", "/v1/health", "writer", 0, 401, noCert},
		{"no client certificate, unknown path", "", "", "GET", "/v1/nope", "reader", 0, 401, noCert},
		{"certificate of another CA, health", f.OtherClientCert, f.OtherClientKey, "GET", "/v1/health", "", 0, 0, ""},
		{"certificate of another CA, queue", f.OtherClientCert, f.OtherClientKey, "GET", "/v1/queue", "reader", 0, 0, ""},
		{"client certificate, health", f.ClientCert, f.ClientKey, "GET", "/v1/health", "", 200, 200, ""},
		{"client certificate, no token", f.ClientCert, f.ClientKey, "GET", "/v1/queue", "", 401, 401, "bearer token"},
		{"client certificate and token", f.ClientCert, f.ClientKey, "GET", "/v1/queue", "reader", 200, 200, ""},
		{"client certificate, observations", f.ClientCert, f.ClientKey, "POST", "/v1/observations", "writer", 202, 202, ""},
		{"the replica's own certificate (HA probe)", f.ServerCert, f.ServerKey, "GET", "/v1/queue", "reader", 200, 200, ""},
	}
	for _, healthOpen := range []bool{false, true} {
		for _, tt := range tests {
			want := tt.strict
			if healthOpen {
				want = tt.healthOpen
			}
			t.Run(fmt.Sprintf("health_without_client_cert=%v/%s", healthOpen, tt.name), func(t *testing.T) {
				code, body, err := do(client(tt.cert, tt.key), bases[healthOpen]+tt.path, tt.method, tt.token)
				if want == 0 && err == nil {
					t.Errorf("%s %s answered %d, want the TLS handshake refused", tt.method, tt.path, code)
				}
				if want != 0 && (err != nil || code != want) {
					t.Errorf("%s %s = %d, %v; want %d", tt.method, tt.path, code, err, want)
				}
				if want == 401 && !strings.Contains(body, tt.contains) {
					t.Errorf("%s %s body %q, want %q", tt.method, tt.path, body, tt.contains)
				}
			})
		}
	}
	if _, err := http.Get("http://" + strings.TrimPrefix(base, "https://") + "/v1/health"); err == nil {
		// Go's TLS server answers plain HTTP with a 400 response; either way no API answer.
		t.Log("plain HTTP got a response (Go answers 400 to HTTP on a TLS port)")
	}
}
