package e2e

// Jobs whose tasks run under Nomad's own drivers (raw_exec, exec, docker, podman) on the real
// agent: held, pinned to exact GPU IDs that reach the task's environment, run once and
// learned once from what the sidecar measures itself (runtime from the allocation, energy
// from the device plugin's energy counters, throughput from the task's progress file read
// through Nomad's file-system API), on a cluster with ACLs whose sidecar token has only the
// documented policy.

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

// anyDriverSpecs are the example jobspecs of other drivers, by file, with the driver they
// use; TestSidecarPinsJobspecs leaves them to TestAnyDriver.
var anyDriverSpecs = map[string]string{
	"exec-train.nomad.hcl":    "exec",
	"docker-nvidia.nomad.hcl": "docker",
	"podman-train.nomad.hcl":  "podman",
}

// anyDriverSteps is how many steps the test task does (its progress file counts them); the
// job's hetgpu.steps says anyDriverMetaSteps, so a throughput of anyDriverSteps / runtime
// can only come from the progress file.
const (
	anyDriverSteps     = 60
	anyDriverMetaSteps = 999
)

// progressScript is the test task: it writes its environment to
// ${NOMAD_ALLOC_DIR}/hetgpu/env, then does steps steps of 200 ms, rewriting the progress
// file after each (a temporary file renamed over it, as docs/any-driver.md says).
func progressScript(steps int) string {
	return fmt.Sprintf(`d="$NOMAD_ALLOC_DIR/hetgpu"
mkdir -p "$d"
env > "$d/env"
start=$(date +%%s)
i=0
while [ "$i" -lt %d ]; do
  sleep 0.2
  i=$((i + 1))
  el=$(( $(date +%%s) - start )); [ "$el" -gt 0 ] || el=1
  printf '{"steps": %%d, "samples_per_s": %%d}\n' "$i" $((i * 64 / el)) > "$d/progress.json.tmp"
  mv "$d/progress.json.tmp" "$d/progress.json"
done
`, steps)
}

// anyDriverJob is the example jobspec of driver drv (raw_exec runs the exec example) as job
// id, with the test task doing steps steps.
func anyDriverJob(t *testing.T, c *api.Client, drv, id string, steps int) *api.Job {
	t.Helper()
	file := map[string]string{"raw_exec": "exec-train.nomad.hcl", "exec": "exec-train.nomad.hcl",
		"docker": "docker-nvidia.nomad.hcl", "podman": "podman-train.nomad.hcl"}[drv]
	src, err := os.ReadFile(filepath.Join("..", "jobspecs", file))
	must(t, err)
	var vars string
	switch drv {
	case "raw_exec", "exec":
		vars = fmt.Sprintf("command = \"/bin/sh\"\nargs = [\"-c\", %q]\n", progressScript(steps))
	default:
		vars = fmt.Sprintf("image = \"busybox:1.36\"\nargs = [\"/bin/sh\", \"-c\", %q]\n", progressScript(steps))
	}
	job, err := c.Jobs().ParseHCLOpts(&api.JobsParseRequest{JobHCL: string(src), Variables: vars, Canonicalize: true})
	if err != nil {
		t.Fatalf("parse %s: %v", file, err)
	}
	job.ID, job.Name = &id, &id
	job.Meta["hetgpu.steps"] = fmt.Sprint(anyDriverMetaSteps)
	job.Meta["hetgpu.runtime"] = "1m"
	task := job.TaskGroups[0].Tasks[0]
	task.Driver = drv
	delete(task.Config, "runtime") // fake GPUs: no NVIDIA container runtime
	task.Resources.CPU, task.Resources.MemoryMB = ptrTo(100), ptrTo(64)
	// Two GPUs, so that the pin, the task's environment and the energy name exactly a set.
	task.Resources.Devices[0].Count = ptrTo(uint64(2))
	return job
}

// anyRecord is a stored run record as /v1/observations lists it.
type anyRecord struct {
	Seq         uint64 `json:"seq"`
	Source      string `json:"source"`
	Observation struct {
		AllocID       string  `json:"alloc_id"`
		Task          string  `json:"task"`
		GPUType       string  `json:"gpu_type"`
		GPUs          int     `json:"gpus"`
		Throughput    float64 `json:"throughput"`
		SamplesPerSec float64 `json:"samples_per_sec"`
		Steps         float64 `json:"steps"`
		EnergyJ       float64 `json:"energy_j"`
		AvgPowerW     float64 `json:"avg_power_w"`
		PeakPowerW    float64 `json:"peak_power_w"`
		RuntimeS      float64 `json:"runtime_s"`
		Partial       bool    `json:"partial"`
		ExitCode      int     `json:"exit_code"`
	} `json:"observation"`
}

