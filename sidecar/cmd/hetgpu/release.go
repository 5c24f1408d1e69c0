package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/hetgpu/hetgpu/sidecar/backends/nomad"
	"github.com/hetgpu/hetgpu/sidecar/runtime/app"
)

func runRelease(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("release", stderr)
	namespace := fs.String("namespace", "", "the job's namespace (default NOMAD_NAMESPACE, else default)")
	address := fs.String("address", "", "Nomad address (default NOMAD_ADDR)")
	configPath := fs.String("config", "", "sidecar configuration file whose nomad block to use")
	setUsage(fs, `Usage: hetgpu release [flags] JOB

Hands a held job back to plain Nomad scheduling: removes the hetgpu hold constraint and keeps
everything else (meta is untouched, so nothing restarts). Uses NOMAD_ADDR, NOMAD_TOKEN and the
NOMAD_* TLS variables.`)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return fmt.Errorf("%w: hetgpu release takes exactly one job ID, got %d arguments", errUsage, fs.NArg())
	}
	cfg, err := app.LoadConfig(*configPath)
	if err != nil {
		return err
	}
	if *address != "" {
		cfg.Nomad.Address = *address
	}
	client, _, err := app.NomadClient(cfg.Nomad)
	if err != nil {
		return err
	}
	ns := *namespace
	if ns == "" {
		ns = os.Getenv("NOMAD_NAMESPACE")
	}
	if ns == "" || ns == "*" {
		ns = "default"
	}
	job := fs.Arg(0)
	rpc, err := app.NomadRPC(cfg.Nomad)
	if err != nil {
		return err
	}
	resp, err := nomad.Release(ctx, client, rpc, ns, job)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "released %s/%s to plain Nomad scheduling (job modify index %d, evaluation %s)\n", ns, job, resp.JobModifyIndex, resp.EvalID)
	return nil
}
