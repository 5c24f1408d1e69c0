package e2e

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

// TestDevicePluginInNomad loads nomad-device-hetgpu into a real Nomad dev agent with a fake
// GPU mix, checks the node's device groups and attributes, and runs a job that asks for two GPUs
// with >= 40 GiB and receives them in its environment.
//
// Needs NOMAD_BIN (a Nomad >= 1.10 binary). The plugin comes from $HETGPU_BIN (make e2e) or is
// built here.
func TestDevicePluginInNomad(t *testing.T) {
	nomad := os.Getenv("NOMAD_BIN")
	if nomad == "" {
		t.Skip("NOMAD_BIN is not set: set it to a Nomad (>= 1.10) binary to run the device plugin e2e test, " +
			"e.g. NOMAD_BIN=/work/tools/nomad make e2e")
	}
	pluginDir := t.TempDir()
	devInstallPlugin(t, pluginDir)
	client := devStartAgent(t, nomad, pluginDir, `
plugin "nomad-device-hetgpu" {
  config {
    fingerprint_period = "5s"
    fake {
      gpus = ["2x T4", "2x A100-SXM4-40GB"]
      seed = "e2e"
      fault {
        gpu   = 0
        after = "12s"
        xid   = 79
      }
    }
  }
}`)

	node := devWaitForDevices(t, client, 2)
	groups := map[string]*api.NodeDeviceResource{}
	for _, g := range node.NodeResources.Devices {
		groups[g.Name] = g
		if g.Vendor != "nvidia" || g.Type != "gpu" || len(g.Instances) != 2 {
			t.Errorf("group %s: %s/%s with %d instances", g.Name, g.Vendor, g.Type, len(g.Instances))
		}
		for _, in := range g.Instances {
			if !in.Healthy || !strings.HasPrefix(in.ID, "GPU-") || in.Locality == nil || in.Locality.PciBusID == "" {
				t.Errorf("instance %+v", in)
			}
		}
	}
	a100, t4 := groups["NVIDIA A100-SXM4-40GB"], groups["Tesla T4"]
	if a100 == nil || t4 == nil {
		t.Fatalf("node device groups = %v", slices.Collect(func(yield func(string) bool) {
			for k := range groups {
				if !yield(k) {
					return
				}
			}
		}))
	}
	for key, want := range map[string]string{"memory": "40960 MiB", "architecture": "ampere", "compute_capability": "8.0",
		"power_limit": "400 W", "memory_bandwidth": "1555 GB/s", "pcie_generation": "4", "mig": "false"} {
		if got := devAttr(a100.Attributes[key]); got != want {
			t.Errorf("A100 attribute %s = %q, want %q", key, got, want)
		}
	}
	if got := devAttr(t4.Attributes["memory"]); got != "15360 MiB" {
		t.Errorf("T4 memory = %q", got)
	}

	job, err := client.Jobs().ParseHCL(`
job "hetgpu-device-e2e" {
  type = "batch"
  group "g" {
    task "check" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "echo NVIDIA_VISIBLE_DEVICES=$NVIDIA_VISIBLE_DEVICES; echo CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES"]
      }
      resources {
        cpu    = 50
        memory = 32
        device "nvidia/gpu" {
          count = 2
          constraint {
            attribute = "${device.attr.memory}"
            operator  = ">="
            value     = "40 GiB"
          }
        }
      }
    }
    restart {
      attempts = 0
      mode     = "fail"
    }
  }
}`, true)
	if err != nil {
		t.Fatalf("parse job: %v", err)
	}
	if _, _, err := client.Jobs().Register(job, nil); err != nil {
		t.Fatalf("register job: %v", err)
	}
	alloc := devWaitForAlloc(t, client, *job.ID)
	var ids []string
	for _, d := range alloc.AllocatedResources.Tasks["check"].Devices {
		if d.Name != "NVIDIA A100-SXM4-40GB" {
			t.Errorf("allocated device group %s, want the A100s", d.Name)
		}
		ids = append(ids, d.DeviceIDs...)
	}
	if len(ids) != 2 {
		t.Fatalf("allocated device IDs %v, want 2", ids)
	}
	out := devCat(t, client, alloc, "alloc/logs/check.stdout.0")
	for _, env := range []string{"NVIDIA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"} {
		var got []string
		for _, line := range strings.Split(out, "\n") {
			if v, ok := strings.CutPrefix(line, env+"="); ok {
				got = strings.Split(v, ",")
			}
		}
		slices.Sort(got)
		slices.Sort(ids)
		if !slices.Equal(got, ids) {
			t.Errorf("%s in the task = %v, want the allocated %v (stdout %q)", env, got, ids, out)
		}
	}
	// Device stats reach the client's host stats, with the topology the sidecar reads.
	devWaitFor(t, 30*time.Second, "A100 device stats with power_draw and nvlink_peers", func() bool {
		hs, err := client.Nodes().Stats(node.ID, nil)
		if err != nil {
			return false
		}
		for _, g := range hs.DeviceStats {
			if g.Name != "NVIDIA A100-SXM4-40GB" {
				continue
			}
			for _, s := range g.InstanceStats {
				topo := s.Stats.Nested["topology"]
				if s.Stats.Attributes["power_draw"].FloatNumeratorVal != nil && topo != nil &&
					topo.Attributes["nvlink_peers"].StringVal != nil && *topo.Attributes["nvlink_peers"].StringVal != "" {
					return true
				}
			}
		}
		return false
	})

	// The injected XID 79 on GPU 0 (a T4) reaches Nomad as an unhealthy instance.
	devWaitFor(t, 60*time.Second, "T4 instance unhealthy after XID 79", func() bool {
		n, _, err := client.Nodes().Info(node.ID, nil)
		if err != nil {
			return false
		}
		for _, g := range n.NodeResources.Devices {
			for _, in := range g.Instances {
				if g.Name == "Tesla T4" && !in.Healthy && in.HealthDescription == "XID 79: GPU has fallen off the bus" {
					return true
				}
			}
		}
		return false
	})
}

