package ha

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"time"
)

// ProbeTLS is what the standby's liveness probe needs to reach a leader that serves HTTPS:
// without it the handshake with a replica restarted at the leader's address fails, the
// probe cannot read who answers, and takeover waits for Nomad's TTL.
type ProbeTLS struct {
	// CAFile holds the CA certificates that signed the replicas' server certificates; empty:
	// the system roots.
	CAFile string
	// CertFile and KeyFile are presented as a client certificate when ClientCert is set
	// (the replicas require mTLS): the replica's own certificate, so it needs the clientAuth
	// extended key usage besides serverAuth.
	CertFile, KeyFile string
	ClientCert        bool
}

// ProbeClient is an HTTP client for the probe (1 s timeout) that speaks TLS as configured;
// errors name the field and the file.
func ProbeClient(p ProbeTLS) (*http.Client, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if p.CAFile != "" {
		b, err := os.ReadFile(p.CAFile)
		if err != nil {
			return nil, fmt.Errorf("ha.probe_ca_file = %q: %w", p.CAFile, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(b) {
			return nil, fmt.Errorf("ha.probe_ca_file = %q: expected PEM CA certificates, found none that parse", p.CAFile)
		}
		tc.RootCAs = pool
	}
	if p.ClientCert {
		pair, err := tls.LoadX509KeyPair(p.CertFile, p.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("tls.cert_file = %q, tls.key_file = %q as the probe's client certificate: %w", p.CertFile, p.KeyFile, err)
		}
		tc.Certificates = []tls.Certificate{pair}
	}
	return &http.Client{Timeout: time.Second, Transport: &http.Transport{TLSClientConfig: tc, DisableKeepAlives: true}}, nil
}
