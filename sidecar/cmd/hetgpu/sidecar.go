package main

import (
	"context"
	"fmt"
	"io"

	"github.com/hetgpu/hetgpu/sidecar/app"
)

func runSidecar(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("sidecar", stderr)
	configPath := fs.String("config", "", "HCL configuration file (see README, section Sidecar); defaults without one")
	listen := fs.String("listen", "", "API address host:port (default 127.0.0.1:4656)")
	stateDir := fs.String("state-dir", "", "directory of the state file sidecar.db and the predictor catalog")
	shadow := fs.Bool("shadow", false, "decide and record without pinning (needs Nomad)")
	logLevel := fs.String("log-level", "", "log level: trace, debug, info, warn, error")
	haOn := fs.Bool("ha", false, "run as one of several replicas with one leader elected on a Nomad Variables lock (see the ha block)")
	fs.Usage = func() {
		fmt.Fprintf(stderr, `Usage: hetgpu sidecar [-config FILE] [flags]

Runs the scheduler sidecar beside the Nomad servers: holds annotated jobs until it pins them
to a node and exact GPUs, and serves the API (queue, decisions, explain, observations,
metrics) and a GPU fleet dashboard at /ui/fleet. Nomad is reached through NOMAD_ADDR, NOMAD_TOKEN, NOMAD_NAMESPACE and the NOMAD_*
TLS variables, or the config file's nomad block. Without a Nomad address it runs on the
embedded simulated cluster (accelerated clock) and serves the same API.

Flags:
`)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: hetgpu sidecar: unexpected argument %q (use -config FILE)", errUsage, fs.Arg(0))
	}
	cfg, err := app.LoadConfig(*configPath)
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
		cfg.HA.Enabled = true
	}
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
			fmt.Fprintf(stdout, "hetgpu sidecar: API on http://%s (backend %s)\n", addr, map[bool]string{true: "nomad", false: "simulated"}[cfg.UseNomad()])
		case <-ctx.Done():
		}
	}()
	return s.Run(ctx)
}
