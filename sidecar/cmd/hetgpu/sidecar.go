package main

import (
	"context"
	"fmt"
	"io"

	"github.com/hetgpu/hetgpu/sidecar/runtime/app"
)

func runSidecar(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("sidecar", stderr)
	configPath := fs.String("config", "", "HCL configuration file (docs/operator.md, Configuration); defaults without one")
	listen := fs.String("listen", "", "API address host:port (default 127.0.0.1:4656)")
	stateDir := fs.String("state-dir", "", "directory of the state file sidecar.db and the predictor catalog")
	shadow := fs.Bool("shadow", false, "decide and record without pinning (needs Nomad)")
	logLevel := fs.String("log-level", "", "log level: trace, debug, info, warn, error")
	haOn := fs.Bool("ha", false, "run as one of several replicas with one leader elected on a Nomad Variables lock (see the ha block)")
	tlsCert := fs.String("tls-cert", "", "serve HTTPS with this PEM certificate (config tls.cert_file)")
	tlsKey := fs.String("tls-key", "", "the certificate's PEM private key (config tls.key_file)")
	tlsClientCA := fs.String("tls-client-ca", "", "require client certificates signed by this PEM CA (mTLS; config tls.client_ca_file)")
	tlsHealthOpen := fs.Bool("tls-health-without-client-cert", false, "with -tls-client-ca: GET /v1/health answers clients without a certificate, for Nomad's http check; everything else still needs one (config tls.health_without_client_cert)")
	insecure := fs.Bool("insecure", false, "serve a non-loopback address without TLS or tokens anyway (config insecure)")
	setUsage(fs, `Usage: hetgpu sidecar [-config FILE] [flags]

Runs the scheduler sidecar beside the Nomad servers: holds annotated jobs until it pins them
to a node and exact GPUs, and serves the API (queue, decisions, explain, observations,
metrics) and a GPU fleet dashboard at /ui/fleet. Nomad is reached through NOMAD_ADDR, NOMAD_TOKEN, NOMAD_NAMESPACE and the NOMAD_*
TLS variables, or the config file's nomad block. Without a Nomad address it runs on the
embedded simulated cluster (accelerated clock) and serves the same API.`)
	if err := parseFlags(fs, args, "hetgpu sidecar", " (use -config FILE)"); err != nil {
		return err
	}
	// Flags apply before the checks: -tls-cert may be what makes the file's listen valid.
	cfg, err := app.ReadConfig(*configPath)
	if err != nil {
		return err
	}
	if *listen != "" {
		cfg.Listen = *listen
	}
	if *stateDir != "" {
		cfg.StateDir = *stateDir
	}
	if *shadow {
		cfg.Shadow = true
	}
	if *logLevel != "" {
		cfg.LogLevel = *logLevel
	}
	if *haOn {
		if cfg.HA == nil {
			cfg.HA = &app.HAConfig{}
		}
		cfg.HA.Enabled = true
	}
	applyTLSFlags(cfg, *tlsCert, *tlsKey, *tlsClientCA, *tlsHealthOpen, *insecure)
	if err := cfg.Finish(); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	s, err := app.New(cfg, stderr)
	if err != nil {
		return err
	}
	go func() {
		select {
		case addr := <-s.Addr:
			fmt.Fprintf(stdout, "hetgpu sidecar: API on %s://%s (backend %s)\n", map[bool]string{true: "https", false: "http"}[cfg.TLSFiles().Enabled()], addr, map[bool]string{true: "nomad", false: "simulated"}[cfg.UseNomad()])
		case <-ctx.Done():
		}
	}()
	return s.Run(ctx)
}

// applyTLSFlags lets flags set or override the config's tls block and insecure.
func applyTLSFlags(cfg *app.Config, cert, key, clientCA string, healthOpen, insecure bool) {
	if cert != "" || key != "" || clientCA != "" || healthOpen {
		if cfg.TLS == nil {
			cfg.TLS = &app.TLSConfig{}
		}
		for _, f := range []struct {
			dst *string
			v   string
		}{{&cfg.TLS.CertFile, cert}, {&cfg.TLS.KeyFile, key}, {&cfg.TLS.ClientCAFile, clientCA}} {
			if f.v != "" {
				*f.dst = f.v
			}
		}
		if healthOpen {
			cfg.TLS.HealthWithoutClientCert = true
		}
	}
	if insecure {
		cfg.Insecure = true
	}
}
