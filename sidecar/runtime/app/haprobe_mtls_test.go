package app

import (
	"context"
	"fmt"
	"net/http"
	"testing"

	"github.com/hetgpu/hetgpu/internal/testcerts"
	"github.com/hetgpu/hetgpu/sidecar/runtime/server"
	"github.com/hetgpu/hetgpu/sidecar/runtime/service/servicetest"
)

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
