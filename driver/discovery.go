package driver

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"

	"github.com/hetgpu/hetgpu/driver/report"
)

// defaultNomadAddress is the local agent the driver asks for the sidecar's service.
const defaultNomadAddress = "http://127.0.0.1:4646"

// LeaderTag marks the sidecar replica that leads; the driver prefers it, any other replica
// sends writers on with a 307 (report.FollowRedirects).
const LeaderTag = "leader"

// checkSidecarConfig checks the options that say how the driver reaches the sidecar.
func checkSidecarConfig(c PluginConfig) error {
	if c.SidecarAddr != "" && c.SidecarService != "" {
		return fmt.Errorf(`config fields "sidecar_addr" = %q and "sidecar_service" = %q: want one of them (a fixed URL, or the Nomad service to look up)`, c.SidecarAddr, c.SidecarService)
	}
	if c.SidecarService != "" && (!strings.HasPrefix(c.NomadAddress, "http://") && !strings.HasPrefix(c.NomadAddress, "https://") && !strings.HasPrefix(c.NomadAddress, "unix://")) {
		return fmt.Errorf(`config field "nomad_address": got %q, want the local agent's URL such as %q`, c.NomadAddress, defaultNomadAddress)
	}
	if (c.SidecarCertFile == "") != (c.SidecarKeyFile == "") {
		return fmt.Errorf(`config fields "sidecar_cert_file" = %q and "sidecar_key_file" = %q: want both (a client certificate for mTLS) or neither`, c.SidecarCertFile, c.SidecarKeyFile)
	}
	return nil
}

// reportConfig is the reporter's configuration: the fixed URL or a Nomad service lookup, and
// an HTTP client with the sidecar's CA and client certificate when configured.
func reportConfig(c PluginConfig, log hclog.Logger) (report.Config, error) {
	rc := report.Config{Addr: c.SidecarAddr, Token: c.SidecarToken, SpoolDir: c.SpoolDir, Logger: log.Named("report")}
	tc, err := sidecarTLS(c)
	if err != nil {
		return rc, err
	}
	if tc != nil {
		rc.Client = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: tc, Proxy: http.ProxyFromEnvironment}}
	}
	if c.SidecarService != "" {
		scheme := "http"
		if tc != nil {
			scheme = "https"
		}
		res, err := newServiceResolver(c.NomadAddress, c.NomadToken, c.NomadNamespace, c.SidecarService, scheme)
		if err != nil {
			return rc, err
		}
		rc.Resolve = res.resolve
	}
	return rc, nil
}

// sidecarTLS builds the TLS client configuration (nil when no TLS option is set).
func sidecarTLS(c PluginConfig) (*tls.Config, error) {
	if c.SidecarCAFile == "" && c.SidecarCertFile == "" {
		return nil, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if c.SidecarCAFile != "" {
		pem, err := os.ReadFile(c.SidecarCAFile)
		if err != nil {
			return nil, fmt.Errorf(`config field "sidecar_ca_file" = %q: %w`, c.SidecarCAFile, err)
		}
		tc.RootCAs = x509.NewCertPool()
		if !tc.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf(`config field "sidecar_ca_file" = %q: want PEM CA certificates, found none`, c.SidecarCAFile)
		}
	}
	if c.SidecarCertFile != "" {
		pair, err := tls.LoadX509KeyPair(c.SidecarCertFile, c.SidecarKeyFile)
		if err != nil {
			return nil, fmt.Errorf(`config fields "sidecar_cert_file" = %q, "sidecar_key_file" = %q: want a PEM certificate and its key: %w`, c.SidecarCertFile, c.SidecarKeyFile, err)
		}
		tc.Certificates = []tls.Certificate{pair}
	}
	return tc, nil
}

// serviceResolver finds the sidecar through Nomad's service discovery (GET /v1/service/NAME
// on the local agent, in the sidecar job's namespace).
type serviceResolver struct {
	nomad  *api.Client
	name   string
	scheme string
}

func newServiceResolver(addr, token, namespace, name, scheme string) (*serviceResolver, error) {
	cfg := api.DefaultConfig()
	cfg.Address, cfg.SecretID, cfg.Namespace = addr, token, namespace
	c, err := api.NewClient(cfg)
	if err != nil {
		return nil, fmt.Errorf(`config field "nomad_address" = %q: %w`, addr, err)
	}
	return &serviceResolver{nomad: c, name: name, scheme: scheme}, nil
}

// resolve returns the URL of a registered instance: the one tagged LeaderTag when there is
// one, else the oldest registration (a stable choice while nothing changes).
func (s *serviceResolver) resolve(ctx context.Context) (string, error) {
	regs, _, err := s.nomad.Services().Get(s.name, (&api.QueryOptions{}).WithContext(ctx))
	if err != nil {
		return "", fmt.Errorf("Nomad service %q: %w", s.name, err)
	}
	regs = slices.DeleteFunc(regs, func(r *api.ServiceRegistration) bool { return r == nil || r.Address == "" || r.Port == 0 })
	if len(regs) == 0 {
		return "", fmt.Errorf("Nomad service %q: no instance registered (is the sidecar job running, and is sidecar_service its service name?)", s.name)
	}
	slices.SortStableFunc(regs, func(a, b *api.ServiceRegistration) int {
		al, bl := slices.Contains(a.Tags, LeaderTag), slices.Contains(b.Tags, LeaderTag)
		switch {
		case al && !bl:
			return -1
		case bl && !al:
			return 1
		case a.CreateIndex != b.CreateIndex:
			return int(min(max(int64(a.CreateIndex)-int64(b.CreateIndex), -1), 1))
		}
		return strings.Compare(a.ID, b.ID)
	})
	r := regs[0]
	return s.scheme + "://" + net.JoinHostPort(r.Address, strconv.Itoa(r.Port)), nil
}
