package estimate

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hetgpu/hetgpu/model/cluster"
	"github.com/hetgpu/hetgpu/model/gpuspec"
	"github.com/hetgpu/hetgpu/model/history"
	"github.com/hetgpu/hetgpu/sidecar/sched"
)

// speeds predicts a fixed whole-job throughput per GPU type.
type speeds map[string]float64

func (s speeds) Predict(_ *cluster.Job, typ string, _ int) sched.Estimate {
	return sched.Estimate{Throughput: s[typ]}
}

func job(ns, id string, gpus int) cluster.Job {
	return cluster.Job{Namespace: ns, ID: id, Group: "g", GPUs: gpus,
		Hetgpu: cluster.Annotations{Enabled: true, ModelName: "ResNet-50", BatchSize: 64}}
}

func learned(t *testing.T, ns string, d time.Duration, n int) *history.Model {
	t.Helper()
	h, err := history.New(history.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		j := job(ns, "done", 1)
		h.Observe(history.Run{Key: "run-" + string(rune('a'+i)), Job: history.JobOf(&j), RuntimeS: d.Seconds()})
	}
	return h
}

func TestSources(t *testing.T) {
	pred := speeds{gpuspec.ReferenceGPU: 10}
	withSteps := job("ml", "s", 1)
	withSteps.Hetgpu.Steps = 36000 // an hour at 10 steps/s
	user := job("ml", "u", 1)
	user.Hetgpu.EstRuntime = 3 * time.Minute
	fresh := job("ml", "new", 1)
	running := job("ml", "long", 1)
	running.AttainedGPUSeconds = 6 * 3600
	child := job("ml", "sweep/dispatch-1", 1)
	child.ParentID = "sweep"

	cases := []struct {
		name   string
		hist   *history.Model
		pred   sched.Predictor
		j      cluster.Job
		source cluster.EstimateSource
		level  string
		lo, hi time.Duration
	}{
		{"the user's estimate stays", learned(t, "ml", time.Hour, 10), pred, user, cluster.EstUser, "", 3 * time.Minute, 3 * time.Minute},
		{"steps over the predicted speed", learned(t, "ml", 5*time.Minute, 10), pred, withSteps, cluster.EstSteps, "", 55 * time.Minute, 65 * time.Minute},
		{"steps without a prediction: history", learned(t, "ml", 5*time.Minute, 10), speeds{}, withSteps, cluster.EstHistory, "model", 4 * time.Minute, 15 * time.Minute},
		{"the namespace's model runs", learned(t, "ml", 5*time.Minute, 40), pred, fresh, cluster.EstHistory, "model", 4 * time.Minute, 10 * time.Minute},
		{"another namespace: the cluster", learned(t, "ml", 5*time.Minute, 40), pred, job("web", "x", 1), cluster.EstHistory, "cluster", 4 * time.Minute, 15 * time.Minute},
		{"a job that ran long runs on", learned(t, "ml", 5*time.Minute, 40), pred, running, cluster.EstHistory, "model", 15 * time.Minute, 100 * time.Hour},
		{"no history: the prior", nil, pred, fresh, cluster.EstNone, "", 0, 0},
		{"a dispatched child reads its parent's family", learned(t, "ml", 5*time.Minute, 40), pred, child, cluster.EstHistory, "model", 4 * time.Minute, 10 * time.Minute},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			snap := &cluster.Snapshot{}
			snap.SetJobs([]cluster.Job{c.j}, 1)
			st := &Stage{History: c.hist}
			if err := st.Estimate(context.Background(), snap, c.pred); err != nil {
				t.Fatal(err)
			}
			got := snap.Pending[0].Hetgpu
			if got.Est.Source != c.source || got.Est.Level != c.level {
				t.Fatalf("source %v level %q, want %v %q", got.Est.Source, got.Est.Level, c.source, c.level)
			}
			if got.EstRuntime < c.lo || got.EstRuntime > c.hi {
				t.Fatalf("estimate %v, want %v to %v", got.EstRuntime, c.lo, c.hi)
			}
		})
	}
}

// The parent's own runs are the most specific history of its children.
func TestChildrenShareTheirParentsHistory(t *testing.T) {
	h, _ := history.New(history.Config{})
	for i, id := range []string{"sweep/dispatch-1", "sweep/dispatch-2", "sweep/dispatch-3"} {
		j := job("ml", id, 1)
		j.ParentID = "sweep"
		j.Hetgpu.ModelName = "other"
		h.Observe(history.Run{Key: string(rune('a' + i)), Job: history.JobOf(&j), RuntimeS: 120})
	}
	next := job("ml", "sweep/dispatch-4", 1)
	next.ParentID = "sweep"
	snap := &cluster.Snapshot{}
	snap.SetJobs([]cluster.Job{next}, 1)
	if err := New(h).Estimate(context.Background(), snap, nil); err != nil {
		t.Fatal(err)
	}
	got := snap.Pending[0]
	if got.Hetgpu.Est.Level != "job" || got.Hetgpu.Est.Runs != 3 {
		t.Fatalf("level %q with %d runs, want the parent's 3 runs", got.Hetgpu.Est.Level, got.Hetgpu.Est.Runs)
	}
	d := Describe(&got)
	if !strings.Contains(d, "from 3 finished runs of job sweep (namespace ml), the parent of this one") {
		t.Fatalf("description %q does not name the parent's runs", d)
	}
}

func TestDescribe(t *testing.T) {
	j := job("ml", "train", 4)
	j.Hetgpu.EstRuntime = 3*time.Hour + 10*time.Minute
	j.Hetgpu.Est = cluster.EstimateInfo{Source: cluster.EstHistory, Level: "gpus", Runs: 41, Ran: 2*time.Hour + 5*time.Minute}
	want := "no hetgpu.runtime; read as 3h10m0s left from 41 finished runs of namespace ml's 4-GPU jobs, has run 2h5m0s"
	if got := Describe(&j); got != want {
		t.Fatalf("got  %q\nwant %q", got, want)
	}
	j.Hetgpu.Est = cluster.EstimateInfo{Source: cluster.EstHistory, Level: "prior"}
	if got := Describe(&j); !strings.Contains(got, "from the prior (no finished runs yet)") {
		t.Fatalf("prior: %q", got)
	}
	j.Hetgpu.Est = cluster.EstimateInfo{Source: cluster.EstUser}
	if got := Describe(&j); got != "" {
		t.Fatalf("user estimate described as %q, want nothing (the backend's reading says it)", got)
	}
}

func BenchmarkEstimate(b *testing.B) {
	h, _ := history.New(history.Config{})
	jobs := make([]cluster.Job, 500)
	for i := range jobs {
		jobs[i] = job("ml", "j"+string(rune('a'+i%26)), 1<<(i%4))
		h.Observe(history.Run{Key: string(rune(i)), Job: history.JobOf(&jobs[i]), RuntimeS: float64(60 + 97*i)})
	}
	st := New(h)
	snap := &cluster.Snapshot{}
	b.ReportAllocs()
	for b.Loop() {
		for i := range jobs {
			jobs[i].Hetgpu.EstRuntime, jobs[i].Hetgpu.Est = 0, cluster.EstimateInfo{}
		}
		snap.SetJobs(jobs, len(jobs))
		_ = st.Estimate(context.Background(), snap, nil)
	}
}