func anyRecords(t *testing.T, sidecarURL, job string) ([]anyRecord, string) {
	t.Helper()
	body, err := httpGet(sidecarURL + "/v1/observations?namespace=default&job=" + job)
	must(t, err)
	var r struct {
		Observations []anyRecord `json:"observations"`
	}
	must(t, json.Unmarshal([]byte(body), &r))
	return r.Observations, body
}

// anyDriverEnv is one client with 4 fake V100s, raw_exec enabled, ACLs on, and the sidecar
// with a token of the documented policy only.
type anyDriverEnv struct {
	c          *cluster
	bins       binaries
	sidecarURL string
	node       *api.Node
}

func newAnyDriverEnv(t *testing.T) *anyDriverEnv {
	t.Helper()
	nomadBin := nomadBinary(t, "jobs of any task driver end to end")
	e := &anyDriverEnv{bins: buildBinaries(t, binHetgpu, binDevice, binDriver)}
	port := freePort(t)
	e.sidecarURL = fmt.Sprintf("http://127.0.0.1:%d", port)
	e.c = startClusterOpts(t, nomadBin, e.bins, []clusterClient{{Name: "v100", Fake: []string{"4x V100"}, Extra: rawExec}},
		clusterOpts{ACL: true})
	rules, err := os.ReadFile("../jobspecs/hetgpu-sidecar.policy.hcl")
	must(t, err)
	_, err = e.c.API.ACLPolicies().Upsert(&api.ACLPolicy{Name: "hetgpu-sidecar", Rules: string(rules)}, nil)
	must(t, err)
	tok, _, err := e.c.API.ACLTokens().Create(&api.ACLToken{Name: "hetgpu-sidecar", Type: "client", Policies: []string{"hetgpu-sidecar"}}, nil)
	must(t, err)
	startSidecarNomad(t, e.c, e.bins, port, fmt.Sprintf("  token = %q\n  sample_every = \"1s\"", tok.SecretID), `reconcile = "1s"`)
	nodes, _, err := e.c.API.Nodes().List(nil)
	must(t, err)
	e.node, _, err = e.c.API.Nodes().Info(nodes[0].ID, nil)
	must(t, err)
	return e
}

// skipWithout skips a driver the agent does not report detected and healthy, with the
// agent's own words.
func (e *anyDriverEnv) skipWithout(t *testing.T, drv string) {
	t.Helper()
	d := e.node.Drivers[drv]
	switch {
	case d == nil:
		t.Skipf("the agent has no %s driver plugin (node drivers: %s): nothing to run %s tasks with on this machine", drv, driverNames(e.node), drv)
	case !d.Detected || !d.Healthy:
		t.Skipf("the agent reports the %s driver detected=%v healthy=%v: %q", drv, d.Detected, d.Healthy, d.HealthDescription)
	}
}