func devWaitFor(t *testing.T, d time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// devAttr renders an attribute like Nomad's CLI: "40960 MiB", "ampere", "false".
func devAttr(a *api.Attribute) string {
	if a == nil {
		return "<missing>"
	}
	var v string
	switch {
	case a.IntVal != nil:
		v = fmt.Sprint(*a.IntVal)
	case a.FloatVal != nil:
		v = fmt.Sprint(*a.FloatVal)
	case a.StringVal != nil:
		v = *a.StringVal
	case a.BoolVal != nil:
		v = fmt.Sprint(*a.BoolVal)
	}
	if a.Unit != "" {
		v += " " + a.Unit
	}
	return v
}

// devInstallPlugin copies $HETGPU_BIN/nomad-device-hetgpu into dir, or builds it there.
func devInstallPlugin(t *testing.T, dir string) {
	t.Helper()
	dst := filepath.Join(dir, "nomad-device-hetgpu")
	if bin := os.Getenv("HETGPU_BIN"); bin != "" {
		if b, err := os.ReadFile(filepath.Join(bin, "nomad-device-hetgpu")); err == nil {
			if err := os.WriteFile(dst, b, 0o755); err != nil {
				t.Fatal(err)
			}
			return
		}
	}
	cmd := exec.Command("go", "build", "-o", dst, "github.com/hetgpu/hetgpu/device/cmd/nomad-device-hetgpu")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build plugin: %v\n%s", err, out)
	}
}

func devFreePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// devStartAgent runs `nomad agent -dev` with the plugin dir and extra config on free ports and
// returns an API client; the agent's log is printed if the test fails.
func devStartAgent(t *testing.T, nomad, pluginDir, extra string) *api.Client {
	t.Helper()
	dir := t.TempDir()
	http, rpc, serf := devFreePort(t), devFreePort(t), devFreePort(t)
	cfg := fmt.Sprintf(`
data_dir   = %q
plugin_dir = %q
bind_addr  = "127.0.0.1"
ports {
  http = %d
  rpc  = %d
  serf = %d
}
client {
  enabled = true
  options {
    "fingerprint.denylist" = "env_aws,env_gce,env_azure,env_digitalocean"
  }
}
plugin "raw_exec" {
  config {
    enabled = true
  }
}
%s`, filepath.Join(dir, "data"), pluginDir, http, rpc, serf, extra)
	cfgPath := filepath.Join(dir, "agent.hcl")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	cmd := exec.Command(nomad, "agent", "-dev", "-config", cfgPath)
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatalf("start nomad: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("nomad agent log:\n%s", log.String())
		}
	})
	client, err := api.NewClient(&api.Config{Address: fmt.Sprintf("http://127.0.0.1:%d", http)})
	if err != nil {
		t.Fatal(err)
	}
	return client
}

// devWaitForDevices waits until the node is ready and reports at least n device groups.
func devWaitForDevices(t *testing.T, c *api.Client, n int) *api.Node {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		nodes, _, err := c.Nodes().List(nil)
		if err == nil && len(nodes) == 1 && nodes[0].Status == "ready" {
			node, _, err := c.Nodes().Info(nodes[0].ID, nil)
			if err == nil && node.NodeResources != nil && len(node.NodeResources.Devices) >= n {
				return node
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Fatalf("node did not report %d device groups within 90 s", n)
	return nil
}

// devWaitForAlloc waits for the job's allocation to finish and returns it.
func devWaitForAlloc(t *testing.T, c *api.Client, jobID string) *api.Allocation {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		stubs, _, err := c.Jobs().Allocations(jobID, true, nil)
		if err == nil && len(stubs) > 0 {
			s := stubs[0]
			switch s.ClientStatus {
			case "complete":
				a, _, err := c.Allocations().Info(s.ID, nil)
				if err != nil {
					t.Fatal(err)
				}
				return a
			case "failed", "lost":
				t.Fatalf("allocation %s %s: %v", s.ID, s.ClientStatus, s.TaskStates)
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
	evals, _, _ := c.Jobs().Evaluations(jobID, nil)
	for _, e := range evals {
		t.Logf("eval %s %s %s failed=%v", e.ID, e.Status, e.StatusDescription, e.FailedTGAllocs)
	}
	t.Fatalf("job %s did not complete within 90 s", jobID)
	return nil
}

func devCat(t *testing.T, c *api.Client, alloc *api.Allocation, path string) string {
	t.Helper()
	r, err := c.AllocFS().Cat(alloc, path, nil)
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	defer r.Close()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
