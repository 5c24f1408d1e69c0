package e2e

// An operator's ordinary day against a real agent: drains, clients that stop or restart, a
// sidecar that is down while a run ends, jobs stopped by hand. Each test starts its own
// cluster; the toy workload stands in for training.

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

// fastHeartbeats makes a stopped client "down" within seconds instead of about half a
// minute.
const fastHeartbeats = "  heartbeat_grace   = \"2s\"\n  min_heartbeat_ttl = \"2s\"\n"

// submitToy registers the resnet50 example under id with the toy workload doing steps steps
// of stepTime each; meta is merged into the job's meta.
func submitToy(t *testing.T, c *api.Client, bins binaries, id string, steps int, stepTime string, meta map[string]string) {
	t.Helper()
	submitToyIn(t, c, bins, "", id, steps, stepTime, meta)
}

// submitToyIn is submitToy in namespace ns ("" for the client's).
func submitToyIn(t *testing.T, c *api.Client, bins binaries, ns, id string, steps int, stepTime string, meta map[string]string) {
	t.Helper()
	job := toyJob(t, c, bins, id, steps, stepTime)
	for k, v := range meta {
		job.Meta[k] = v
	}
	var wo *api.WriteOptions
	if ns != "" {
		job.Namespace, wo = &ns, &api.WriteOptions{Namespace: ns}
	}
	if _, _, err := c.Jobs().Register(job, wo); err != nil {
		t.Fatalf("register %s: %v", id, err)
	}
}

// toyJob parses the resnet50 example as job id with the toy workload doing steps steps of
// stepTime each.
func toyJob(t *testing.T, c *api.Client, bins binaries, id string, steps int, stepTime string) *api.Job {
	t.Helper()
	src, err := os.ReadFile("../jobspecs/resnet50-train.nomad.hcl")
	must(t, err)
	job, err := c.Jobs().ParseHCLOpts(&api.JobsParseRequest{JobHCL: string(src),
		Variables: fmt.Sprintf("toy_train = %q\n", bins.Toy), Canonicalize: true})
	must(t, err)
	job.ID, job.Name = &id, &id
	job.Meta["hetgpu.steps"] = fmt.Sprint(steps)
	job.TaskGroups[0].Tasks[0].Config["args"] = []any{"-steps", fmt.Sprint(steps), "-step-time", stepTime, "-batch", "64"}
	return job
}

// killToys ends the toy workloads of the cluster's allocations that outlive the test (a
// client killed with SIGKILL does not stop its tasks); a task's working directory lies in its
// allocation directory under the cluster's, so other tests' workloads are left alone.
func killToys(t *testing.T, c *cluster, bins binaries) { killTasks(t, c, bins.Toy) }

