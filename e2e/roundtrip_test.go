package e2e

import (
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/hashicorp/nomad/api"
)

// roundTripHCL uses every job field a batch job may carry on an OSS agent without Vault or
// Consul servers (a real agent refuses, on a batch job: update and migrate blocks; without
// Vault: a vault block; OSS: multiregion, "Multiregion jobs are unlicensed").
const roundTripHCL = `
job "roundtrip" {
  type        = "batch"
  priority    = 70
  node_pool   = "all"
  datacenters = ["dc*"]
  all_at_once = false
  meta = {
    "hetgpu.enable" = "true"
    "hetgpu.model"  = "resnet/ResNet-50"
    "team"          = "vision"
  }
  ui {
    description = "The team's nightly ResNet run."
    link {
      label = "runbook"
      url   = "https://example.com/runbook"
    }
  }
  constraint {
    attribute = "${meta.hetgpu.queue}"
    value     = "waiting-for-hetgpu"
  }
  constraint {
    attribute = "${attr.kernel.name}"
    value     = "linux"
  }
  affinity {
    attribute = "${node.class}"
    value     = "v100"
    weight    = 40
  }
  spread {
    attribute = "${node.datacenter}"
    weight    = 50
  }
  group "train" {
    count = 1
    reschedule {
      attempts       = 3
      interval       = "1h"
      delay          = "10s"
      delay_function = "exponential"
      max_delay      = "5m"
      unlimited      = false
    }
    restart {
      attempts = 0
      mode     = "fail"
    }
    consul {
      namespace = ""
    }
    spread {
      attribute = "${node.unique.name}"
    }
    ephemeral_disk {
      size = 200
    }
    meta = {
      "hetgpu.batch_size" = "64"
    }
    network {
      mode = "host"
    }
    task "train" {
      driver = "hetgpu"
      config {
        command = %q
        args    = ["-steps", "20", "-step-time", "100ms", "-batch", "64"]
      }
      identity {
        name        = "extra"
        aud         = ["example"]
        file        = true
        ttl         = "1h"
        change_mode = "restart"
      }
      env {
        FOO = "bar"
      }
      kill_timeout = "7s"
      logs {
        max_files     = 3
        max_file_size = 5
      }
      resources {
        cpu    = 100
        memory = 64
        device "nvidia/gpu" {
          count = 1
        }
      }
    }
  }
}
`

