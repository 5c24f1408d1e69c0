package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hetgpu/hetgpu/internal/testcerts"
	"github.com/hetgpu/hetgpu/sidecar/runtime/app"
)

// The TLS flags apply before the configuration is checked: they can be what makes a
// non-loopback listen address acceptable.
func TestTLSFlagsBeforeChecks(t *testing.T) {
	dir := t.TempDir()
	certs := testcerts.MustWrite(t, dir)
	path := filepath.Join(dir, "sidecar.hcl")
	if err := os.WriteFile(path, []byte("listen = \"0.0.0.0:4656\"\ntoken = \"t\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name          string
		cert, key, ca string
		health        bool // -tls-health-without-client-cert
		insecure      bool
		want          string // "" = accepted
	}{
		{"no flags", "", "", "", false, false, "no TLS"},
		{"TLS flags", certs.ServerCert, certs.ServerKey, "", false, false, ""},
		{"mTLS flags", certs.ServerCert, certs.ServerKey, certs.CA, false, false, ""},
		{"mTLS with open health", certs.ServerCert, certs.ServerKey, certs.CA, true, false, ""},
		{"open health without a client CA", certs.ServerCert, certs.ServerKey, "", true, false, "tls.health_without_client_cert = true: expected tls.client_ca_file too"},
		{"-insecure", "", "", "", false, true, ""},
		{"cert without key", certs.ServerCert, "", "", false, false, `tls.key_file = "": expected both`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("HETGPU_TOKEN", "")
			cfg, err := app.ReadConfig(path)
			if err != nil {
				t.Fatal(err)
			}
			applyTLSFlags(cfg, tt.cert, tt.key, tt.ca, tt.health, tt.insecure)
			err = cfg.Finish()
			if (tt.want == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Finish = %v, want %q", err, tt.want)
			}
			if err == nil && tt.ca != "" && cfg.TLSFiles().ClientCAFile != tt.ca {
				t.Errorf("client CA %q, want %q", cfg.TLSFiles().ClientCAFile, tt.ca)
			}
			if err == nil && cfg.TLSFiles().HealthWithoutClientCert != tt.health {
				t.Errorf("health_without_client_cert = %v, want %v", cfg.TLSFiles().HealthWithoutClientCert, tt.health)
			}
		})
	}
}
