package e2e

import (
	"fmt"
	"io"
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
	nomad := nomadBinary(t, "the device plugin e2e test")
	bins := buildBinaries(t, binDevice)
	dir := agentDir(t, "hetgpu-device-e2e-")
	pluginDir := filepath.Join(dir, "plugins")
	installPlugins(t, pluginDir, bins.Device)
	// A dev agent (server and client in one) with raw_exec for the checking task.
	a := startAgent(t, nomad, dir, "nomad-agent", agentConfig{
		DataDir: filepath.Join(dir, "data"), PluginDir: pluginDir,
		HTTP: freePort(t), RPC: freePort(t), Serf: freePort(t), Server: true, Client: true,
		Extra: `
plugin "raw_exec" {
  config {
    enabled = true
  }
}
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
}`,
	}, "-dev")
	client := a.API

	node := waitNodes(t, client, 90*time.Second, 1, []*proc{a.proc}, hasDevices(2))[0]
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

	job := registerJob(t, client, `
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
}`)
	alloc := waitAlloc(t, client, *job.ID, "complete")
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
	waitFor(t, 30*time.Second, "A100 device stats with power_draw and nvlink_peers", func() bool {
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
	waitFor(t, 60*time.Second, "T4 instance unhealthy after XID 79", func() bool {
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
