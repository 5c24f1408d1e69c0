package preempt

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hetgpu/hetgpu/model/cluster"
	"github.com/hetgpu/hetgpu/sidecar/sched"
)

// speeds is a predictor with a fixed throughput per GPU type (per GPU, times the count).
type speeds map[string]float64

func (s speeds) Predict(j *cluster.Job, gpuType string, gpus int) sched.Estimate {
	return sched.Estimate{Throughput: s[gpuType] * float64(gpus)}
}

var now = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

func node(id, gpuType string, n int) cluster.Node {
	g := cluster.DeviceGroup{Vendor: "nvidia", Type: "gpu", Name: strings.ToUpper(gpuType), GPUType: gpuType}
	for i := 0; i < n; i++ {
		g.Instances = append(g.Instances, cluster.Instance{ID: fmt.Sprintf("%s-%d", id, i), Healthy: true})
	}
	return cluster.Node{ID: id, Status: "ready", Eligible: true, Attributes: map[string]string{"unique.hostname": id},
		Devices: []cluster.DeviceGroup{g}}
}

// slotAndWholeNode has a slot group (two slots of one shared V100, listed first) and two whole
// V100s (IDs n1-0, n1-1), as a client whose sharing block names one of its three GPUs.
func slotAndWholeNode(id string) cluster.Node {
	n := node(id, "v100", 2)
	slots := cluster.DeviceGroup{Vendor: "nvidia", Type: "gpu-slot", Name: "V100 shared 2", GPUType: "v100",
		Instances: []cluster.Instance{{ID: id + "-2-slot0", Healthy: true}, {ID: id + "-2-slot1", Healthy: true}}}
	n.Devices = append([]cluster.DeviceGroup{slots}, n.Devices...)
	return n
}

func slotJob(id string) cluster.Job {
	j := job(id, 1, time.Hour)
	j.DeviceName = "nvidia/gpu-slot"
	return j
}

func job(id string, gpus int, est time.Duration) cluster.Job {
	return cluster.Job{Namespace: "default", ID: id, Group: "train", GPUs: gpus, DeviceName: "nvidia/gpu",
		Hetgpu: cluster.Annotations{Enabled: true, EstRuntime: est, Preemptible: true}}
}

// running puts a job on node's first free instances from start.
func running(snap *cluster.Snapshot, j cluster.Job, nodeID, gpuType string, started time.Time) {
	used := 0
	for _, a := range snap.Running {
		if a.NodeID == nodeID {
			used += len(a.DeviceIDs)
		}
	}
	var ids []string
	for i := 0; i < j.GPUs; i++ {
		ids = append(ids, fmt.Sprintf("%s-%d", nodeID, used+i))
	}
	snap.Running = append(snap.Running, cluster.Alloc{ID: j.ID + "-0", Namespace: j.Namespace, JobID: j.ID, Group: j.Group,
		NodeID: nodeID, DeviceIDs: ids, GPUType: gpuType, StartTime: started})
	if j.Hetgpu.Preemptible {
		snap.Preemptible = append(snap.Preemptible, j)
	}
}

// rankAll ranks pending and preemptible jobs by the listed IDs, best first.
func rankAll(snap *cluster.Snapshot, ids ...string) []sched.Ranked {
	var out []sched.Ranked
	for _, id := range ids {
		for _, js := range [][]cluster.Job{snap.Pending, snap.Preemptible} {
			for i := range js {
				if js[i].ID == id {
					out = append(out, sched.Ranked{Job: &js[i], Score: -float64(len(out))})
				}
			}
		}
	}
	return out
}

func ids(p sched.Plan) (preempted, order []string) {
	for _, x := range p.Preempt {
		preempted = append(preempted, x.JobID)
	}
	for _, r := range p.Order {
		order = append(order, r.Job.ID)
	}
	return preempted, order
}

// oldThenNew builds a snapshot of nodes on which "old" (oldGPUs) has run on n1's V100s for
// ago and "new" (newGPUs) is pending: the setup most preemption cases vary.
func oldThenNew(oldGPUs int, ago time.Duration, newGPUs int, nodes ...cluster.Node) func() *cluster.Snapshot {
	return func() *cluster.Snapshot {
		s := &cluster.Snapshot{Now: now, Nodes: nodes}
		running(s, job("old", oldGPUs, time.Hour), "n1", "v100", now.Add(-ago))
		s.Pending = []cluster.Job{job("new", newGPUs, time.Hour)}
		return s
	}
}

