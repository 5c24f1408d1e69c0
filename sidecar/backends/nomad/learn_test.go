package nomad

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/hetgpu/hetgpu/model/cluster"
)

// anyDriverFixture is pinnedFixtureOf with the job's task run by driver drv, on a clock the
// test moves (*now), sampling device stats at every Maintain.
func anyDriverFixture(t *testing.T, drv string, now *time.Time) (*fixture, cluster.Decision) {
	t.Helper()
	f := newFixture(t, func(c *Config) {
		c.SampleDeviceStats = true
		c.SampleEvery = time.Nanosecond
		c.Now = func() time.Time { return *now }
	})
	f.srv.SetClock(func() time.Time { return *now })
	job := heldJob("run", 2, 1, map[string]string{"hetgpu.enable": "true", "hetgpu.model": "resnet/ResNet-50", "hetgpu.steps": "1e6",
		"hetgpu.batch_size": "64", "hetgpu.preemptible": "true"})
	job.TaskGroups[0].Tasks[0].Driver = drv
	f.srv.Register(job)
	f.resync(t)
	snap := f.snapshot(t)
	if len(snap.Pending) != 1 {
		t.Fatalf("%s job: pending %+v, want it offered like a hetgpu task", drv, snap.Pending)
	}
	d := decide(snap, snap.Pending[0], "node-v100-00")
	res, _ := f.b.Pin(context.Background(), []cluster.Decision{d})
	if !res[0].Applied {
		t.Fatalf("%s job: pin = %+v", drv, res)
	}
	f.resync(t)
	return f, d
}

// TestAnyDriverRunLearnedFromDeviceStatsAndProgress: a run of a task the hetgpu driver does
// not run is recorded by the sidecar at once (no driver record to wait for): its runtime from
// the task states, its energy from the GPUs' energy counters (their average power over the
// whole runtime, not the sampled power), its throughput from the progress file's steps; once.
func TestAnyDriverRunLearnedFromDeviceStatsAndProgress(t *testing.T) {
	for _, drv := range []string{"raw_exec", "exec", "docker", "podman"} {
		t.Run(drv, func(t *testing.T) {
			clock := time.Now()
			now := clock
			f, d := anyDriverFixture(t, drv, &now)
			ids := d.Assign[0].InstanceIDs
			alloc := f.srv.Allocs("default", "run")[0]
			start := clock
			f.srv.SetAllocStatus(alloc.ID, api.AllocClientStatusRunning, start, time.Time{})
			f.resync(t)
			// The counters run at 300 W per GPU; the power stat says 250 W (a reading between
			// bursts): the counters win.
			for _, step := range []float64{10, 60, 110} {
				now = start.Add(time.Duration(step) * time.Second)
				for i, id := range ids {
					f.srv.SetPower(id, 250)
					f.srv.SetEnergy(id, 5e6*float64(i+1)+300*step)
				}
				if m, _ := f.b.Maintain(context.Background()); len(m.Finished) != 0 {
					t.Fatalf("running allocation reported: %+v", m.Finished)
				}
			}
			f.srv.SetAllocFile(alloc.ID, ProgressPath, []byte(`{"steps": 1234, "samples_per_s": 5000}`))
			f.srv.SetAllocStatus(alloc.ID, api.AllocClientStatusComplete, start, start.Add(200*time.Second))
			f.resync(t)
			now = start.Add(201 * time.Second)
			r := f.finishedRun(t)
			o := r.Obs
			if o.Partial || o.RuntimeS != 200 || o.AllocID != alloc.ID || o.Task != "train" || o.GPUs != 2 {
				t.Errorf("observation %+v", o)
			}
			if o.Steps != 1234 || math.Abs(o.Throughput-1234.0/200) > 1e-12 || o.SamplesPerSec != 5000 || !r.Progress {
				t.Errorf("steps %v throughput %v samples/s %v (progress %v): want the progress file's 1234 steps over 200 s",
					o.Steps, o.Throughput, o.SamplesPerSec, r.Progress)
			}
			if want := 2 * 300.0 * 200; math.Abs(o.EnergyJ-want) > 1e-6 || r.EnergySource != "counter" || math.Abs(o.AvgPowerW-600) > 1e-9 {
				t.Errorf("energy %v J (%s), avg %v W: want %v J from the counters (600 W)", o.EnergyJ, r.EnergySource, o.AvgPowerW, want)
			}
			if o.PeakPowerW != 500 {
				t.Errorf("peak power %v W, want the sampled 2 x 250", o.PeakPowerW)
			}
			if m, _ := f.b.Maintain(context.Background()); len(m.Finished) != 0 {
				t.Errorf("run reported twice: %+v", m.Finished)
			}
		})
	}
}

