package server

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
)

// TLSFiles is the API's tls block: a server certificate and key, and optionally the CA that
// signs client certificates (mTLS: every client must present one). HealthWithoutClientCert
// (with ClientCAFile only) lets a client without a certificate through the handshake, for
// GET /v1/health alone (clientcert.go): a Nomad http check cannot present one.
type TLSFiles struct {
	CertFile                string
	KeyFile                 string
	ClientCAFile            string
	HealthWithoutClientCert bool
}

// Enabled reports whether TLS is configured.
func (f TLSFiles) Enabled() bool {
	return f.CertFile != "" || f.KeyFile != "" || f.ClientCAFile != "" || f.HealthWithoutClientCert
}

// LoadTLS builds the server's TLS configuration; errors name the field, the file and what was
// expected (a missing file, a file without PEM blocks, a key that does not match).
func LoadTLS(f TLSFiles) (*tls.Config, error) {
	if f.HealthWithoutClientCert && f.ClientCAFile == "" {
		return nil, errors.New("tls.health_without_client_cert = true: expected tls.client_ca_file too (it relaxes mTLS for GET /v1/health; without a client CA /v1/health needs no certificate anyway)")
	}
	if f.CertFile == "" || f.KeyFile == "" {
		return nil, fmt.Errorf("tls.cert_file = %q, tls.key_file = %q: expected both (PEM files), or no tls block", f.CertFile, f.KeyFile)
	}
	certPEM, err := readPEM("tls.cert_file", f.CertFile, "CERTIFICATE")
	if err != nil {
		return nil, err
	}
	keyPEM, err := readPEM("tls.key_file", f.KeyFile, "PRIVATE KEY")
	if err != nil {
		return nil, err
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("tls.key_file = %q: expected the private key of tls.cert_file = %q: %w", f.KeyFile, f.CertFile, err)
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}
	if f.ClientCAFile != "" {
		caPEM, err := readPEM("tls.client_ca_file", f.ClientCAFile, "CERTIFICATE")
		if err != nil {
			return nil, err
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(caPEM) {
			return nil, fmt.Errorf("tls.client_ca_file = %q: expected PEM CA certificates, found none that parse", f.ClientCAFile)
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
		if f.HealthWithoutClientCert {
			// A certificate that is presented is still verified (another CA fails the
			// handshake); requireClientCert refuses the requests that came without one.
			cfg.ClientAuth = tls.VerifyClientCertIfGiven
		}
	}
	return cfg, nil
}

// readPEM reads a file and checks it holds a PEM block whose type ends in kind.
func readPEM(field, path, kind string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%s = %q: %w", field, path, err)
	}
	rest := b
	for {
		var blk *pem.Block
		blk, rest = pem.Decode(rest)
		if blk == nil {
			return nil, fmt.Errorf("%s = %q: expected a PEM file with a %s block, found none", field, path, kind)
		}
		if strings.HasSuffix(blk.Type, kind) {
			return b, nil
		}
	}
}

// CheckExposure refuses a listener that anyone on the network could reach without TLS or
// without tokens, unless cfg.Insecure; warn is what to log when it goes ahead anyway.
// Loopback addresses need neither.
func CheckExposure(cfg Config) (warn string, err error) {
	host, _, err := net.SplitHostPort(cfg.Listen)
	if err != nil {
		return "", fmt.Errorf("listen = %q: expected host:port: %w", cfg.Listen, err)
	}
	if isLoopback(host) {
		return "", nil
	}
	var missing []string
	if !cfg.TLS.Enabled() {
		missing = append(missing, "no TLS (a tls block with cert_file and key_file)")
	}
	if cfg.Token == "" && cfg.ReadToken == "" {
		missing = append(missing, "no token for reads (token or read_token)")
	}
	if cfg.Token == "" && cfg.WriteToken == "" {
		missing = append(missing, "no token for writes (token or write_token: anyone could post run records and poison the predictor)")
	}
	if len(missing) == 0 {
		return "", nil
	}
	why := fmt.Sprintf("listen = %q is not a loopback address and the API has %s", cfg.Listen, strings.Join(missing, ", "))
	if cfg.Insecure {
		return why + "; serving anyway because insecure = true", nil
	}
	return "", errors.New(why + "; configure them, listen on 127.0.0.1, or set insecure = true to accept the risk")
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