// killTasks ends, with the test, the processes of executable exe whose working directory lies
// in the cluster's directory (tasks a stopped client leaves running).
func killTasks(t *testing.T, c *cluster, exe string) {
	t.Cleanup(func() {
		procs, _ := filepath.Glob("/proc/[0-9]*/exe")
		for _, p := range procs {
			if x, err := os.Readlink(p); err != nil || x != exe {
				continue
			}
			cwd, err := os.Readlink(filepath.Join(filepath.Dir(p), "cwd"))
			if err != nil || !strings.HasPrefix(cwd, c.dir+string(filepath.Separator)) {
				continue
			}
			var pid int
			if _, err := fmt.Sscanf(p, "/proc/%d/exe", &pid); err == nil {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
}

// liveAllocs returns the job's allocations that are told to run and not ended.
func liveAllocs(c *api.Client, id string) []*api.AllocationListStub {
	stubs, _, err := c.Jobs().Allocations(id, true, nil)
	if err != nil {
		return nil
	}
	var out []*api.AllocationListStub
	for _, a := range stubs {
		if a.DesiredStatus == "run" && (a.ClientStatus == "running" || a.ClientStatus == "pending") {
			out = append(out, a)
		}
	}
	return out
}

// runningOn waits until the job has exactly one running allocation and returns its node.
func runningOn(t *testing.T, c *api.Client, id string, d time.Duration, not ...string) string {
	t.Helper()
	var node, why string
	waitFor(t, d, "job "+id+" running", func() bool {
		live := liveAllocs(c, id)
		if len(live) != 1 || live[0].ClientStatus != "running" {
			why = fmt.Sprintf("%d live allocations", len(live))
			return false
		}
		node = live[0].NodeID
		for _, n := range not {
			if n == node {
				why = "still on node " + n
				return false
			}
		}
		return true
	}, func() string { return why + "; " + jobState(c, id) })
	return node
}

// jobState summarises a job for failure messages: hold, allocations, blocked evaluations.
func jobState(c *api.Client, id string) string {
	var b strings.Builder
	if j, _, err := c.Jobs().Info(id, nil); err == nil {
		fmt.Fprintf(&b, "status %s held %v", deref(j.Status), scHeld(j))
		if j.UI != nil {
			fmt.Fprintf(&b, " ui %q", j.UI.Description)
		}
	}
	stubs, _, _ := c.Jobs().Allocations(id, true, nil)
	for _, a := range stubs {
		fmt.Fprintf(&b, "; alloc %s node %s %s/%s v%d", a.ID[:8], a.NodeID[:8], a.ClientStatus, a.DesiredStatus, a.JobVersion)
	}
	evals, _, _ := c.Jobs().Evaluations(id, nil)
	for _, e := range evals {
		if e.Status == api.EvalStatusBlocked {
			for g, m := range e.FailedTGAllocs {
				fmt.Fprintf(&b, "; blocked %s: %v", g, m.ConstraintFiltered)
			}
		}
	}
	return b.String()
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// reheldTags counts the job's hetgpu-rehold version tags.
func reheldTags(t *testing.T, c *api.Client, id string) int {
	t.Helper()
	return taggedVersions(t, c, id, "hetgpu-rehold-")
}

// taggedVersions counts the job's versions whose tag name starts with prefix.
func taggedVersions(t *testing.T, c *api.Client, id, prefix string) int {
	t.Helper()
	versions, _, _, err := c.Jobs().Versions(id, false, nil)
	must(t, err)
	n := 0
	for _, v := range versions {
		if v.VersionTag != nil && strings.HasPrefix(v.VersionTag.Name, prefix) {
			n++
		}
	}
	return n
}

func waitDead(t *testing.T, c *api.Client, id string, d time.Duration) {
	t.Helper()
	waitFor(t, d, "job "+id+" to finish", func() bool {
		j, _, err := c.Jobs().Info(id, nil)
		return err == nil && j.Status != nil && *j.Status == "dead"
	}, func() string { return jobState(c, id) })
}

// faultEnv is a cluster whose task drivers report to a sidecar on port, for the fault tests.
type faultEnv struct {
	*cluster
	bins       binaries
	port       int
	sidecarURL string
}

// newFaultEnv starts the cluster (serverExtra inside the server block) with the hetgpu
// binaries, and ends leftover toy workloads with the test.
func newFaultEnv(t *testing.T, purpose string, clients []clusterClient, serverExtra string) *faultEnv {
	t.Helper()
	nomadBin, bins := allBinaries(t, purpose)
	e := &faultEnv{bins: bins, port: freePort(t)}
	e.sidecarURL = fmt.Sprintf("http://127.0.0.1:%d", e.port)
	e.cluster = startClusterWith(t, nomadBin, e.bins, clients, fmt.Sprintf("    sidecar_addr = %q", e.sidecarURL), serverExtra)
	killToys(t, e.cluster, e.bins)
	return e
}

// startSidecar runs the sidecar against the cluster with a 1 s reconcile period.
func (e *faultEnv) startSidecar(t *testing.T) *proc {
	t.Helper()
	return startSidecar(t, e.cluster, e.bins, e.port, `reconcile = "1s"`)
}

// TestDrainKeepsPinnedBatchRunning: `nomad node drain -deadline 10m` on the node a pinned
// batch job runs on leaves it running to completion in its one allocation, as Nomad does
// for a plain batch job; hetgpu does not re-hold it.
func TestDrainKeepsPinnedBatchRunning(t *testing.T) {
	e := newFaultEnv(t, "drains end to end", []clusterClient{
		{Name: "v100a", Fake: []string{"4x V100"}}, {Name: "v100b", Fake: []string{"4x V100"}},
	}, "")
	c, bins := e.cluster, e.bins
	sidecar := e.startSidecar(t)

	submitToy(t, c.API, bins, "drain-run", 250, "100ms", nil)
	node := runningOn(t, c.API, "drain-run", 90*time.Second)
	start := time.Now()
	_, err := c.API.Nodes().UpdateDrainOpts(node, &api.DrainOptions{DrainSpec: &api.DrainSpec{Deadline: 10 * time.Minute}}, nil)
	must(t, err)
	// The old sidecar re-held within 0.1 s and Nomad stopped the allocation at once.
	time.Sleep(5 * time.Second)
	if live := liveAllocs(c.API, "drain-run"); len(live) != 1 || live[0].NodeID != node {
		t.Fatalf("5 s into the drain: %s", jobState(c.API, "drain-run"))
	}
	waitDead(t, c.API, "drain-run", 2*time.Minute)
	stubs, _, err := c.API.Jobs().Allocations("drain-run", true, nil)
	must(t, err)
	if len(stubs) != 1 || stubs[0].NodeID != node || stubs[0].ClientStatus != "complete" || stubs[0].DesiredStatus != "run" {
		t.Fatalf("want one allocation that completed on the drained node: %s", jobState(c.API, "drain-run"))
	}
	if n := reheldTags(t, c.API, "drain-run"); n != 0 {
		t.Errorf("the job was re-held %d times during the drain", n)
	}
	t.Logf("drain: the pinned job ran to completion on the draining node %s in %s", node[:8], time.Since(start).Round(time.Second))
	if sidecar.Exited() {
		t.Error("the sidecar exited on its own")
	}
}

// TestJobMovedTwice: the client a pinned job runs on dies; hetgpu re-holds the job once Nomad
// has the lost allocation to replace and pins it on another node; that client dies too, and
// the job moves to the third node.
func TestJobMovedTwice(t *testing.T) {
	e := newFaultEnv(t, "repeated moves end to end", []clusterClient{
		{Name: "v100a", Fake: []string{"2x V100"}}, {Name: "v100b", Fake: []string{"2x V100"}}, {Name: "v100c", Fake: []string{"2x V100"}},
	}, fastHeartbeats)
	c, bins := e.cluster, e.bins
	sidecar := e.startSidecar(t)
	clientOf := func(nodeID string) *agent {
		for _, cl := range c.clients {
			if self, err := cl.API.Agent().Self(); err == nil && self.Stats["client"]["node_id"] == nodeID {
				return cl
			}
		}
		t.Fatalf("no client agent for node %s", nodeID)
		return nil
	}

	submitToy(t, c.API, bins, "mover", 1500, "100ms", nil)
	var seen []string
	for move := 0; move < 3; move++ {
		start := time.Now()
		node := runningOn(t, c.API, "mover", 2*time.Minute, seen...)
		if move > 0 {
			t.Logf("move %d: running on node %s %s after the fault", move, node[:8], time.Since(start).Round(100*time.Millisecond))
		}
		seen = append(seen, node)
		if move < 2 {
			// The client dies: its allocation is lost, and Nomad has a replacement to place.
			clientOf(node).Stop(syscall.SIGKILL)
		}
	}
	if n := reheldTags(t, c.API, "mover"); n != 2 {
		t.Errorf("re-held %d times, want 2 (once per move)", n)
	}
	j, _, err := c.API.Jobs().Info("mover", nil)
	must(t, err)
	if scHeld(j) || j.UI == nil || !strings.Contains(j.UI.Description, "pinned to") {
		t.Errorf("the job is not shown pinned after the second move: %s", jobState(c.API, "mover"))
	}
	if sidecar.Exited() {
		t.Error("the sidecar exited on its own")
	}
}

// TestClientRestartKeepsPinnedJob: restarting the Nomad client under a pinned running job
// (SIGINT leaves its tasks running) keeps the job in its one allocation.
func TestClientRestartKeepsPinnedJob(t *testing.T) {
	e := newFaultEnv(t, "client restarts end to end", []clusterClient{{Name: "v100", Fake: []string{"2x V100"}}}, "")
	c, bins := e.cluster, e.bins
	e.startSidecar(t)

	submitToy(t, c.API, bins, "restart-run", 400, "100ms", nil)
	node := runningOn(t, c.API, "restart-run", 90*time.Second)
	first := liveAllocs(c.API, "restart-run")[0].ID
	start := time.Now()
	cl := c.clients[0]
	cl.Stop(syscall.SIGINT)
	cl.Start()
	waitFor(t, 60*time.Second, "the restarted client's API", func() bool {
		_, err := cl.API.Agent().Self()
		return err == nil
	})
	waitNodes(t, c.API, 90*time.Second, 1, []*proc{cl.proc}, driverHealthy)
	t.Logf("client restart: node ready again after %s", time.Since(start).Round(100*time.Millisecond))
	time.Sleep(5 * time.Second)
	if live := liveAllocs(c.API, "restart-run"); len(live) != 1 || live[0].ID != first || live[0].NodeID != node {
		t.Fatalf("after the client restart: %s", jobState(c.API, "restart-run"))
	}
	waitDead(t, c.API, "restart-run", 2*time.Minute)
	stubs, _, err := c.API.Jobs().Allocations("restart-run", true, nil)
	must(t, err)
	if len(stubs) != 1 || stubs[0].ClientStatus != "complete" {
		t.Errorf("want the one allocation complete: %s", jobState(c.API, "restart-run"))
	}
	if n := reheldTags(t, c.API, "restart-run"); n != 0 {
		t.Errorf("re-held %d times across a client restart", n)
	}
}

// TestDrainDeadlineEndsBatchJob: when a drain's deadline passes under a pinned batch job,
// Nomad kills its task and, since the task did not fail, counts the job finished and places
// nothing anew, as for a plain batch job. hetgpu re-holds nothing and learns no finished run.
func TestDrainDeadlineEndsBatchJob(t *testing.T) {
	e := newFaultEnv(t, "drain deadlines end to end", []clusterClient{
		{Name: "v100a", Fake: []string{"2x V100"}}, {Name: "v100b", Fake: []string{"2x V100"}},
	}, "")
	c, bins, sidecarURL := e.cluster, e.bins, e.sidecarURL
	e.startSidecar(t)

	submitToy(t, c.API, bins, "deadline-run", 1500, "100ms", nil)
	node := runningOn(t, c.API, "deadline-run", 90*time.Second)
	_, err := c.API.Nodes().UpdateDrainOpts(node, &api.DrainOptions{DrainSpec: &api.DrainSpec{Deadline: 2 * time.Second}}, nil)
	must(t, err)
	waitDead(t, c.API, "deadline-run", 60*time.Second)
	time.Sleep(5 * time.Second) // rounds that could re-hold or learn
	stubs, _, err := c.API.Jobs().Allocations("deadline-run", true, nil)
	must(t, err)
	if len(stubs) != 1 || stubs[0].DesiredStatus != "stop" || stubs[0].ClientStatus != "complete" {
		t.Fatalf("want the one allocation stopped by the drain: %s", jobState(c.API, "deadline-run"))
	}
	if n := reheldTags(t, c.API, "deadline-run"); n != 0 {
		t.Errorf("re-held %d times", n)
	}
	if n := finishedRuns(t, sidecarURL, "deadline-run"); n != 0 {
		t.Errorf("%d finished runs learned for a job killed by a drain deadline", n)
	}
}

// runRecord is one stored run record as GET /v1/observations lists it.
type runRecord struct {
	Source      string `json:"source"`
	Observation struct {
		AllocID  string  `json:"alloc_id"`
		Partial  bool    `json:"partial"`
		ExitCode int     `json:"exit_code"`
		Steps    float64 `json:"steps"`
	} `json:"observation"`
}

// runRecords lists the sidecar's stored run records of a job.
func runRecords(t *testing.T, sidecarURL, job string) []runRecord {
	t.Helper()
	var r struct {
		Observations []runRecord `json:"observations"`
	}
	must(t, scGet(sidecarURL+"/v1/observations?namespace=default&job="+job, &r))
	return r.Observations
}

// finishedRuns counts the stored records of a job that are finished runs (not partial).
func finishedRuns(t *testing.T, sidecarURL, job string) int {
	t.Helper()
	n := 0
	for _, r := range runRecords(t, sidecarURL, job) {
		if !r.Observation.Partial && r.Observation.ExitCode == 0 {
			n++
		}
	}
	return n
}

// TestInfeasibleReported: on a cluster of one 8x V100 node and one 4x T4 node, a group asking
// for 16 GPUs and the data-parallel example (2 nodes with 4 GPUs of one type) can never run;
// both are reported infeasible with the requirement that rules them out (explain JSON, ui
// line, queue, metric) within 30 s, and a group that fits, queued behind them, is pinned.
func TestInfeasibleReported(t *testing.T) {
	e := newFaultEnv(t, "infeasible groups end to end", []clusterClient{
		{Name: "v100", Fake: []string{"8x V100"}}, {Name: "t4", Fake: []string{"4x T4"}},
	}, "")
	c, bins, sidecarURL := e.cluster, e.bins, e.sidecarURL

	// Submitted before the sidecar starts, so all three wait for its first round.
	src, err := os.ReadFile("../jobspecs/resnet50-train.nomad.hcl")
	must(t, err)
	big, err := c.API.Jobs().ParseHCLOpts(&api.JobsParseRequest{JobHCL: string(src),
		Variables: fmt.Sprintf("toy_train = %q\n", bins.Toy), Canonicalize: true})
	must(t, err)
	big.ID, big.Name = ptrTo("big16"), ptrTo("big16")
	sixteen := uint64(16)
	big.TaskGroups[0].Tasks[0].Resources.Devices[0].Count = &sixteen
	big.Meta["hetgpu.priority_class"] = "high"
	_, _, err = c.API.Jobs().Register(big, nil)
	must(t, err)
	scRegister(t, c.API, "../jobspecs/ddp-resnet.nomad.hcl", "", bins.Toy)
	time.Sleep(time.Second)
	submitToy(t, c.API, bins, "fits", 100, "100ms", nil)

	start := time.Now()
	e.startSidecar(t)
	reasons := map[string]string{}
	for _, id := range []string{"big16", "ddp-resnet"} {
		var why string
		waitFor(t, 30*time.Second, id+" reported infeasible", func() bool {
			var ex struct {
				Groups []struct {
					Infeasible bool   `json:"infeasible"`
					Reason     string `json:"reason"`
				} `json:"groups"`
			}
			if err := scGet(sidecarURL+"/v1/jobs/default/"+id+"/explain", &ex); err != nil || len(ex.Groups) != 1 {
				why = fmt.Sprint(err)
				return false
			}
			j, _, err := c.API.Jobs().Info(id, nil)
			if err != nil || j.UI == nil || !strings.Contains(j.UI.Description, "cannot run on this cluster") {
				why = "no ui line yet"
				return false
			}
			reasons[id] = ex.Groups[0].Reason
			return ex.Groups[0].Infeasible && ex.Groups[0].Reason != ""
		}, func() string { return why })
		t.Logf("%s infeasible after %s: %s", id, time.Since(start).Round(100*time.Millisecond), reasons[id])
	}
	if !strings.Contains(reasons["big16"], "16 GPUs") || !strings.Contains(reasons["ddp-resnet"], "2 nodes") {
		t.Errorf("reasons do not name the requirement: %v", reasons)
	}
	// The explanation says how the ranker reads the job's hetgpu.runtime (the example's 2m):
	// with the calibration's prior before any run finished, the log-normal mean 2m x e^(0.5²/2).
	var ex struct {
		Groups []struct {
			Summary string `json:"summary"`
			Runtime *struct {
				DeclaredS  float64 `json:"declared_s"`
				LeftS      float64 `json:"left_s"`
				Calibrated bool    `json:"calibrated"`
				Runs       int     `json:"runs"`
			} `json:"runtime"`
		} `json:"groups"`
	}
	must(t, scGet(sidecarURL+"/v1/jobs/default/big16/explain", &ex))
	if r := ex.Groups[0].Runtime; r == nil || r.DeclaredS != 120 || math.Abs(r.LeftS-120*math.Exp(0.125)) > 0.5 || !r.Calibrated || r.Runs != 0 ||
		!strings.Contains(ex.Groups[0].Summary, "hetgpu.runtime 2m0s read as 2m16s left") {
		t.Errorf("big16's runtime reading: %+v in %q", r, ex.Groups[0].Summary)
	}
	var queue scQueue
	must(t, scGet(sidecarURL+"/v1/queue", &queue))
	infeasible := 0
	for _, j := range queue.Jobs {
		if j.Infeasible {
			infeasible++
		}
	}
	if infeasible != 2 {
		t.Errorf("the queue shows %d infeasible groups, want 2: %+v", infeasible, queue.Jobs)
	}
	metrics, err := httpGet(sidecarURL + "/metrics")
	must(t, err)
	if !strings.Contains(metrics, "hetgpu_infeasible_groups 2") {
		t.Errorf("metric hetgpu_infeasible_groups is not 2")
	}
	scCheckPinned(t, c.API, sidecarURL, "fits")
	t.Logf("the fitting job queued behind them pinned after %s", time.Since(start).Round(100*time.Millisecond))
	for _, id := range []string{"big16", "ddp-resnet"} {
		if j, _, err := c.API.Jobs().Info(id, nil); err != nil || !scHeld(j) {
			t.Errorf("%s is no longer held", id)
		}
	}
}

func ptrTo[T any](v T) *T { return &v }

// TestRunEndingWhileSidecarDownLearnedOnce: a pinned run ends while the sidecar is down; on
// restart the sidecar sees the finished allocation and the task driver delivers its spooled
// record: exactly one finished-run record of the allocation is stored, whoever came first.
func TestRunEndingWhileSidecarDownLearnedOnce(t *testing.T) {
	e := newFaultEnv(t, "exactly-once learning end to end", []clusterClient{{Name: "v100", Fake: []string{"2x V100"}}}, "")
	c, bins, sidecarURL := e.cluster, e.bins, e.sidecarURL
	sidecar := e.startSidecar(t)

	// Estimated at 10 min on the reference V100, the run takes about 15 s: the sidecar's
	// estimate calibration learns from it, also after restarts (below).
	submitToy(t, c.API, bins, "once", 150, "100ms", map[string]string{"hetgpu.runtime": "10m"})
	runningOn(t, c.API, "once", 90*time.Second)
	alloc := liveAllocs(c.API, "once")[0].ID
	sidecar.Stop(syscall.SIGKILL)
	waitDead(t, c.API, "once", 2*time.Minute)
	down := time.Now()
	sidecar.Start()
	// Both reporters get their chance: the sidecar after its grace, the driver's spool
	// after its back-off (it doubles while the sidecar is down; idle spools are rechecked
	// every minute).
	waitFor(t, 3*time.Minute, "the driver's spooled record delivered", func() bool {
		left, _ := filepath.Glob(filepath.Join(spoolOf(c, "v100"), "*.json"))
		return len(left) == 0 && len(runRecords(t, sidecarURL, "once")) > 0
	})
	time.Sleep(25 * time.Second) // past the sidecar's own grace, so both have reported
	recs := runRecords(t, sidecarURL, "once")
	var srcs []string
	for _, r := range recs {
		srcs = append(srcs, r.Source+":"+r.Observation.AllocID)
	}
	t.Logf("run records after the restart (%s after the sidecar came back): %v", time.Since(down).Round(time.Second), srcs)
	if len(recs) != 1 || finishedRuns(t, sidecarURL, "once") != 1 {
		t.Fatalf("want exactly one finished-run record for allocation %s, got %v", alloc, srcs)
	}
	if recs[0].Source == "driver" && recs[0].Observation.AllocID != alloc {
		t.Errorf("the driver's record names allocation %q, want %q", recs[0].Observation.AllocID, alloc)
	}

	// Estimate calibration (ranker.calibrate_estimates, on by default): the run, 40 times
	// shorter than its estimate, is one sample of log(true / estimate), clamped at -3, against
	// the prior's 20 runs at 0: a bias a little below 0.
	est := estimateCalibration(t, sidecarURL)
	t.Logf("estimate calibration after the run: %+v", est)
	if est.Runs != 1 || !(est.Bias < -0.05 && est.Bias >= -3.0/21) || est.PriorSigma != 0.5 {
		t.Fatalf("calibration %+v, want 1 run and a bias from -3/21 to -0.05", est)
	}
	// The run's namespace has a model of its own, its one run against the cluster's 1 + 20.
	if len(est.Namespaces) != 1 || est.Namespaces[0].Namespace != "default" || est.Namespaces[0].Runs != 1 ||
		!(est.Namespaces[0].Bias < est.Bias) {
		t.Errorf("namespace models %+v, want one for default with its 1 run, more negative than the cluster's", est.Namespaces)
	}
	// A restart restores it from the state file, and the backend's second report of the same
	// run (it forgets what it reported) does not count twice.
	sidecar.Stop(syscall.SIGKILL)
	sidecar.Start()
	waitFor(t, time.Minute, "the restarted sidecar's health", func() bool {
		var h struct{ Status string }
		return scGet(sidecarURL+"/v1/health", &h) == nil && h.Status == "ok"
	})
	if again := estimateCalibration(t, sidecarURL); again.Runs != 1 || again.Bias != est.Bias {
		t.Errorf("after a restart: %+v, want %+v restored", again, est)
	}
	time.Sleep(25 * time.Second) // past the sidecar's grace, when it reports the run again
	if again := estimateCalibration(t, sidecarURL); again.Runs != 1 || again.Bias != est.Bias {
		t.Errorf("after the run was reported again: %+v, want %+v", again, est)
	}
}

// calibration is /v1/health's ranker.estimates.
type calibration struct {
	Runs       int     `json:"runs"`
	Bias       float64 `json:"bias"`
	Sigma      float64 `json:"sigma"`
	PriorSigma float64 `json:"prior_sigma"`
	Namespaces []struct {
		Namespace string  `json:"namespace"`
		Runs      int     `json:"runs"`
		Bias      float64 `json:"bias"`
	} `json:"namespaces"`
}

func estimateCalibration(t *testing.T, sidecarURL string) calibration {
	t.Helper()
	return rankerHealth[calibration](t, sidecarURL, "estimates")
}

// rankerHealth decodes /v1/health's ranker.<key>; a missing or null section fails the test.
func rankerHealth[T any](t *testing.T, sidecarURL, key string) T {
	t.Helper()
	var h struct {
		Ranker map[string]json.RawMessage `json:"ranker"`
	}
	must(t, scGet(sidecarURL+"/v1/health", &h))
	raw, ok := h.Ranker[key]
	if !ok || string(raw) == "null" {
		t.Fatalf("/v1/health has no ranker.%s", key)
	}
	var v T
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatalf("/v1/health ranker.%s: %v", key, err)
	}
	return v
}

// spoolOf is the task driver's spool directory of the named client of a startCluster cluster.
func spoolOf(c *cluster, client string) string {
	for _, cl := range c.clients {
		if strings.HasSuffix(cl.name, "-"+client) {
			return filepath.Join(filepath.Dir(cl.logf.Name()), "driver", "spool")
		}
	}
	return ""
}

// TestStoppedRunNotLearned: a pinned job stopped by `nomad job stop` mid-run is reported by
// the task driver as a partial run (with the steps it did) and is never stored or learned as
// a finished run.
func TestStoppedRunNotLearned(t *testing.T) {
	e := newFaultEnv(t, "stopped runs end to end", []clusterClient{{Name: "v100", Fake: []string{"2x V100"}}}, "")
	c, bins, sidecarURL := e.cluster, e.bins, e.sidecarURL
	e.startSidecar(t)

	submitToy(t, c.API, bins, "stopped", 1500, "100ms", nil)
	runningOn(t, c.API, "stopped", 90*time.Second)
	alloc := liveAllocs(c.API, "stopped")[0].ID
	time.Sleep(3 * time.Second)
	_, _, err := c.API.Jobs().Deregister("stopped", false, nil)
	must(t, err)
	var recs []runRecord
	waitFor(t, 60*time.Second, "the stopped run's record", func() bool {
		recs = runRecords(t, sidecarURL, "stopped")
		return len(recs) > 0
	})
	time.Sleep(25 * time.Second) // past the sidecar's own grace
	recs = runRecords(t, sidecarURL, "stopped")
	if len(recs) != 1 || !recs[0].Observation.Partial || recs[0].Observation.AllocID != alloc || recs[0].Source != "driver" {
		t.Fatalf("want one partial driver record of allocation %s: %+v", alloc, recs)
	}
	if n := finishedRuns(t, sidecarURL, "stopped"); n != 0 {
		t.Errorf("%d finished runs learned for a stopped job", n)
	}
	t.Logf("stopped run recorded partial after %.0f steps", recs[0].Observation.Steps)
}
