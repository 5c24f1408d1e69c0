package e2e

// GPU sharing on the real agent: the device plugin's sharing block turns a fake GPU into MPS
// slots, the sidecar pins sharing jobs to slot IDs, the task driver runs them as MPS clients
// of the GPU's daemon; exclusive jobs keep to whole GPUs; a MIG slice runs with its own UUID.

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

// submitSlotJob registers the resnet50 example asking for one GPU slot (device
// "nvidia/gpu-slot") instead of two GPUs, as a model of its own.
func submitSlotJob(t *testing.T, c *api.Client, bins binaries, id, model, device string, steps int) {
	t.Helper()
	job := toyJob(t, c, bins, id, steps, "100ms")
	job.Meta["hetgpu.model"] = model
	task := job.TaskGroups[0].Tasks[0]
	task.Resources.Devices = []*api.RequestedDevice{{Name: device, Count: ptrTo[uint64](1)}}
	if _, _, err := c.Jobs().Register(job, nil); err != nil {
		t.Fatalf("register %s: %v", id, err)
	}
}

// liveAlloc returns the job's one running allocation (full), or nil.
func liveAlloc(c *api.Client, id string) *api.Allocation {
	live := liveAllocs(c, id)
	if len(live) != 1 || live[0].ClientStatus != "running" {
		return nil
	}
	a, _, err := c.Allocations().Info(live[0].ID, nil)
	if err != nil {
		return nil
	}
	return a
}

// allocDevices returns the device group name and instance IDs an allocation holds.
func allocDevices(a *api.Allocation) (string, []string) {
	var name string
	var ids []string
	for _, tr := range a.AllocatedResources.Tasks {
		for _, d := range tr.Devices {
			name = d.Vendor + "/" + d.Type + "/" + d.Name
			ids = append(ids, d.DeviceIDs...)
		}
	}
	sort.Strings(ids)
	return name, ids
}