// TestReregisterRoundTrip registers a job using every field above (with its HCL source, as
// `nomad job run` does), lets the sidecar pin it, and compares the version Nomad stored
// before the pin with the pinned one field by field: only what Nomad changes on any
// register (indexes, version, status, submit time) and what the pin means to change (the
// hold, the node and GPU pins, hetgpu's part of the ui block) may differ. The pinned
// version keeps the submitted source and the user's ui text and link.
func TestReregisterRoundTrip(t *testing.T) {
	e := newFaultEnv(t, "the re-registration round trip", []clusterClient{{Name: "v100", Fake: []string{"2x V100"}}}, "")
	c := e.cluster
	src := fmt.Sprintf(roundTripHCL, e.bins.Toy)
	job, err := c.API.Jobs().ParseHCLOpts(&api.JobsParseRequest{JobHCL: src, Canonicalize: true})
	must(t, err)
	_, _, err = c.API.Jobs().RegisterOpts(job, &api.RegisterOptions{Submission: &api.JobSubmission{Source: src, Format: "hcl2"}}, nil)
	must(t, err)
	e.startSidecar(t)
	scCheckPinned(t, c.API, e.sidecarURL, "roundtrip")

	versions, _, _, err := c.API.Jobs().Versions("roundtrip", false, nil)
	must(t, err)
	byVersion := map[uint64]*api.Job{}
	for _, v := range versions {
		byVersion[*v.Version] = v
	}
	before, after := byVersion[0], byVersion[1]
	if before == nil || after == nil || len(versions) != 2 {
		t.Fatalf("want versions 0 (held) and 1 (pinned), have %d versions", len(versions))
	}
	diffs := jobDiff(t, before, after)
	var unexpected []string
	for _, d := range diffs {
		if !expectedPinChange(d) {
			unexpected = append(unexpected, d)
		} else {
			path, _, _ := strings.Cut(d, ":")
			t.Logf("changed as a pin means to: %s", path)
		}
	}
	t.Logf("%d fields differ, %d as a pin means them to", len(diffs), len(diffs)-len(unexpected))
	for _, d := range unexpected {
		t.Errorf("changed by the pin: %s", d)
	}
	// What the pin means to change, changed as meant.
	if scHeld(after) {
		t.Error("the pinned version still carries the hold")
	}
	ui := after.UI
	if ui == nil || !strings.Contains(ui.Description, "The team's nightly ResNet run.") {
		t.Errorf("the user's ui description is gone: %+v", ui)
	}
	labels := map[string]string{}
	for _, l := range ui.Links {
		labels[l.Label] = l.URL
	}
	if labels["runbook"] != "https://example.com/runbook" {
		t.Errorf("the user's ui link is gone: %v", labels)
	}
	implicit := 0
	for _, cn := range after.TaskGroups[0].Constraints {
		if cn.LTarget == "${attr.nomad.version}" && cn.RTarget == ">= 1.7.0-a" {
			implicit++
		}
	}
	if implicit != 1 {
		t.Errorf("the pinned group has %d copies of Nomad's implicit identity constraint, want 1", implicit)
	}
	for _, v := range []int{0, 1} {
		sub, _, err := c.API.Jobs().Submission("roundtrip", v, nil)
		if err != nil || sub == nil || sub.Source != src {
			t.Errorf("version %d: submitted source not kept (err %v)", v, err)
		}
	}
}

// jobDiff lists the leaves that differ between two job versions, as "path: before -> after".
func jobDiff(t *testing.T, a, b *api.Job) []string {
	t.Helper()
	toMap := func(j *api.Job) any {
		data, err := json.Marshal(j)
		must(t, err)
		var m any
		must(t, json.Unmarshal(data, &m))
		return m
	}
	var out []string
	var walk func(path string, x, y any)
	walk = func(path string, x, y any) {
		mx, okx := x.(map[string]any)
		my, oky := y.(map[string]any)
		if okx && oky {
			keys := map[string]bool{}
			for k := range mx {
				keys[k] = true
			}
			for k := range my {
				keys[k] = true
			}
			var ks []string
			for k := range keys {
				ks = append(ks, k)
			}
			sort.Strings(ks)
			for _, k := range ks {
				walk(path+"."+k, mx[k], my[k])
			}
			return
		}
		lx, okx := x.([]any)
		ly, oky := y.([]any)
		if okx && oky && len(lx) == len(ly) && !strings.HasSuffix(path, "Constraints") {
			for i := range lx {
				walk(fmt.Sprintf("%s[%d]", path, i), lx[i], ly[i])
			}
			return
		}
		if !reflect.DeepEqual(x, y) {
			bx, _ := json.Marshal(x)
			by, _ := json.Marshal(y)
			out = append(out, fmt.Sprintf("%s: %s -> %s", path, bx, by))
		}
	}
	walk("", toMap(a), toMap(b))
	return out
}

// expectedPinChange reports a difference a pin makes by design or Nomad makes on any
// register: indexes, version, status and submit time; the job's constraints (the hold goes),
// the group's (the node pin), the GPU request's (the instance pin); the ui block (hetgpu's
// lines and link, the user's own kept: checked apart).
func expectedPinChange(d string) bool {
	path, _, _ := strings.Cut(d, ":")
	for _, p := range []string{".JobModifyIndex", ".ModifyIndex", ".Version", ".Status", ".StatusDescription", ".SubmitTime",
		".Stable", ".VersionTag", ".Constraints", ".UI.Description", ".UI.Links"} {
		if path == p {
			return true
		}
	}
	return path == ".TaskGroups[0].Constraints" || path == ".TaskGroups[0].Tasks[0].Resources.Devices[0].Constraints"
}