// TestAnyDriverRunWithoutProgressFile: without a progress file (or with a malformed one)
// the throughput is hetgpu.steps over the runtime; without energy counters the energy is the
// sampled power's integral.
func TestAnyDriverRunWithoutProgressFile(t *testing.T) {
	for _, tt := range []struct {
		name, file string
	}{{"no file", ""}, {"malformed", `{"steps": "many"}`}, {"unknown key", `{"step": 10}`}, {"zero steps", `{"steps": 0}`},
		// A token without read-fs: the real agent answers 200 with this body.
		{"permission denied", "Permission denied"}} {
		t.Run(tt.name, func(t *testing.T) {
			clock := time.Now()
			now := clock
			f, d := anyDriverFixture(t, "docker", &now)
			alloc := f.srv.Allocs("default", "run")[0]
			f.srv.SetAllocStatus(alloc.ID, api.AllocClientStatusRunning, clock, time.Time{})
			f.resync(t)
			for _, id := range d.Assign[0].InstanceIDs {
				f.srv.SetPower(id, 250)
			}
			now = clock.Add(50 * time.Second)
			f.b.Maintain(context.Background())
			if tt.file != "" {
				f.srv.SetAllocFile(alloc.ID, ProgressPath, []byte(tt.file))
			}
			f.srv.SetAllocStatus(alloc.ID, api.AllocClientStatusComplete, clock, clock.Add(100*time.Second))
			f.resync(t)
			now = clock.Add(101 * time.Second)
			r := f.finishedRun(t)
			if r.Progress || r.Obs.Steps != 0 || r.Obs.Throughput != 1e6/100 {
				t.Errorf("throughput %v, steps %v (progress %v): want hetgpu.steps over the runtime, 1e4", r.Obs.Throughput, r.Obs.Steps, r.Progress)
			}
			if r.EnergySource != "power" || r.Obs.EnergyJ != 500*50 {
				t.Errorf("energy %v J from %q, want the power integral 500 W x 50 s", r.Obs.EnergyJ, r.EnergySource)
			}
		})
	}
}

// TestAnyDriverStoppedRunPartial: a stopped run of a task the hetgpu driver does not run is
// recorded partial, with the steps its progress file counted, never as a finished run; a
// hetgpu-driver task's is left to the driver.
func TestAnyDriverStoppedRunPartial(t *testing.T) {
	for _, drv := range []string{"raw_exec", "hetgpu"} {
		t.Run(drv, func(t *testing.T) {
			clock := time.Now()
			now := clock
			f, _ := anyDriverFixture(t, drv, &now)
			alloc := f.srv.Allocs("default", "run")[0]
			f.srv.SetAllocStatus(alloc.ID, api.AllocClientStatusRunning, clock, time.Time{})
			f.srv.SetAllocFile(alloc.ID, ProgressPath, []byte(`{"steps": 40}`))
			f.resync(t)
			job := f.srv.Job("default", "run")
			job.Stop = ptr(true)
			f.srv.Register(job)
			f.resync(t)
			now = clock.Add(time.Hour)
			m, _ := f.b.Maintain(context.Background())
			if drv == "hetgpu" {
				if len(m.Finished) != 0 {
					t.Errorf("hetgpu-driver run stopped: the sidecar reported %+v, want nothing (the driver reports it)", m.Finished)
				}
				return
			}
			if len(m.Finished) != 1 || !m.Finished[0].Obs.Partial || m.Finished[0].Obs.Steps != 40 || m.Finished[0].Obs.Throughput != 0 {
				t.Fatalf("finished = %+v, want one partial record with the progress file's 40 steps and no throughput", m.Finished)
			}
			if m.Finished[0].Obs.Learnable() {
				t.Error("a stopped run is learnable")
			}
			if m, _ := f.b.Maintain(context.Background()); len(m.Finished) != 0 {
				t.Errorf("stopped run reported twice: %+v", m.Finished)
			}
		})
	}
}