func TestSharedSlotsOnRealAgent(t *testing.T) {
	e := newFaultEnv(t, "GPU slots end to end", []clusterClient{{Name: "share", Fake: []string{"2x V100"},
		DeviceExtra: "    sharing {\n      gpus  = [\"0\"]\n      slots = 2\n    }"}}, "")
	nodes, _, err := e.API.Nodes().List(nil)
	must(t, err)
	node, _, err := e.API.Nodes().Info(nodes[0].ID, nil)
	must(t, err)
	var slotGroup *api.NodeDeviceResource
	var wholeUUID string
	for _, d := range node.NodeResources.Devices {
		switch d.Type {
		case "gpu-slot":
			slotGroup = d
		case "gpu":
			for _, in := range d.Instances {
				wholeUUID = in.ID
			}
		}
	}
	if slotGroup == nil || len(slotGroup.Instances) != 2 || wholeUUID == "" {
		t.Fatalf("node devices: want one gpu-slot group of 2 and one whole GPU, got %+v", node.NodeResources.Devices)
	}
	parent := *slotGroup.Attributes["parent_uuid"].StringVal
	memMiB := *slotGroup.Attributes["memory"].IntVal
	t.Logf("slot group %s: parent %s, %d MiB per slot", slotGroup.Name, parent, memMiB)

	e.startSidecar(t)
	submitSlotJob(t, e.API, e.bins, "share-a", "resnet/ResNet-18", "nvidia/gpu-slot", 150)
	submitSlotJob(t, e.API, e.bins, "share-b", "lstm/LM", "nvidia/gpu-slot", 150)
	submitSlotJob(t, e.API, e.bins, "exclusive", "resnet/ResNet-50", "nvidia/gpu", 40)

	// Both sharing jobs run at once, on the two slots of GPU 0, as pinned.
	var allocs []*api.Allocation
	waitFor(t, 90*time.Second, "share-a and share-b running together", func() bool {
		a, b := liveAlloc(e.API, "share-a"), liveAlloc(e.API, "share-b")
		allocs = []*api.Allocation{a, b}
		return a != nil && b != nil
	}, func() string { return jobState(e.API, "share-a") + " | " + jobState(e.API, "share-b") })
	seen := map[string]bool{}
	for i, id := range []string{"share-a", "share-b"} {
		a := allocs[i]
		group, ids := allocDevices(a)
		if group != "nvidia/gpu-slot/"+slotGroup.Name || len(ids) != 1 || !strings.HasPrefix(ids[0], parent+"-slot") || seen[ids[0]] {
			t.Errorf("%s holds %s %v, want its own slot of %s", id, group, ids, parent)
		}
		seen[ids[0]] = true
		j, _, err := e.API.Jobs().Info(id, nil)
		must(t, err)
		_, pinned := scPinOf(j.TaskGroups[0])
		if strings.Join(pinned, ",") != strings.Join(ids, ",") {
			t.Errorf("%s pinned to %v, holds %v", id, pinned, ids)
		}
		var logs string
		waitFor(t, 20*time.Second, id+" MPS environment in its log", func() bool {
			logs = driverE2ELogs(t, e.API, a, "train")
			return strings.Contains(logs, "MPS client: slots")
		}, func() string { return logs })
		want := fmt.Sprintf(`MPS client: slots %s, CUDA_MPS_ACTIVE_THREAD_PERCENTAGE="50" CUDA_MPS_PINNED_DEVICE_MEM_LIMIT="0=%dMB"`, ids[0], memMiB)
		if !strings.Contains(logs, want) || !strings.Contains(logs, fmt.Sprintf("NVIDIA_VISIBLE_DEVICES=%q", parent)) {
			t.Errorf("%s log lacks %q and NVIDIA_VISIBLE_DEVICES=%q:\n%s", id, want, parent, logs)
		}
	}

	// The exclusive job gets the whole GPU 1, never a slot.
	waitFor(t, 90*time.Second, "the exclusive job running", func() bool { return liveAlloc(e.API, "exclusive") != nil },
		func() string { return jobState(e.API, "exclusive") })
	if group, ids := allocDevices(liveAlloc(e.API, "exclusive")); !strings.HasPrefix(group, "nvidia/gpu/") || len(ids) != 1 || ids[0] != wholeUUID {
		t.Errorf("exclusive job holds %s %v, want the whole GPU %s", group, ids, wholeUUID)
	}

	// A third sharing job waits while the slots are full, then runs on a freed slot.
	submitSlotJob(t, e.API, e.bins, "share-c", "A3C", "nvidia/gpu-slot", 20)
	for range 8 {
		time.Sleep(time.Second)
		if liveAlloc(e.API, "share-a") == nil || liveAlloc(e.API, "share-b") == nil {
			break
		}
		if live := liveAllocs(e.API, "share-c"); len(live) != 0 {
			t.Fatalf("share-c got an allocation while both slots are in use: %s", jobState(e.API, "share-c"))
		}
	}
	if j, _, err := e.API.Jobs().Info("share-c", nil); err != nil || !scHeld(j) {
		t.Errorf("share-c not held while the slots are full: %v %s", err, jobState(e.API, "share-c"))
	}
	waitDead(t, e.API, "share-a", 2*time.Minute)
	waitDead(t, e.API, "share-b", time.Minute)
	waitFor(t, 90*time.Second, "share-c running on a freed slot", func() bool {
		a := liveAlloc(e.API, "share-c")
		if a == nil {
			return false
		}
		_, ids := allocDevices(a)
		return len(ids) == 1 && strings.HasPrefix(ids[0], parent+"-slot")
	}, func() string { return jobState(e.API, "share-c") })
	waitDead(t, e.API, "share-c", 2*time.Minute)

	// The run records of the pair name each other as co-runner.
	type rec struct {
		Observation struct {
			ModelName  string  `json:"model_name"`
			CoRunner   string  `json:"co_runner"`
			CoRunnerJ  string  `json:"co_runner_job"`
			Throughput float64 `json:"throughput"`
			AvgPowerW  float64 `json:"avg_power_w"`
		} `json:"observation"`
	}
	records := map[string]rec{}
	waitFor(t, 60*time.Second, "run records of the three sharing jobs", func() bool {
		for _, id := range []string{"share-a", "share-b", "share-c"} {
			var r struct {
				Observations []rec `json:"observations"`
			}
			if scGet(e.sidecarURL+"/v1/observations?namespace=default&job="+id, &r) != nil || len(r.Observations) == 0 {
				return false
			}
			records[id] = r.Observations[0]
		}
		return true
	})
	for id, want := range map[string]string{"share-a": "LM", "share-b": "ResNet-18"} {
		o := records[id].Observation
		t.Logf("%s: %s %.2f steps/s, %.0f W, co-runner %q (%s)", id, o.ModelName, o.Throughput, o.AvgPowerW, o.CoRunner, o.CoRunnerJ)
		if o.CoRunner != want {
			t.Errorf("%s run record co_runner = %q, want %q", id, o.CoRunner, want)
		}
	}
	if o := records["share-c"].Observation; o.CoRunner != "" {
		t.Errorf("share-c ran alone but names co-runner %q", o.CoRunner)
	}
	var ex map[string]any
	must(t, scGet(e.sidecarURL+"/v1/jobs/default/share-b/explain", &ex))
	t.Logf("explain share-b: %v", ex)
}

