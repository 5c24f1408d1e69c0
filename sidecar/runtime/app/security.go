package app

import (
	"fmt"
	"os"
	"time"

	"github.com/hetgpu/hetgpu/sidecar/runtime/explainlink"
	"github.com/hetgpu/hetgpu/sidecar/runtime/server"
	"github.com/hetgpu/hetgpu/sidecar/runtime/service"
)

// TLSConfig is the tls block: the API's certificate and key, and the CA of client
// certificates (set: every client must present one). HealthWithoutClientCert (with
// client_ca_file) opens GET /v1/health to clients without a certificate, so that a Nomad
// http check, which cannot present one, passes; every other request still needs one.
type TLSConfig struct {
	CertFile                string `hcl:"cert_file,optional"`
	KeyFile                 string `hcl:"key_file,optional"`
	ClientCAFile            string `hcl:"client_ca_file,optional"`
	HealthWithoutClientCert bool   `hcl:"health_without_client_cert,optional"`
}

// TLSFiles is the tls block as the server takes it.
func (c *Config) TLSFiles() server.TLSFiles {
	if c.TLS == nil {
		return server.TLSFiles{}
	}
	return server.TLSFiles{CertFile: c.TLS.CertFile, KeyFile: c.TLS.KeyFile, ClientCAFile: c.TLS.ClientCAFile,
		HealthWithoutClientCert: c.TLS.HealthWithoutClientCert}
}

// finishSecurity applies the environment's tokens and checks the security settings: the TLS
// files load, limits are in range, and a non-loopback listener has TLS and tokens (or
// insecure = true).
func (c *Config) finishSecurity(bad func(field string, v any, exp string) error) error {
	for _, t := range []struct {
		v   *string
		env string
	}{{&c.Token, "HETGPU_TOKEN"}, {&c.ReadToken, "HETGPU_READ_TOKEN"}, {&c.WriteToken, "HETGPU_WRITE_TOKEN"}} {
		if *t.v == "" {
			*t.v = os.Getenv(t.env)
		}
	}
	if c.ReadToken != "" && (c.ReadToken == c.WriteToken || c.ReadToken == c.Token) || c.WriteToken != "" && c.WriteToken == c.Token {
		return bad("read_token/write_token", "(hidden)", "three different tokens: each grants a different scope")
	}
	if c.TLSFiles().Enabled() {
		if _, err := server.LoadTLS(c.TLSFiles()); err != nil {
			return c.fileErr(err)
		}
	}
	var err error
	if c.ExplainLinkTTLD, err = duration(c.ExplainLinkTTL, explainlink.DefaultTTL); err != nil || c.ExplainLinkTTLD < 24*time.Hour {
		return bad("explain_link_ttl", c.ExplainLinkTTL, "a duration of at least 24h, e.g. \"720h\"")
	}
	if c.ExplainLinkSecret != "" && len(c.ExplainLinkSecret) < 32 {
		return bad("explain_link_secret", fmt.Sprintf("(%d bytes)", len(c.ExplainLinkSecret)), "at least 32 bytes of random text, or none (generated into state_dir)")
	}
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = server.DefaultMaxBody
	}
	if c.MaxBodyBytes < 4096 || c.MaxBodyBytes > 256<<20 {
		return bad("max_body_bytes", c.MaxBodyBytes, "bytes from 4096 to 268435456 (default 1048576)")
	}
	if c.MaxObservations == 0 {
		c.MaxObservations = server.DefaultMaxObservations
	}
	if c.MaxObservations < 1 || c.MaxObservations > service.MaxBatch {
		return bad("max_observations", c.MaxObservations, fmt.Sprintf("run records per request from 1 to %d (default %d)", service.MaxBatch, server.DefaultMaxObservations))
	}
	if _, err := server.CheckExposure(c.serverConfig()); err != nil {
		return c.fileErr(fmt.Errorf("config %w", err))
	}
	return nil
}

func (c *Config) fileErr(err error) error {
	if c.File != "" {
		return fmt.Errorf("%s: %w", c.File, err)
	}
	return err
}

// serverConfig is the API's configuration from this one (without logger and links).
func (c *Config) serverConfig() server.Config {
	return server.Config{Listen: c.Listen, Token: c.Token, ReadToken: c.ReadToken, WriteToken: c.WriteToken,
		TLS: c.TLSFiles(), Insecure: c.Insecure, PublicExplain: c.PublicExplain,
		MaxBodyBytes: c.MaxBodyBytes, MaxObservations: c.MaxObservations}
}

// explainLinks makes the signer of explain links when reads need a token (else the link
// opens anyway). The secret is the configured one, else one generated into stateDir.
func (c *Config) explainLinks(stateDir string) (*explainlink.Signer, error) {
	if (c.Token == "" && c.ReadToken == "") || c.PublicExplain {
		return nil, nil
	}
	secret := []byte(c.ExplainLinkSecret)
	if len(secret) == 0 {
		var err error
		if secret, err = explainlink.LoadOrCreateSecret(stateDir); err != nil {
			return nil, err
		}
	}
	return explainlink.New(secret, c.ExplainLinkTTLD, nil)
}

// publicURL is how users reach the API: public_url, else the listen address.
func (c *Config) publicURL() string {
	if c.PublicURL != "" {
		return c.PublicURL
	}
	if c.TLSFiles().Enabled() {
		return "https://" + c.Listen
	}
	return "http://" + c.Listen
}

// signQuery adapts a signer to the Nomad backend's link writer (nil: plain links).
func signQuery(s *explainlink.Signer) func(ns, id string) string {
	if s == nil {
		return nil
	}
	return s.Query
}
