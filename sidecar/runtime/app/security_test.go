package app

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hetgpu/hetgpu/internal/testcerts"
)

func TestSecurityConfig(t *testing.T) {
	f := testcerts.MustWrite(t, t.TempDir())
	src := fmt.Sprintf(`
listen      = "0.0.0.0:4656"
read_token  = "r"
write_token = "w"
public_explain   = true
explain_link_ttl = "48h"
max_body_bytes   = 65536
max_observations = 50
tls {
  cert_file      = %q
  key_file       = %q
  client_ca_file = %q
  health_without_client_cert = true
}
`, f.ServerCert, f.ServerKey, f.CA)
	c := mustConfig(t, src, "")
	sc := c.serverConfig()
	if sc.ReadToken != "r" || sc.WriteToken != "w" || sc.TLS.ClientCAFile != f.CA || !sc.TLS.HealthWithoutClientCert || !sc.PublicExplain ||
		sc.MaxBodyBytes != 65536 || sc.MaxObservations != 50 || c.ExplainLinkTTLD != 48*time.Hour || c.publicURL() != "https://0.0.0.0:4656" {
		t.Errorf("server config = %+v", sc)
	}
}

func TestSecurityConfigErrors(t *testing.T) {
	f := testcerts.MustWrite(t, t.TempDir())
	tests := []struct{ name, src, want string }{
		{"exposed", `listen = "0.0.0.0:4656"`, `s.hcl: config listen = "0.0.0.0:4656" is not a loopback address and the API has no TLS`},
		{"exposed with a token", "listen = \"10.1.2.3:4656\"\ntoken = \"t\"", "or set insecure = true"},
		{"tls without key", fmt.Sprintf("tls {\n cert_file = %q\n}", f.ServerCert), `tls.key_file = "": expected both`},
		{"key mismatch", fmt.Sprintf("tls {\n cert_file = %q\n key_file = %q\n}", f.ServerCert, f.ClientKey), "expected the private key of tls.cert_file"},
		{"missing CA", fmt.Sprintf("tls {\n cert_file = %q\n key_file = %q\n client_ca_file = \"/nope/ca.pem\"\n}", f.ServerCert, f.ServerKey), `tls.client_ca_file = "/nope/ca.pem": open /nope/ca.pem`},
		{"health without client CA", fmt.Sprintf("tls {\n cert_file = %q\n key_file = %q\n health_without_client_cert = true\n}", f.ServerCert, f.ServerKey),
			"s.hcl: tls.health_without_client_cert = true: expected tls.client_ca_file too"},
		{"health setting alone", "tls {\n health_without_client_cert = true\n}", "tls.health_without_client_cert = true: expected tls.client_ca_file too"},
		{"same tokens", "read_token = \"x\"\nwrite_token = \"x\"", "expected three different tokens"},
		{"short ttl", `explain_link_ttl = "1h"`, `config explain_link_ttl = "1h": expected a duration of at least 24h`},
		{"short secret", `explain_link_secret = "abc"`, "config explain_link_secret = \"(3 bytes)\": expected at least 32 bytes"},
		{"tiny body", `max_body_bytes = 10`, `config max_body_bytes = "10": expected bytes from 4096`},
		{"too many records", `max_observations = 20000`, `config max_observations = "20000": expected run records per request from 1 to 10000`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("HETGPU_TOKEN", "")
			c, err := ParseConfig("s.hcl", []byte(tt.src))
			if err == nil {
				err = c.Finish()
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want %q", err, tt.want)
			}
		})
	}
}