func TestMIGSliceOnRealAgent(t *testing.T) {
	e := newFaultEnv(t, "MIG slices end to end", []clusterClient{{Name: "mig", Fake: []string{"1x A100-SXM4-40GB"},
		FakeExtra:   "      mig {\n        gpu      = 0\n        profiles = [\"3g.20gb\", \"3g.20gb\"]\n      }",
		DriverExtra: "    fake_mig = [\"0=3g.20gb,3g.20gb\"]"}}, "")
	e.startSidecar(t)
	submitSlotJob(t, e.API, e.bins, "on-mig", "resnet/ResNet-18", "nvidia/gpu", 20)
	var a *api.Allocation
	waitFor(t, 90*time.Second, "the job running on a MIG slice", func() bool {
		a = liveAlloc(e.API, "on-mig")
		return a != nil
	}, func() string { return jobState(e.API, "on-mig") })
	group, ids := allocDevices(a)
	if !strings.Contains(group, "MIG 3g.20gb") || len(ids) != 1 || !strings.HasPrefix(ids[0], "MIG-") {
		t.Fatalf("allocation holds %s %v, want one MIG 3g.20gb slice", group, ids)
	}
	var logs string
	waitFor(t, 20*time.Second, "the slice's UUID in the task's environment", func() bool {
		logs = driverE2ELogs(t, e.API, a, "train")
		return strings.Contains(logs, fmt.Sprintf("NVIDIA_VISIBLE_DEVICES=%q", ids[0]))
	}, func() string { return logs })
	waitDead(t, e.API, "on-mig", 2*time.Minute)

	// The placement and the run record treat the slice as a GPU type of its own.
	var ex struct {
		Groups []struct {
			Decision struct {
				Decision struct{ GPUType string } `json:"decision"`
			} `json:"decision"`
		} `json:"groups"`
	}
	must(t, scGet(e.sidecarURL+"/v1/jobs/default/on-mig/explain", &ex))
	if len(ex.Groups) != 1 || ex.Groups[0].Decision.Decision.GPUType != "a100-mig-3g.20gb" {
		t.Errorf("decision GPU type = %+v, want a100-mig-3g.20gb", ex.Groups)
	}
	waitFor(t, 60*time.Second, "the slice run's record", func() bool {
		var r struct {
			Observations []struct {
				Observation struct {
					GPUType string `json:"gpu_type"`
				} `json:"observation"`
			} `json:"observations"`
		}
		return scGet(e.sidecarURL+"/v1/observations?namespace=default&job=on-mig", &r) == nil && len(r.Observations) == 1 &&
			r.Observations[0].Observation.GPUType == "a100-mig-3g.20gb"
	})
}
