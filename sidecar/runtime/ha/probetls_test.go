package ha_test

import (
	"crypto/tls"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hetgpu/hetgpu/internal/poll"
	"github.com/hetgpu/hetgpu/internal/testcerts"
	"github.com/hetgpu/hetgpu/sidecar/backends/nomad/nomadtest"
	"github.com/hetgpu/hetgpu/sidecar/runtime/ha"
)

// tlsReplicaAPI is a replica's HTTPS API requiring client certificates (mTLS) signed by the
// test CA; answering is the replica_id its /v1/health reports.
func tlsReplicaAPI(t *testing.T, certs testcerts.Files, answering *atomic.Value) *httptest.Server {
	t.Helper()
	pair, pool := testcerts.Pair(t, certs.ServerCert, certs.ServerKey), testcerts.Pool(t, certs.CA)
	s := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := answering.Load().(string)
		role := "standby"
		if id == "a" {
			role = "leader"
		}
		_, _ = io.WriteString(w, `{"status":"ok","role":"`+role+`","replica_id":"`+id+`"}`)
	}))
	s.TLS = &tls.Config{Certificates: []tls.Certificate{pair}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert}
	s.StartTLS()
	t.Cleanup(s.Close)
	return s
}

// The leader serves HTTPS with mTLS; it dies and is restarted at the same address, where a
// new replica (c) answers. A standby whose probe speaks TLS with the CA and its own
// certificate reads who answers and takes over at once; a probe without them fails the
// handshake, which proves nothing, so the lock stays until Nomad's TTL.
func TestElectorFastTakeoverOverTLS(t *testing.T) {
	certs := testcerts.MustWrite(t, t.TempDir())
	for _, tc := range []struct {
		name     string
		probe    ha.ProbeTLS
		takeover bool
	}{
		{"probe with the CA and the replica's certificate", ha.ProbeTLS{CAFile: certs.CA, CertFile: certs.ServerCert, KeyFile: certs.ServerKey, ClientCert: true}, true},
		{"probe without TLS settings", ha.ProbeTLS{}, false},
		{"probe with the CA but no client certificate", ha.ProbeTLS{CAFile: certs.CA}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			probe, err := ha.ProbeClient(tc.probe)
			if err != nil {
				t.Fatal(err)
			}
			f := nomadtest.New()
			defer f.Close()
			var answering atomic.Value
			answering.Store("a")
			apiSrv := tlsReplicaAPI(t, certs, &answering)
			a := startReplica(t, f, "a", func(c *ha.Config) { c.Address = apiSrv.URL })
			poll.Until(t, "a to lead", func() bool { return a.role() == ha.RoleLeader })
			b := startReplica(t, f, "b", func(c *ha.Config) { c.FastTakeover = true; c.Probe = probe })
			time.Sleep(200 * time.Millisecond)
			if b.role() != ha.RoleStandby {
				t.Fatalf("b leads while a answers over TLS")
			}
			// a stops renewing (killed); its address now reaches the restarted replica c.
			a.link.cut.Store(true)
			answering.Store("c")
			deadline := time.Now().Add(3 * time.Second)
			for time.Now().Before(deadline) && b.role() != ha.RoleLeader {
				time.Sleep(20 * time.Millisecond)
			}
			if got := b.role() == ha.RoleLeader; got != tc.takeover {
				t.Fatalf("b leads after 3 s: %v, want %v (fast takeover needs a probe that completes the TLS handshake)", got, tc.takeover)
			}
		})
	}
}

func TestProbeClientFileErrors(t *testing.T) {
	dir := t.TempDir()
	notPEM := dir + "/not.pem"
	if err := os.WriteFile(notPEM, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		probe ha.ProbeTLS
		want  string
	}{
		{"missing CA", ha.ProbeTLS{CAFile: dir + "/nope.pem"}, `ha.probe_ca_file = "` + dir + `/nope.pem"`},
		{"CA without PEM", ha.ProbeTLS{CAFile: notPEM}, "found none that parse"},
		{"bad client pair", ha.ProbeTLS{CertFile: notPEM, KeyFile: notPEM, ClientCert: true}, "as the probe's client certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ha.ProbeClient(tc.probe)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}
