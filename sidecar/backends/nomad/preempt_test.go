package nomad

import (
	"context"
	"math"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/hetgpu/hetgpu/model/cluster"
)

// gangJob is a preemptible job under one job-level hold: a launcher without GPUs and two GPU
// groups, workers (2 GPUs) and eval (1 GPU).
func gangJob(id string) *api.Job {
	gpuGroup := func(name string, gpus uint64) *api.TaskGroup {
		return &api.TaskGroup{Name: ptr(name), Count: ptr(1), Tasks: []*api.Task{{Name: name, Driver: "hetgpu",
			Resources: &api.Resources{Devices: []*api.RequestedDevice{{Name: "nvidia/gpu", Count: ptr(gpus)}}}}}}
	}
	return &api.Job{
		ID: ptr(id), Name: ptr(id), Namespace: ptr("default"), Type: ptr("batch"),
		Constraints: []*api.Constraint{api.NewConstraint("${meta.hetgpu.queue}", "=", "waiting-for-hetgpu")},
		Meta:        map[string]string{"hetgpu.enable": "true", "hetgpu.model": "resnet/ResNet-50", "hetgpu.preemptible": "true"},
		TaskGroups: []*api.TaskGroup{
			{Name: ptr("launcher"), Count: ptr(1), Tasks: []*api.Task{{Name: "launcher", Driver: "hetgpu"}}},
			gpuGroup("workers", 2), gpuGroup("eval", 1),
		},
	}
}

// pinPending pins the two pending GPU groups side by side on the A100 node.
func pinPending(t *testing.T, f *fixture) {
	t.Helper()
	f.resync(t)
	snap := f.snapshot(t)
	var ds []cluster.Decision
	for _, j := range snap.Pending {
		ds = append(ds, decide(snap, j, "node-a100-00"))
		snap.Running = append(snap.Running, cluster.Alloc{NodeID: "node-a100-00", DeviceIDs: ds[len(ds)-1].Assign[0].InstanceIDs})
	}
	if len(ds) != 2 {
		t.Fatalf("pending = %+v, want the two GPU groups", snap.Pending)
	}
	if res, err := f.b.Pin(context.Background(), ds); err != nil || len(res) != 2 || !res[0].Applied || !res[1].Applied {
		t.Fatalf("pin = %+v, %v", res, err)
	}
}

