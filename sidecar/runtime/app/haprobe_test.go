package app

import (
	"context"
	"fmt"
	"net/http"
	"testing"

	"github.com/hetgpu/hetgpu/internal/testcerts"
	"github.com/hetgpu/hetgpu/internal/wanterr"
	"github.com/hetgpu/hetgpu/sidecar/runtime/server"
	"github.com/hetgpu/hetgpu/sidecar/runtime/service/servicetest"
)

// The standby's probe follows the tls block: plain without it, the CA (probe_ca_file, else
// client_ca_file) and, under mTLS, the replica's own certificate with it.
func TestHAProbeClient(t *testing.T) {
	certs := testcerts.MustWrite(t, t.TempDir())
	for _, tc := range []struct {
		name      string
		tls       *TLSConfig
		probeCA   string
		wantErr   string
		wantPlain bool
		wantCA    bool
		wantCert  bool
	}{
		{name: "no tls", wantPlain: true},
		{name: "tls, system roots", tls: &TLSConfig{CertFile: certs.ServerCert, KeyFile: certs.ServerKey}},
		{name: "tls, probe_ca_file", tls: &TLSConfig{CertFile: certs.ServerCert, KeyFile: certs.ServerKey}, probeCA: certs.CA, wantCA: true},
		{name: "mtls", tls: &TLSConfig{CertFile: certs.ServerCert, KeyFile: certs.ServerKey, ClientCAFile: certs.CA}, wantCA: true, wantCert: true},
		{name: "missing probe_ca_file", tls: &TLSConfig{CertFile: certs.ServerCert, KeyFile: certs.ServerKey}, probeCA: "/nonexistent/ca.pem",
			wantErr: `ha.probe_ca_file = "/nonexistent/ca.pem"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &Config{TLS: tc.tls, HA: &HAConfig{ProbeCAFile: tc.probeCA}}
			cl, err := probeClient(c)
			if wanterr.Done(t, err, tc.wantErr) {
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.wantPlain {
				if cl != nil {
					t.Fatalf("probe client %+v without tls; want the default (nil)", cl)
				}
				return
			}
			tr, ok := cl.Transport.(*http.Transport)
			if !ok || tr.TLSClientConfig == nil {
				t.Fatalf("probe transport %T without a TLS config", cl.Transport)
			}
			if got := tr.TLSClientConfig.RootCAs != nil; got != tc.wantCA {
				t.Fatalf("probe trusts a configured CA: %v, want %v", got, tc.wantCA)
			}
			if got := len(tr.TLSClientConfig.Certificates) == 1; got != tc.wantCert {
				t.Fatalf("probe presents a client certificate: %v, want %v", got, tc.wantCert)
			}
		})
	}
}

// The standby's probe keeps reaching a replica under mTLS whether or not the replica opens
// /v1/health to clients without a certificate: it presents the replica's own certificate,
// so with tls.health_without_client_cert the request is not refused as certificate-less
// (/v1/queue, which needs one, answers too).
func TestHAProbeUnderMTLS(t *testing.T) {
	certs := testcerts.MustWrite(t, t.TempDir())
	for _, healthOpen := range []bool{false, true} {
		t.Run(fmt.Sprintf("health_without_client_cert=%v", healthOpen), func(t *testing.T) {
			c := &Config{Listen: "127.0.0.1:0", HA: &HAConfig{},
				TLS: &TLSConfig{CertFile: certs.ServerCert, KeyFile: certs.ServerKey, ClientCAFile: certs.CA, HealthWithoutClientCert: healthOpen}}
			probe, err := probeClient(c)
			if err != nil {
				t.Fatal(err)
			}
			h := servicetest.NewHarness(t, nil)
			srv := server.New(c.serverConfig(), h.Service)
			ctx, cancel := context.WithCancel(context.Background())
			addr, done := make(chan string, 1), make(chan error, 1)
			go func() { done <- srv.Serve(ctx, func(a string) { addr <- a }) }()
			t.Cleanup(func() { cancel(); <-done })
			base := "https://" + <-addr
			for _, path := range []string{"/v1/health", "/v1/queue"} {
				resp, err := probe.Get(base + path)
				if err != nil {
					t.Fatalf("probe GET %s: %v", path, err)
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					t.Errorf("probe GET %s = %s, want 200 OK", path, resp.Status)
				}
			}
		})
	}
}
