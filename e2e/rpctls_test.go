package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/hetgpu/hetgpu/internal/testcerts"
	"github.com/hetgpu/hetgpu/sidecar/backends/nomad"
	"github.com/hetgpu/hetgpu/sidecar/runtime/app"
)

// TestChildWriteOverTLSRPC: on a server with Nomad's tls block (http and rpc, with
// verify_server_hostname), a write to a periodic child goes through the servers' RPC over TLS
// (the 0x04 upgrade, the server checked as server.global.nomad, the API's client certificate)
// and keeps the child's ParentID; the same write with rpc_address = "off" goes through the
// HTTP API and cuts it. The write is `hetgpu release`'s (nomad.Release), the configuration the
// sidecar's (app.NomadRPC): the sidecar's pins take the same path.
func TestChildWriteOverTLSRPC(t *testing.T) {
	nomadBin := linuxNomadBinary(t, "child writes over TLS RPC")
	dir := agentDir(t, "hetgpu-tlsrpc-e2e-")
	// With verify_server_hostname Nomad accepts RPC peers named client.<region>.nomad or
	// server.<region>.nomad only ("invalid role or region for certificate"): the sidecar needs
	// a client certificate like a Nomad client agent's.
	certs, err := testcerts.WriteNamed(dir, []string{"server.global.nomad"}, []string{"client.global.nomad"})
	must(t, err)
	httpPort, rpcPort, serfPort := freePort(t), freePort(t), freePort(t)
	tlsBlock := fmt.Sprintf("tls {\n  http = true\n  rpc = true\n  ca_file = %q\n  cert_file = %q\n  key_file = %q\n  verify_server_hostname = true\n}\n",
		certs.CA, certs.ServerCert, certs.ServerKey)
	sdir := filepath.Join(dir, "server")
	startAgent(t, nomadBin, sdir, "nomad-tls", agentConfig{Name: "hetgpu-e2e-tls", DataDir: filepath.Join(sdir, "data"), LogLevel: "INFO",
		HTTP: httpPort, RPC: rpcPort, Serf: serfPort, Server: true, Extra: tlsBlock})
	ncfg := &app.NomadConfig{Address: fmt.Sprintf("https://127.0.0.1:%d", httpPort), CAFile: certs.CA, CertFile: certs.ClientCert, KeyFile: certs.ClientKey}
	c, _, err := app.NomadClient(ncfg)
	must(t, err)
	waitFor(t, 60*time.Second, "the TLS server to elect itself", func() bool {
		l, err := c.Status().Leader()
		return err == nil && l != ""
	})

	child := func(parent string) string {
		group, gpu := "train", "nvidia/gpu"
		one := uint64(1)
		job := &api.Job{ID: &parent, Name: &parent, Type: ptrTo("batch"), Datacenters: []string{"dc1"},
			Periodic:    &api.PeriodicConfig{Spec: ptrTo("0 0 1 1 *"), SpecType: ptrTo("cron"), ProhibitOverlap: ptrTo(true)},
			Meta:        map[string]string{"hetgpu.runtime": "10m"},
			Constraints: []*api.Constraint{api.NewConstraint("${meta.hetgpu.queue}", "=", "waiting-for-hetgpu")},
			TaskGroups: []*api.TaskGroup{{Name: &group, Tasks: []*api.Task{{Name: "train", Driver: "raw_exec",
				Config:    map[string]any{"command": "/bin/true"},
				Resources: &api.Resources{Devices: []*api.RequestedDevice{{Name: gpu, Count: &one}}}}}}}}
		_, _, err := c.Jobs().Register(job, nil)
		must(t, err)
		_, _, err = c.Jobs().PeriodicForce(parent, nil)
		must(t, err)
		var id string
		waitFor(t, 20*time.Second, "the periodic child of "+parent, func() bool {
			js, _, err := c.Jobs().PrefixList(parent + "/periodic-")
			if err != nil || len(js) == 0 {
				return false
			}
			id = js[0].ID
			return true
		})
		return id
	}
	for _, tt := range []struct {
		name, rpcAddress, parent string
		keepsParent              bool
	}{
		{"rpc over TLS", "", "tls-rpc", true},
		{"HTTP only", "off", "tls-http", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			id := child(tt.parent)
			cfg := *ncfg
			cfg.RPCAddress = tt.rpcAddress
			rpc, err := app.NomadRPC(&cfg)
			must(t, err)
			if (rpc != nil) != tt.keepsParent || (rpc != nil && rpc.TLS == nil) {
				t.Fatalf("RPC config %+v for rpc_address %q", rpc, tt.rpcAddress)
			}
			start := time.Now()
			if _, err := nomad.Release(context.Background(), c, rpc, "default", id); err != nil {
				t.Fatalf("release %s: %v", id, err)
			}
			t.Logf("release of %s (%s) took %s", id, tt.name, time.Since(start).Round(time.Millisecond))
			j, _, err := c.Jobs().Info(id, nil)
			must(t, err)
			for _, cn := range j.Constraints {
				if cn.LTarget == "${meta.hetgpu.queue}" {
					t.Errorf("%s still carries the hold after the release", id)
				}
			}
			if got := deref(j.ParentID); (got == tt.parent) != tt.keepsParent {
				t.Errorf("%s after the write: ParentID %q; keeps its parent %s: want %v", id, got, tt.parent, tt.keepsParent)
			}
			if tt.keepsParent && (j.UI == nil || !strings.Contains(j.UI.Description, "released")) {
				t.Errorf("%s: ui %+v, want the release line", id, j.UI)
			}
		})
	}
}