// historyRanked is oldThenNew's 4-GPU "old", 45 minutes in on n1's 4 V100s, ranked by its
// history and having run ran in earlier turns, and the 2-GPU "new".
func historyRanked(ran time.Duration) func() *cluster.Snapshot {
	return func() *cluster.Snapshot {
		s := oldThenNew(4, 45*time.Minute, 2, node("n1", "v100", 4))()
		s.Preemptible[0].Hetgpu.Est.Source = cluster.EstHistory
		s.Preemptible[0].Hetgpu.Ran = ran
		return s
	}
}

// slowOnK80 has "slow" running on four K80s while four V100s are free and "tiny" waits.
func slowOnK80() *cluster.Snapshot {
	s := &cluster.Snapshot{Now: now, Nodes: []cluster.Node{node("k1", "k80", 4), node("v1", "v100", 4)}}
	running(s, job("slow", 4, time.Hour), "k1", "k80", now.Add(-2*time.Hour))
	s.Pending = []cluster.Job{job("tiny", 1, time.Hour)}
	return s
}

func ineligible(n cluster.Node) cluster.Node {
	n.Eligible = false
	return n
}

func TestPlan(t *testing.T) {
	long := 100 * time.Hour
	// two 1-hour jobs and one of 100 hours wait for one node of 2 GPUs.
	twoShortOneHuge := func() *cluster.Snapshot {
		s := &cluster.Snapshot{Now: now, Nodes: []cluster.Node{node("n1", "v100", 2)}}
		s.Pending = []cluster.Job{job("a", 1, time.Hour), job("b", 1, time.Hour), job("huge", 1, long)}
		return s
	}
	cases := []struct {
		name    string
		cfg     func(*Config)
		build   func() *cluster.Snapshot
		rank    []string
		preempt []string
		order   []string
	}{
		{
			name:  "room for everyone: nobody stops",
			build: oldThenNew(2, 2*time.Hour, 2, node("n1", "v100", 4)),
			rank:  []string{"new", "old"},
			order: []string{"new"},
		},
		{
			name:    "a better-ranked job takes a worse-ranked job's GPUs",
			build:   oldThenNew(4, 2*time.Hour, 2, node("n1", "v100", 4)),
			rank:    []string{"new", "old"},
			preempt: []string{"old"},
			order:   []string{"new", "old"},
		},
		{
			// Two jobs sharing GPU n1-0 hold its two slots, not two GPUs: the other three are
			// free for the newcomer, and neither sharer is stopped.
			name: "a shared GPU counts as slots",
			build: func() *cluster.Snapshot {
				s := &cluster.Snapshot{Now: now, Nodes: []cluster.Node{node("n1", "v100", 4)}}
				running(s, job("a", 1, time.Hour), "n1", "v100", now.Add(-2*time.Hour))
				s.Running = append(s.Running, cluster.Alloc{ID: "b-0", Namespace: "default", JobID: "b", Group: "train",
					NodeID: "n1", DeviceIDs: []string{"n1-0"}, GPUType: "v100", StartTime: now.Add(-2 * time.Hour), Shared: true})
				s.Preemptible = append(s.Preemptible, job("b", 1, time.Hour))
				s.Pending = []cluster.Job{job("new", 3, time.Hour)}
				return s
			},
			rank:  []string{"new", "a", "b"},
			order: []string{"new"},
		},
		{
			name:  "a worse-ranked newcomer waits",
			build: oldThenNew(4, 2*time.Hour, 2, node("n1", "v100", 4)),
			rank:  []string{"old", "new"},
			order: []string{"new"},
		},
		{
			name:  "min_run protects a job that just started",
			cfg:   func(c *Config) { c.MinRun = time.Hour },
			build: oldThenNew(4, 10*time.Minute, 2, node("n1", "v100", 4)),
			rank:  []string{"new", "old"},
			order: []string{"new"},
		},
		{
			// "old" has run 45 minutes: past min_run, but it is ranked by its history.
			name:  "min_run_history protects a job ranked by its history for longer",
			cfg:   func(c *Config) { c.MinRun, c.MinRunHistory, c.MinRunFirst = 30*time.Minute, time.Hour, 0 },
			build: historyRanked(0),
			rank:  []string{"new", "old"},
			order: []string{"new"},
		},
		{
			name:    "a history-ranked job's first turn is min_run_first...",
			cfg:     func(c *Config) { c.MinRun, c.MinRunHistory, c.MinRunFirst = 30*time.Minute, time.Hour, 6*time.Minute },
			build:   historyRanked(0),
			rank:    []string{"new", "old"},
			preempt: []string{"old"},
			order:   []string{"new", "old"},
		},
		{
			name:  "...and a later turn as long as it ran before, up to min_run_history",
			cfg:   func(c *Config) { c.MinRun, c.MinRunHistory, c.MinRunFirst = 30*time.Minute, time.Hour, 6*time.Minute },
			build: historyRanked(2 * time.Hour),
			rank:  []string{"new", "old"},
			order: []string{"new"},
		},
		{
			name:    "...and not one whose runtime its user declared",
			cfg:     func(c *Config) { c.MinRun, c.MinRunHistory = 30*time.Minute, time.Hour },
			build:   oldThenNew(4, 45*time.Minute, 2, node("n1", "v100", 4)),
			rank:    []string{"new", "old"},
			preempt: []string{"old"},
			order:   []string{"new", "old"},
		},
		{
			name: "min_run on one allocation keeps the whole job and its GPUs",
			cfg:  func(c *Config) { c.MinRun = time.Hour },
			build: func() *cluster.Snapshot {
				s := &cluster.Snapshot{Now: now, Nodes: []cluster.Node{node("n1", "v100", 4), node("n2", "v100", 2)}}
				running(s, job("old", 2, time.Hour), "n1", "v100", now.Add(-2*time.Hour))
				// A second allocation of "old", started recently on n2.
				s.Running = append(s.Running, cluster.Alloc{ID: "old-1", Namespace: "default", JobID: "old", Group: "train",
					NodeID: "n2", DeviceIDs: []string{"n2-0", "n2-1"}, GPUType: "v100", StartTime: now.Add(-5 * time.Minute)})
				running(s, job("mid", 2, time.Hour), "n1", "v100", now.Add(-2*time.Hour))
				s.Pending = []cluster.Job{job("new", 2, time.Hour)}
				return s
			},
			rank:    []string{"new", "old", "mid"},
			preempt: []string{"mid"},
			order:   []string{"new", "mid"},
		},
		{
			name: "a job that is not preemptible is never stopped",
			build: func() *cluster.Snapshot {
				s := &cluster.Snapshot{Now: now, Nodes: []cluster.Node{node("n1", "v100", 4)}}
				j := job("old", 4, time.Hour)
				j.Hetgpu.Preemptible = false
				running(s, j, "n1", "v100", now.Add(-2*time.Hour))
				s.Pending = []cluster.Job{job("new", 2, time.Hour)}
				return s
			},
			rank:  []string{"new"},
			order: []string{"new"},
		},
		{
			name:    "a running job moves to a type 3x faster that is free",
			build:   slowOnK80,
			rank:    []string{"slow", "tiny"},
			preempt: []string{"slow"},
			order:   []string{"slow", "tiny"},
		},
		{
			name:  "no move below the hysteresis",
			cfg:   func(c *Config) { c.Hysteresis = 5 },
			build: slowOnK80,
			rank:  []string{"slow", "tiny"},
			order: []string{"tiny"},
		},
		{
			name:  "a free GPU is preferred to stopping someone",
			build: oldThenNew(1, 2*time.Hour, 1, node("n1", "v100", 2), node("n2", "v100", 2)),
			rank:  []string{"new", "old"},
			order: []string{"new"},
		},
		{
			name:  "long-job guard: the job longer than the backlog goes first",
			build: twoShortOneHuge,
			rank:  []string{"a", "b", "huge"},
			order: []string{"huge", "a", "b"},
		},
		{
			name: "long-job guard: a long history estimate is no declared runtime",
			build: func() *cluster.Snapshot {
				s := twoShortOneHuge()
				s.Pending[2].Hetgpu.Est.Source = cluster.EstHistory
				return s
			},
			rank:  []string{"a", "b", "huge"},
			order: []string{"a", "b", "huge"},
		},
		{
			name:  "long-job guard off: rank order",
			cfg:   func(c *Config) { c.LongJobGuard = false },
			build: twoShortOneHuge,
			rank:  []string{"a", "b", "huge"},
			order: []string{"a", "b", "huge"},
		},
		{
			name: "a newcomer its constraints keep off the busy node stops nobody",
			build: func() *cluster.Snapshot {
				s := &cluster.Snapshot{Now: now, Nodes: []cluster.Node{node("n1", "v100", 4)}}
				running(s, job("old", 4, time.Hour), "n1", "v100", now.Add(-2*time.Hour))
				j := job("picky", 1, time.Hour)
				j.Constraints = []cluster.Constraint{{LTarget: "${attr.unique.hostname}", Operand: "=", RTarget: "n9"}}
				s.Pending = []cluster.Job{j}
				return s
			},
			rank:  []string{"picky", "old"},
			order: []string{"picky"},
		},
		{
			name:    "an unhealthy or ineligible node is not planned on",
			build:   oldThenNew(4, 2*time.Hour, 4, node("n1", "v100", 4), ineligible(node("n2", "v100", 4))),
			rank:    []string{"new", "old"},
			preempt: []string{"old"},
			order:   []string{"new", "old"},
		},
		{
			// A node with a slot group and whole GPUs of the same model: the slot job takes
			// a free slot, the whole-GPU job keeps its GPUs (counted in their own group).
			name: "slot group and whole GPUs of one type are counted apart: free slot",
			build: func() *cluster.Snapshot {
				s := &cluster.Snapshot{Now: now, Nodes: []cluster.Node{slotAndWholeNode("n1")}}
				running(s, job("old", 2, time.Hour), "n1", "v100", now.Add(-2*time.Hour))
				s.Pending = []cluster.Job{slotJob("slotjob")}
				return s
			},
			rank:  []string{"slotjob", "old"},
			order: []string{"slotjob"},
		},
		{
			name:    "slot group and whole GPUs of one type are counted apart: whole job preempts",
			build:   oldThenNew(2, 2*time.Hour, 2, slotAndWholeNode("n1")),
			rank:    []string{"new", "old"},
			preempt: []string{"old"},
			order:   []string{"new", "old"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Default()
			cfg.MinRun = 0
			if tc.cfg != nil {
				tc.cfg(&cfg)
			}
			p, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			snap := tc.build()
			plan, err := p.Plan(context.Background(), nil, snap, rankAll(snap, tc.rank...), speeds{"k80": 1, "v100": 3})
			if err != nil {
				t.Fatal(err)
			}
			pre, order := ids(plan)
			if !slices.Equal(pre, tc.preempt) || !slices.Equal(order, tc.order) {
				t.Fatalf("preempted %v, order %v; want %v, %v", pre, order, tc.preempt, tc.order)
			}
			for _, x := range plan.Preempt {
				if x.Reason == "" {
					t.Errorf("preemption of %s has no reason", x.JobID)
				}
			}
		})
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		mut  func(*Config)
		want string
	}{
		{func(c *Config) { c.Hysteresis = 0.5 }, "hysteresis = 0.5"},
		{func(c *Config) { c.MinRun = -time.Second }, "min_run = -1s"},
		{func(c *Config) { c.MinRunHistory = -time.Second }, "min_run_history = -1s"},
		{func(c *Config) { c.CrossNodeEfficiency = 0 }, "cross_node_efficiency = 0"},
	} {
		c := Default()
		tc.mut(&c)
		if _, err := New(c); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("error %v, want it to name %q", err, tc.want)
		}
	}
	if _, err := New(Default()); err != nil {
		t.Fatal(err)
	}
}

func TestHistoryTurn(t *testing.T) {
	cfg := Default()
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		ran, want time.Duration
	}{
		{0, cfg.MinRunFirst},
		{cfg.MinRunFirst / 2, cfg.MinRunFirst},
		{20 * time.Minute, 20 * time.Minute}, // as long as it ran before
		{5 * time.Hour, cfg.MinRunHistory},   // at most min_run_history
	} {
		if got := p.historyTurn(tc.ran); got != tc.want {
			t.Errorf("ran %v: turn %v, want %v", tc.ran, got, tc.want)
		}
	}
	cfg.MinRunFirst = 0
	p, _ = New(cfg)
	if got := p.historyTurn(0); got != cfg.MinRunHistory {
		t.Errorf("min_run_first 0: turn %v, want min_run_history %v", got, cfg.MinRunHistory)
	}
	cfg.MinRunFirst = -time.Minute
	if _, err := New(cfg); err == nil || !strings.Contains(err.Error(), "min_run_first") {
		t.Errorf("negative min_run_first: %v, want an error naming it", err)
	}
}