// TestPreemptGangOneRegister: preempting all GPU groups of a gang is one register with the
// hold on the job, and every allocation of the job stops, the launcher's included; preempting
// one GPU group while another still runs holds that group alone and leaves the launcher.
func TestPreemptGangOneRegister(t *testing.T) {
	for _, tt := range []struct {
		name         string
		groups       []string
		wantJobHold  bool
		wantStopped  []string
		wantHeldGrps []string
	}{
		{"whole gang", []string{"workers", "eval"}, true, []string{"eval", "launcher", "workers"}, nil},
		{"one group of two", []string{"eval"}, false, []string{"eval"}, []string{"eval"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, nil)
			f.srv.Register(gangJob("gang"))
			pinPending(t, f)
			f.resync(t)
			byGroup := map[string]string{}
			for _, a := range f.srv.Allocs("default", "gang") {
				f.srv.SetAllocStatus(a.ID, api.AllocClientStatusRunning, f.b.now().Add(-10*time.Minute), time.Time{})
				byGroup[a.ID] = a.TaskGroup
			}
			if len(byGroup) != 3 {
				t.Fatalf("allocations %v, want one per group", byGroup)
			}
			f.resync(t)
			f.srv.ResetCalls()
			var ps []cluster.Preemption
			for _, g := range tt.groups {
				ps = append(ps, cluster.Preemption{Namespace: "default", JobID: "gang", Group: g, Reason: "queue team-a reclaims its guarantee"})
			}
			res, err := f.b.Preempt(context.Background(), ps)
			if err != nil || len(res) != len(ps) {
				t.Fatalf("preempt = %+v, %v", res, err)
			}
			for _, r := range res {
				if !r.Applied || r.Err != nil {
					t.Fatalf("preempt = %+v", res)
				}
			}
			registers := 0
			for k, n := range f.srv.Calls() {
				if strings.HasPrefix(k, "PUT /v1/job") || strings.HasPrefix(k, "POST /v1/job") {
					if !strings.Contains(k, "/versions/") && !strings.Contains(k, "/tag") {
						registers += n
					}
				}
			}
			if registers != 1 {
				t.Errorf("%d job registers (calls %v), want 1", registers, f.srv.Calls())
			}
			job := f.srv.Job("default", "gang")
			if got := hasHold(job.Constraints); got != tt.wantJobHold {
				t.Errorf("job-level hold = %v, want %v", got, tt.wantJobHold)
			}
			var held []string
			for _, tg := range job.TaskGroups {
				if hasHold(tg.Constraints) {
					held = append(held, *tg.Name)
				}
			}
			if strings.Join(held, ",") != strings.Join(tt.wantHeldGrps, ",") {
				t.Errorf("group-level holds on %v, want %v", held, tt.wantHeldGrps)
			}
			var stopped []string
			for _, id := range f.srv.Stopped() {
				stopped = append(stopped, byGroup[id])
			}
			sort.Strings(stopped)
			if strings.Join(stopped, ",") != strings.Join(tt.wantStopped, ",") {
				t.Errorf("stopped allocations of %v, want %v", stopped, tt.wantStopped)
			}
			// The gang waits again as a whole: both GPU groups pending after the whole-gang
			// preemption, only eval otherwise.
			f.resync(t)
			var pending []string
			for _, j := range f.snapshot(t).Pending {
				pending = append(pending, j.Group)
			}
			sort.Strings(pending)
			want := append([]string(nil), tt.groups...)
			sort.Strings(want)
			if strings.Join(pending, ",") != strings.Join(want, ",") {
				t.Errorf("pending after preemption %v, want %v", pending, want)
			}
		})
	}
}