// TestAnyDriverPreempted: preemption stops any driver's allocations alike.
func TestAnyDriverPreempted(t *testing.T) {
	now := time.Now()
	f, _ := anyDriverFixture(t, "podman", &now)
	res, err := f.b.Preempt(context.Background(), []cluster.Preemption{{Namespace: "default", JobID: "run", Group: "train", Reason: "test"}})
	if err != nil || len(res) != 1 || !res[0].Applied {
		t.Fatalf("preempt = %+v, %v", res, err)
	}
}

func TestParseProgress(t *testing.T) {
	for _, tt := range []struct {
		in    string
		steps float64
		sps   float64
		err   string
	}{
		{`{"steps": 1200, "samples_per_s": 850.5}`, 1200, 850.5, ""},
		{`{"steps": 3}`, 3, 0, ""},
		{" {\"steps\": 1e3}\n", 1000, 0, ""},
		{`{"steps": 0}`, 0, 0, "field steps = 0: expected a finite number > 0"},
		{`{"steps": -1}`, 0, 0, "field steps = -1"},
		{`{"steps": 5, "samples_per_s": -2}`, 0, 0, "field samples_per_s = -2: expected a finite number >= 0"},
		{`{"steps": "5"}`, 0, 0, "field steps: a JSON string where a number is expected"},
		{`{"step": 5}`, 0, 0, `unknown field "step"`},
		{`{"steps": 5}{"steps": 6}`, 0, 0, "more than one JSON value"},
		{``, 0, 0, "expected one JSON object"},
		{`{"steps": 5`, 0, 0, "expected one JSON object"},
	} {
		p, err := ParseProgress([]byte(tt.in))
		switch {
		case tt.err == "" && err != nil:
			t.Errorf("%q: %v", tt.in, err)
		case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
			t.Errorf("%q: error %v, want %q", tt.in, err, tt.err)
		case tt.err == "" && (p.Steps != tt.steps || p.SamplesPerSec != tt.sps):
			t.Errorf("%q = %+v", tt.in, p)
		}
	}
}

func FuzzParseProgress(f *testing.F) {
	for _, s := range []string{`{"steps": 1200, "samples_per_s": 850.5}`, `{"steps": 0}`, `{}`, `[]`, `{"steps": 1e400}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := ParseProgress(b)
		if err != nil {
			if !strings.Contains(err.Error(), ProgressPath) {
				t.Errorf("error %q does not name the file", err)
			}
			return
		}
		if !(p.Steps > 0) || math.IsInf(p.Steps, 0) || !(p.SamplesPerSec >= 0) || math.IsInf(p.SamplesPerSec, 0) {
			t.Errorf("accepted %+v from %q", p, b)
		}
	})
}

// TestEnergyCounterFallbacks: a counter that goes back (a driver reload) or a GPU without
// one leaves the power integral; a reading seen twice (the client's cache) counts once.
func TestEnergyCounterFallbacks(t *testing.T) {
	t0 := time.Unix(1000, 0)
	for _, tt := range []struct {
		name  string
		reads []struct {
			j   float64
			all bool
			at  float64
		}
		wantJ   float64
		wantSrc string
	}{
		{"two reads", []struct {
			j   float64
			all bool
			at  float64
		}{{100, true, 0}, {1100, true, 10}}, 100 * 20, "counter"},
		{"cached read", []struct {
			j   float64
			all bool
			at  float64
		}{{100, true, 0}, {100, true, 0}}, 7, "power"},
		{"reset", []struct {
			j   float64
			all bool
			at  float64
		}{{100, true, 0}, {1100, true, 10}, {5, true, 20}}, 7, "power"},
		{"one GPU without a counter", []struct {
			j   float64
			all bool
			at  float64
		}{{100, true, 0}, {1100, false, 10}, {2100, true, 20}}, 7, "power"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			acc := &energyAcc{joules: 7}
			for _, r := range tt.reads {
				acc.counter(r.j, r.all, t0.Add(time.Duration(r.at)*time.Second))
			}
			if j, src := acc.runEnergy(20); j != tt.wantJ || src != tt.wantSrc {
				t.Errorf("runEnergy = %v %q, want %v %q", j, src, tt.wantJ, tt.wantSrc)
			}
		})
	}
}