func driverNames(n *api.Node) string {
	var out []string
	for k, d := range n.Drivers {
		out = append(out, fmt.Sprintf("%s(detected=%v healthy=%v)", k, d.Detected, d.Healthy))
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}

// allocFile reads a file of an allocation through Nomad's file-system API.
func allocFile(t *testing.T, c *api.Client, a *api.Allocation, path string) string {
	t.Helper()
	r, err := c.AllocFS().Cat(a, path, nil)
	if err != nil {
		t.Fatalf("read %s of allocation %s: %v", path, a.ID, err)
	}
	defer r.Close()
	b, err := io.ReadAll(r)
	must(t, err)
	return string(b)
}

// gpuPower is the summed power draw and energy counters of the given GPUs in the node's
// device stats, as the real agent returns them.
func gpuPower(t *testing.T, c *api.Client, node string, ids []string) (watts, joules float64, attrs string) {
	t.Helper()
	hs, err := c.Nodes().Stats(node, nil)
	must(t, err)
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	for _, g := range hs.DeviceStats {
		for id, st := range g.InstanceStats {
			if !want[id] || st == nil || st.Stats == nil {
				continue
			}
			if p := st.Stats.Attributes["power_draw"]; p != nil && p.FloatNumeratorVal != nil {
				watts += *p.FloatNumeratorVal
			}
			if en := st.Stats.Attributes["energy"]; en != nil && en.FloatNumeratorVal != nil {
				joules += *en.FloatNumeratorVal
			}
			if attrs == "" {
				var parts []string
				for k, v := range st.Stats.Attributes {
					parts = append(parts, fmt.Sprintf("%s=%s", k, statText(v)))
				}
				sort.Strings(parts)
				attrs = fmt.Sprintf("%s %s: %s (timestamp %s)", g.Name, id, strings.Join(parts, " "), st.Timestamp.Format(time.RFC3339Nano))
			}
		}
	}
	return watts, joules, attrs
}

func statText(v *api.StatValue) string {
	if v == nil {
		return "nil"
	}
	switch {
	case v.FloatNumeratorVal != nil:
		return fmt.Sprintf("%g%s", *v.FloatNumeratorVal, v.Unit)
	case v.IntNumeratorVal != nil:
		return fmt.Sprintf("%d%s", *v.IntNumeratorVal, v.Unit)
	case v.StringVal != nil:
		return fmt.Sprintf("%q", *v.StringVal)
	case v.BoolVal != nil:
		return fmt.Sprint(*v.BoolVal)
	}
	return "?"
}

// TestAnyDriver: for every driver the agent runs (raw_exec; exec, docker and podman where
// this machine has them, else skipped with the agent's reason) a held job of the example
// jobspec is pinned to exact GPUs, whose UUIDs reach the task's environment; it runs to
// completion once and is learned once, from the sidecar's own record: power and energy from
// the device plugin's energy counters, throughput from the progress file. A stopped raw_exec
// job is recorded partial with the steps its progress file counted, never as a finished run.
func TestAnyDriver(t *testing.T) {
	e := newAnyDriverEnv(t)
	c := e.c.API
	for _, drv := range []string{"raw_exec", "exec", "docker", "podman"} {
		t.Run(drv, func(t *testing.T) {
			e.skipWithout(t, drv)
			e.runToCompletion(t, drv)
		})
	}
	t.Run("stopped", func(t *testing.T) {
		id := "anydriver-stopped"
		job := anyDriverJob(t, c, "raw_exec", id, 600)
		_, _, err := c.Jobs().Register(job, nil)
		must(t, err)
		scCheckPinned(t, c, e.sidecarURL, id)
		runningOn(t, c, id, 90*time.Second)
		alloc := liveAllocs(c, id)[0].ID
		time.Sleep(6 * time.Second)
		_, _, err = c.Jobs().Deregister(id, false, nil)
		must(t, err)
		var recs []anyRecord
		var body string
		waitFor(t, 60*time.Second, "the stopped run's partial record", func() bool {
			recs, body = anyRecords(t, e.sidecarURL, id)
			return len(recs) > 0
		})
		time.Sleep(5 * time.Second) // several more rounds: nothing more is recorded
		recs, body = anyRecords(t, e.sidecarURL, id)
		t.Logf("stopped run's records: %s", body)
		if len(recs) != 1 || !recs[0].Observation.Partial || recs[0].Source != "sidecar" || recs[0].Observation.AllocID != alloc {
			t.Fatalf("want one partial sidecar record of allocation %s: %s", alloc, body)
		}
		if s := recs[0].Observation.Steps; !(s >= 10 && s < 600) {
			t.Errorf("stopped run recorded %g steps, want the progress file's count (at least 10 after 6 s, fewer than 600)", s)
		}
		if n := finishedRuns(t, e.sidecarURL, id); n != 0 {
			t.Errorf("%d finished runs learned for a stopped job", n)
		}
	})
}

// runToCompletion runs the example of drv to completion and checks its pin, its environment
// and its one learned record.
func (e *anyDriverEnv) runToCompletion(t *testing.T, drv string) {
	c := e.c.API
	id := "anydriver-" + strings.ReplaceAll(drv, "_", "-")
	job := anyDriverJob(t, c, drv, id, anyDriverSteps)
	t0 := time.Now()
	_, _, err := c.Jobs().Register(job, nil)
	must(t, err)
	scCheckPinned(t, c, e.sidecarURL, id)
	pinned, _, err := c.Jobs().Info(id, nil)
	must(t, err)
	_, devs := scPinOf(pinned.TaskGroups[0])
	t.Logf("%s: pinned to %v after %s", id, devs, time.Since(t0).Round(time.Millisecond))

	// While it runs: what the real agent's node stats say of the pinned GPUs.
	runningOn(t, c, id, 90*time.Second)
	time.Sleep(2 * time.Second)
	watts, j0, attrs := gpuPower(t, c, e.node.ID, devs)
	t.Logf("device stats of a pinned GPU on the real agent: %s", attrs)
	if watts <= 0 || j0 <= 0 {
		t.Fatalf("node stats give the pinned GPUs %g W and %g J; want both > 0", watts, j0)
	}

	waitDead(t, c, id, 2*time.Minute)
	stubs, _, err := c.Jobs().Allocations(id, true, nil)
	must(t, err)
	if len(stubs) != 1 || stubs[0].ClientStatus != "complete" {
		t.Fatalf("want one complete allocation: %s", jobState(c, id))
	}
	a, _, err := c.Allocations().Info(stubs[0].ID, nil)
	must(t, err)
	// The pinned IDs reach the task's environment, through the device plugin's reservation.
	env := map[string]string{}
	for _, line := range strings.Split(allocFile(t, c, a, "alloc/hetgpu/env"), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			env[k] = v
		}
	}
	for _, k := range []string{"NVIDIA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"} {
		got := strings.Split(env[k], ",")
		sort.Strings(got)
		if strings.Join(got, ",") != strings.Join(devs, ",") {
			t.Errorf("task env %s = %q, pinned %v", k, env[k], devs)
		}
	}
	t.Logf("task env: NVIDIA_VISIBLE_DEVICES=%s", env["NVIDIA_VISIBLE_DEVICES"])
	progress := allocFile(t, c, a, "alloc/hetgpu/progress.json")

	var recs []anyRecord
	var body string
	waitFor(t, 60*time.Second, id+"'s run record", func() bool {
		recs, body = anyRecords(t, e.sidecarURL, id)
		return len(recs) > 0
	})
	time.Sleep(5 * time.Second) // several more rounds: the run is not recorded again
	recs, body = anyRecords(t, e.sidecarURL, id)
	t.Logf("%s: progress file %s; learned record (%s after submit): %s", id, strings.TrimSpace(progress), time.Since(t0).Round(time.Second), body)
	if len(recs) != 1 || finishedRuns(t, e.sidecarURL, id) != 1 {
		t.Fatalf("want exactly one finished-run record: %s", body)
	}
	o := recs[0].Observation
	if recs[0].Source != "sidecar" || o.AllocID != a.ID || o.GPUs != len(devs) || o.GPUType != "v100" || o.Partial {
		t.Errorf("record %+v: want the sidecar's of allocation %s on %d v100", recs[0], a.ID, len(devs))
	}
	// Runtime from the allocation's task states.
	ts := a.TaskStates[pinned.TaskGroups[0].Tasks[0].Name]
	if ts == nil {
		t.Fatalf("allocation %s has no state of task %s", a.ID, pinned.TaskGroups[0].Tasks[0].Name)
	}
	if want := ts.FinishedAt.Sub(ts.StartedAt).Seconds(); math.Abs(o.RuntimeS-want) > 0.01 {
		t.Errorf("runtime_s %g, want the task's %g (started %s, finished %s)", o.RuntimeS, want, ts.StartedAt, ts.FinishedAt)
	}
	// Throughput from the progress file: its steps over the runtime (hetgpu.steps says 999).
	if o.Steps != anyDriverSteps || math.Abs(o.Throughput-anyDriverSteps/o.RuntimeS) > 1e-9 || o.SamplesPerSec <= 0 {
		t.Errorf("steps %g, throughput %g, samples/s %g: want the progress file's %d steps over runtime %g s = %g",
			o.Steps, o.Throughput, o.SamplesPerSec, anyDriverSteps, o.RuntimeS, anyDriverSteps/o.RuntimeS)
	}
	// Energy from the energy counters: the fake GPUs draw a steady idle power, so the run's
	// average power is the draw the node stats show for the pinned GPUs.
	if o.EnergyJ <= 0 || math.Abs(o.AvgPowerW-watts) > 0.05*watts || o.PeakPowerW < 0.95*watts {
		t.Errorf("energy %g J, avg power %g W, peak %g W: want the pinned GPUs' draw %g W (node stats) over %g s",
			o.EnergyJ, o.AvgPowerW, o.PeakPowerW, watts, o.RuntimeS)
	}
}
