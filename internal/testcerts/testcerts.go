// Package testcerts writes a throwaway certificate authority, a server certificate for
// 127.0.0.1/localhost and a client certificate, for tests of TLS and mTLS.
package testcerts

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Files are the PEM files Write created.
type Files struct {
	CA, ServerCert, ServerKey, ClientCert, ClientKey string
	// OtherClientCert and OtherClientKey are signed by a different CA: an mTLS server must
	// refuse them.
	OtherClientCert, OtherClientKey string
}

type issuer struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

// Write creates the files in dir.
func Write(dir string) (Files, error) { return WriteFor(dir) }

// MustWrite is Write for a test: it fails the test when the files cannot be written.
func MustWrite(t testing.TB, dir string) Files {
	t.Helper()
	f, err := Write(dir)
	if err != nil {
		t.Fatalf("write test certificates: %v", err)
	}
	return f
}

// Pool is a certificate pool of the PEM certificates in caFile (Files.CA: the test CA); a
// read error fails the test.
func Pool(t testing.TB, caFile string) *x509.CertPool {
	t.Helper()
	pem, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	return pool
}

// Pair is the certificate of certFile with its key in keyFile (tls.LoadX509KeyPair); an
// error fails the test.
func Pair(t testing.TB, certFile, keyFile string) tls.Certificate {
	t.Helper()
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	return pair
}

// WriteFor creates the files in dir with a server certificate that also names ips (a
// listener on a node's address, as a Nomad job gets it).
func WriteFor(dir string, ips ...net.IP) (Files, error) { return WriteNamed(dir, nil, nil, ips...) }

// WriteNamed is WriteFor with more DNS names on the server and the client certificate (Nomad's
// servers present server.<region>.nomad on their RPC port and, with verify_server_hostname,
// accept only peers named client.<region>.nomad or server.<region>.nomad).
func WriteNamed(dir string, serverNames, clientNames []string, ips ...net.IP) (Files, error) {
	f := Files{
		CA: filepath.Join(dir, "ca.pem"), ServerCert: filepath.Join(dir, "server.pem"), ServerKey: filepath.Join(dir, "server-key.pem"),
		ClientCert: filepath.Join(dir, "client.pem"), ClientKey: filepath.Join(dir, "client-key.pem"),
		OtherClientCert: filepath.Join(dir, "other-client.pem"), OtherClientKey: filepath.Join(dir, "other-client-key.pem"),
	}
	ca, err := newCA("hetgpu test CA", f.CA)
	if err != nil {
		return f, err
	}
	other, err := newCA("another CA", "")
	if err != nil {
		return f, err
	}
	server := &x509.Certificate{
		Subject:     pkix.Name{CommonName: "hetgpu sidecar"},
		DNSNames:    append([]string{"localhost"}, serverNames...),
		IPAddresses: append([]net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}, ips...),
		// clientAuth too: a replica presents its own certificate to another (the HA probe, mTLS).
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	if err := ca.issue(server, f.ServerCert, f.ServerKey); err != nil {
		return f, err
	}
	client := &x509.Certificate{Subject: pkix.Name{CommonName: "hetgpu driver"}, DNSNames: clientNames, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	if err := ca.issue(client, f.ClientCert, f.ClientKey); err != nil {
		return f, err
	}
	stranger := &x509.Certificate{Subject: pkix.Name{CommonName: "stranger"}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	return f, other.issue(stranger, f.OtherClientCert, f.OtherClientKey)
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	return n
}

func newCA(name, certPath string) (*issuer, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("create CA: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	if certPath != "" {
		if err := writePEM(certPath, "CERTIFICATE", der); err != nil {
			return nil, err
		}
	}
	return &issuer{cert: cert, key: key}, nil
}

func (ca *issuer) issue(tmpl *x509.Certificate, certPath, keyPath string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl.SerialNumber = serial()
	tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return fmt.Errorf("issue %s: %w", tmpl.Subject.CommonName, err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	if err := writePEM(certPath, "CERTIFICATE", der); err != nil {
		return err
	}
	return writePEM(keyPath, "EC PRIVATE KEY", kder)
}

func writePEM(path, typ string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600)
}