// TestPreemptRefusesWholeJob: a job with one group that did not opt in is not touched at all.
func TestPreemptRefusesWholeJob(t *testing.T) {
	f := newFixture(t, nil)
	job := gangJob("gang")
	job.Meta["hetgpu.preemptible"] = "false"
	job.TaskGroups[1].Meta = map[string]string{"hetgpu.preemptible": "true"}
	f.srv.Register(job)
	pinPending(t, f)
	f.resync(t)
	res, err := f.b.Preempt(context.Background(), []cluster.Preemption{
		{Namespace: "default", JobID: "gang", Group: "workers", Reason: "r"}, {Namespace: "default", JobID: "gang", Group: "eval", Reason: "r"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.Applied || r.Err == nil {
			t.Fatalf("preempt = %+v, want both refused", res)
		}
	}
	if len(f.srv.Stopped()) != 0 || hasHold(f.srv.Job("default", "gang").Constraints) {
		t.Fatal("a job with a group that is not preemptible was stopped or held")
	}
}

// TestPreemptCarriesRan: preempting a running checkpointing group writes the time it has run,
// added over preemptions, into its meta (hetgpu.ran) and its ui line; the group waits again
// with what is left of its runtime and that time as attained service, and while it runs again
// the preemption view counts both runs.
func TestPreemptCarriesRan(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	f := newFixture(t, func(c *Config) { c.Now = func() time.Time { return now } })
	f.srv.Register(heldJob("ckpt", 2, 1, map[string]string{"hetgpu.enable": "true", "hetgpu.model": "resnet/ResNet-50",
		"hetgpu.runtime": "10h", "hetgpu.preemptible": "true"}))
	run := func(ago time.Duration) {
		t.Helper()
		f.resync(t)
		snap := f.snapshot(t)
		if len(snap.Pending) != 1 {
			t.Fatalf("pending %+v, want ckpt", snap.Pending)
		}
		f.pin(t, snap, snap.Pending[0], "node-a100-00")
		for _, a := range f.srv.Allocs("default", "ckpt") {
			if a.ClientStatus != api.AllocClientStatusComplete {
				f.srv.SetAllocStatus(a.ID, api.AllocClientStatusRunning, now.Add(-ago), time.Time{})
			}
		}
		f.resync(t)
	}
	preempt := func() {
		t.Helper()
		res, err := f.b.Preempt(context.Background(), []cluster.Preemption{{Namespace: "default", JobID: "ckpt", Group: "train", Reason: "a shorter job"}})
		if err != nil || len(res) != 1 || !res[0].Applied {
			t.Fatalf("preempt = %+v, %v", res, err)
		}
		for _, a := range f.srv.Allocs("default", "ckpt") {
			if a.ClientStatus == api.AllocClientStatusRunning {
				f.srv.SetAllocStatus(a.ID, api.AllocClientStatusComplete, a.TaskStates["train"].StartedAt, now)
			}
		}
		f.resync(t)
	}
	pendingCkpt := func() cluster.Job {
		t.Helper()
		snap := f.snapshot(t)
		if len(snap.Pending) != 1 {
			t.Fatalf("pending %+v, want ckpt", snap.Pending)
		}
		return snap.Pending[0]
	}

	run(2 * time.Hour)
	preempt()
	job := f.srv.Job("default", "ckpt")
	if got := job.TaskGroups[0].Meta["hetgpu.ran"]; got != "2h0m0s" {
		t.Errorf("hetgpu.ran after the first preemption = %q, want 2h0m0s", got)
	}
	if !strings.Contains(job.UI.Description, "ran 2h0m0s so far") {
		t.Errorf("ui line does not say how long the group ran: %q", job.UI.Description)
	}
	if j := pendingCkpt(); j.Hetgpu.EstRuntime != 8*time.Hour || j.AttainedGPUSeconds != 2*3600*2 {
		t.Errorf("waiting again: estimate %v, attained %v GPU-s; want 8h and %v", j.Hetgpu.EstRuntime, j.AttainedGPUSeconds, 2*3600*2)
	}

	run(30 * time.Minute)
	snap := f.snapshot(t)
	if len(snap.Preemptible) != 1 || snap.Preemptible[0].Hetgpu.EstRuntime != 7*time.Hour+30*time.Minute ||
		snap.Preemptible[0].AttainedGPUSeconds != 2.5*3600*2 {
		t.Fatalf("running again: %+v, want 7h30m left and 2h30m x 2 GPUs attained", snap.Preemptible)
	}
	now = now.Add(30 * time.Minute)
	preempt()
	if got := f.srv.Job("default", "ckpt").TaskGroups[0].Meta["hetgpu.ran"]; got != "3h0m0s" {
		t.Errorf("hetgpu.ran after the second preemption = %q, want 3h0m0s", got)
	}
	if j := pendingCkpt(); j.Hetgpu.EstRuntime != 7*time.Hour {
		t.Errorf("waiting again: estimate %v, want 7h", j.Hetgpu.EstRuntime)
	}
}

// TestEstimateErrorModel: with Config.EstimateError a waiting group's hetgpu.runtime is read
// through cluster.EstimateModel: the mean before it ever ran, the expected rest given its
// hetgpu.ran after a preemption; 0 keeps the estimate minus the time run.
func TestEstimateErrorModel(t *testing.T) {
	// A learned model (Config.EstimateModel) replaces the configured sigma: users who ask for
	// twice what they need make a 10 h estimate read as about 5 h.
	learned := cluster.EstimateModel{Sigma: 0.3, Bias: -math.Ln2}
	for _, c := range []struct {
		sigma float64
		model *cluster.EstimateModel
	}{{0, nil}, {0.5, nil}, {0.5, &learned}} {
		sigma := c.sigma
		f := newFixture(t, func(cfg *Config) {
			cfg.EstimateError = sigma
			if c.model != nil {
				cfg.EstimateModel = func(string) cluster.EstimateModel { return *c.model }
			}
		})
		meta := map[string]string{"hetgpu.enable": "true", "hetgpu.model": "resnet/ResNet-50", "hetgpu.runtime": "10h"}
		f.srv.Register(heldJob("fresh", 1, 1, meta))
		resumed := heldJob("resumed", 1, 1, meta)
		resumed.TaskGroups[0].Meta = map[string]string{"hetgpu.ran": "12h"}
		f.srv.Register(resumed)
		f.resync(t)
		m := cluster.EstimateModel{Sigma: sigma}
		if c.model != nil {
			m = *c.model
		}
		want := map[string]time.Duration{"fresh": m.Remaining(10*time.Hour, 0), "resumed": m.Remaining(10*time.Hour, 12*time.Hour)}
		got := map[string]time.Duration{}
		for _, j := range f.snapshot(t).Pending {
			got[j.ID] = j.Hetgpu.EstRuntime
		}
		if got["fresh"] != want["fresh"] || got["resumed"] != want["resumed"] {
			t.Errorf("sigma %v: estimates %v, want %v", sigma, got, want)
		}
		// What the model means: trusting the estimate, a job past it is nearly done; with an
		// error, it is expected to run on for hours.
		if c.model == nil && (sigma == 0 && got["resumed"] != cluster.MinRemainingEstimate || sigma > 0 && got["resumed"] < 2*time.Hour) {
			t.Errorf("sigma %v: a 10 h job that ran 12 h has %v left", sigma, got["resumed"])
		}
		if c.model != nil && (got["fresh"] < 5*time.Hour || got["fresh"] > 5*time.Hour+20*time.Minute) {
			t.Errorf("learned model %+v: a fresh 10 h estimate reads %v, want about 5 h", *c.model, got["fresh"])
		}
	}
}

// TestPreemptibleNotStartedYet: a pinned group whose allocation is placed but whose task has not
// started has run for no time. Counting from the zero start time made it decades old, so with an
// estimate-error model a 1-minute job looked endless and the sidecar preempted it for a long
// one, round after round (found on the real agent by TestSidecarPreempts).
func TestPreemptibleNotStartedYet(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	f := newFixture(t, func(c *Config) { c.EstimateError = 0.5; c.Now = func() time.Time { return now } })
	f.srv.Register(heldJob("short", 1, 1, map[string]string{"hetgpu.enable": "true", "hetgpu.model": "resnet/ResNet-50",
		"hetgpu.runtime": "1m", "hetgpu.preemptible": "true"}))
	f.resync(t)
	snap := f.snapshot(t)
	f.pin(t, snap, snap.Pending[0], "node-v100-00")
	for _, a := range f.srv.Allocs("default", "short") {
		f.srv.SetAllocNotStarted(a.ID)
	}
	f.resync(t)
	want := cluster.EstimateModel{Sigma: 0.5}.Remaining(time.Minute, 0)
	snap = f.snapshot(t)
	if len(snap.Preemptible) != 1 || snap.Preemptible[0].Hetgpu.EstRuntime != want || snap.Preemptible[0].AttainedGPUSeconds != 0 {
		t.Fatalf("preemptible %+v; want %v left and nothing attained", snap.Preemptible, want)
	}
	// The allocation the waiting note reads (FreeSoon): all of it left too, preemptible or
	// not, so a job waiting behind it says when its GPUs free up before its task started.
	for _, a := range snap.Running {
		if a.JobID == "short" && a.Hetgpu.EstRuntime != want {
			t.Errorf("running allocation not started: %v left, want %v", a.Hetgpu.EstRuntime, want)
		}
	}
}
