package nomad

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/hetgpu/hetgpu/model/cluster"
)

func TestWaitLines(t *testing.T) {
	long := strings.Repeat("needs 2 nodes with 4 GPUs of one type; at most 1 node has 4 V100; ", 20)
	tests := []struct {
		name string
		w    cluster.Wait
		// want: the line contains it; "" means no line.
		want string
	}{
		{"infeasible", cluster.Wait{JobID: "j", Group: "a", Kind: cluster.WaitInfeasible, Reason: "needs 16 GPUs of one type on one node; the largest node has 8 V100"},
			"- group `a`: cannot run on this cluster: needs 16 GPUs of one type on one node; the largest node has 8 V100. It stays held"},
		{"invalid", cluster.Wait{JobID: "j", Group: "a", Kind: cluster.WaitInvalid, Reason: "bad operator"},
			"- group `a`: **held: hetgpu cannot decide** — bad operator. Fix the job"},
		{"capacity", cluster.Wait{JobID: "j", Group: "a", Kind: cluster.WaitCapacity, Reason: "needs 8 free GPUs"}, ""},
		{"behind", cluster.Wait{JobID: "j", Group: "a", Kind: cluster.WaitBehind}, ""},
		{"capacity, ranked", cluster.Wait{JobID: "j", Group: "a", Kind: cluster.WaitCapacity, Rank: 3, Of: 12, GPUs: 2, Device: "nvidia/gpu"},
			"- group `a`: held by hetgpu: rank 3 of 12, waiting for 2 GPUs of one type (nvidia/gpu); the cluster has such GPUs, none free now"},
		{"capacity, ranked, with an estimate", cluster.Wait{JobID: "j", Group: "a", Kind: cluster.WaitCapacity, Rank: 3, Of: 12, GPUs: 2,
			Device: "nvidia/gpu", FreeIn: 20 * time.Minute, Preferred: []string{"a100", "h100"}},
			"- group `a`: held by hetgpu: rank 3 of 12, waiting for 2 GPUs of one type (nvidia/gpu, A100 or H100 preferred), next free in about 20 min (estimate); the cluster has such GPUs, none free now"},
		{"behind, ranked", cluster.Wait{JobID: "j", Group: "a", Kind: cluster.WaitBehind, Rank: 1, Of: 1, GPUs: 1},
			"- group `a`: held by hetgpu: rank 1 of 1, waiting for 1 GPU; GPUs free up for jobs ranked ahead first"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := WaitLine(&tt.w)
			if tt.want == "" && l != "" || tt.want != "" && !strings.HasPrefix(l, tt.want) {
				t.Fatalf("line %q, want %q", l, tt.want)
			}
			if l != "" && !waitLineOf(l, "a") {
				t.Fatalf("%q is not recognised as a wait line", l)
			}
			if k := heldKindOf(l, "a"); cluster.HeldText(&tt.w) != "" && k != tt.w.Kind {
				t.Fatalf("heldKindOf(%q) = %q, want %q", l, k, tt.w.Kind)
			}
		})
	}

	// A line shortened to fit Nomad's limit still counts as written (else it would be
	// registered again every round); another reason does not.
	job := readJob(t, "testdata/rewrite/multigroup.in.json")
	job.UI.Description = "The ML team's pipeline."
	SetGroupLine(job, "b", GroupLine("b", "pinned to somewhere"), UI{})
	want := WaitLine(&cluster.Wait{JobID: "pipeline", Group: "a", Kind: cluster.WaitInfeasible, Reason: long})
	SetGroupLine(job, "a", want, UI{})
	have := GroupLines(job)["a"]
	if have == want || !sameLine(have, want) {
		t.Fatalf("shortened line %q not recognised as %q", have, want)
	}
	other := WaitLine(&cluster.Wait{JobID: "pipeline", Group: "a", Kind: cluster.WaitInfeasible, Reason: "x" + long})
	if sameLine(have, other) || sameLine("", want) {
		t.Fatal("a different line counts as the same")
	}

	// Removing the line keeps the other group's line and the user's text.
	job = readJob(t, "testdata/rewrite/multigroup.in.json")
	job.UI.Description = "The ML team's pipeline."
	SetGroupLine(job, "b", GroupLine("b", "pinned to somewhere"), UI{})
	SetGroupLine(job, "a", WaitLine(&cluster.Wait{JobID: "pipeline", Group: "a", Kind: cluster.WaitInfeasible, Reason: "r"}), UI{})
	if !waitLineOf(GroupLines(job)["a"], "a") {
		t.Fatalf("no wait line written: %q", job.UI.Description)
	}
	removeGroupLine(job, "a")
	lines := GroupLines(job)
	if _, ok := lines["a"]; ok || lines["b"] == "" || !strings.HasSuffix(job.UI.Description, "The ML team's pipeline.") {
		t.Fatalf("after removing: lines %q, description %q", lines, job.UI.Description)
	}
}

// TestShowWaitsHeld: a held group that only waits says so in its job's ui description: its
// rank, what it waits for and when GPUs are expected free, written when it is first ranked
// and again only when the kind of wait changes (a new rank or estimate alone writes nothing:
// each write is a job version), at most WaitNotes times, each version tagged hetgpu-wait-N; a
// job with a finished group is never written (a new version runs it again).
func TestShowWaitsHeld(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.WaitNotes = 2 })
	job := heldJob("wait", 2, 1, map[string]string{"hetgpu.enable": "true"})
	job.UI = &api.JobUIConfig{Description: "the user's words"}
	f.srv.Register(job)
	f.resync(t)
	ctx := context.Background()
	steps := []struct {
		kind      string
		rank      int
		freeIn    time.Duration
		preferred []string
		wantWrite bool
		// want is the written line's text before the kind's words.
		want string
	}{
		// first ranked
		{cluster.WaitCapacity, 3, 20 * time.Minute, []string{"a100"}, true,
			"rank 3 of 12, waiting for 2 GPUs of one type (nvidia/gpu, A100 preferred), next free in about 20 min (estimate)"},
		{cluster.WaitCapacity, 3, 50 * time.Minute, []string{"a100"}, false, ""},                           // the estimate alone moved
		{cluster.WaitCapacity, 2, 0, []string{"a100", "h100"}, false, ""},                                  // rank, estimate and types moved
		{cluster.WaitBehind, 1, 0, nil, true, "rank 1 of 12, waiting for 2 GPUs of one type (nvidia/gpu)"}, // the kind changed
		{cluster.WaitCapacity, 1, time.Minute, nil, false, ""},                                             // changed again, but the cap of 2 is reached
	}
	version := uint64(0)
	for i, s := range steps {
		f.b.ShowWaits(ctx, []cluster.Wait{{Namespace: "default", JobID: "wait", Group: "train", Kind: s.kind, Rank: s.rank, Of: 12, GPUs: 2,
			Device: "nvidia/gpu", FreeIn: s.freeIn, Preferred: s.preferred}})
		f.resync(t)
		got := f.srv.Job("default", "wait")
		if wrote := *got.Version != version; wrote != s.wantWrite {
			t.Fatalf("step %d (%s, rank %d, free in %v): wrote = %v, want %v", i, s.kind, s.rank, s.freeIn, wrote, s.wantWrite)
		}
		version = *got.Version
		if s.wantWrite {
			want := fmt.Sprintf("held by hetgpu: %s; %s", s.want, cluster.HeldKindWords(s.kind))
			want += " · [why](http://sidecar:4656/v1/jobs/default/wait/explain?format=html)"
			if !strings.Contains(got.UI.Description, want) || !strings.Contains(got.UI.Description, "the user's words") {
				t.Errorf("step %d: description %q, want %q and the user's words", i, got.UI.Description, want)
			}
		}
	}
	tags := f.srv.Tags("default", "wait")
	if len(tags) != 2 || !strings.HasPrefix(tags[0].Name, "hetgpu-wait-") || tags[1].Version != 2 {
		t.Errorf("tags = %+v; want two hetgpu-wait tags, the last on version 2", tags)
	}

	// A group whose line says why hetgpu took it back (preempted, re-held) keeps that line.
	back := heldJob("back", 1, 1, map[string]string{"hetgpu.enable": "true"})
	SetGroupLine(back, "train", "**preempted** at 12:00: a better-ranked job needs its GPUs; hetgpu decides again", UI{})
	f.srv.Register(back)
	f.resync(t)
	f.b.ShowWaits(ctx, []cluster.Wait{{Namespace: "default", JobID: "back", Group: "train", Kind: cluster.WaitCapacity, Rank: 1, Of: 1, GPUs: 1}})
	if got := f.srv.Job("default", "back"); *got.Version != 0 {
		t.Errorf("the preempted line was replaced: %q", got.UI.Description)
	}

	// A job one of whose groups finished is not written.
	done := heldJob("done", 1, 1, map[string]string{"hetgpu.enable": "true"})
	f.srv.Register(done)
	f.resync(t)
	snap := f.snapshot(t)
	for _, j := range snap.Pending {
		if j.ID == "done" {
			if res, err := f.b.Pin(ctx, []cluster.Decision{decide(snap, j, "node-a100-00")}); err != nil || !res[0].Applied {
				t.Fatalf("pin = %+v, %v", res, err)
			}
		}
	}
	f.resync(t)
	a := f.srv.Allocs("default", "done")[0]
	f.srv.SetAllocStatus(a.ID, api.AllocClientStatusComplete, f.b.now().Add(-time.Minute), f.b.now())
	f.resync(t)
	v := *f.srv.Job("default", "done").Version
	f.b.ShowWaits(ctx, []cluster.Wait{{Namespace: "default", JobID: "done", Group: "train", Kind: cluster.WaitCapacity, Rank: 1, Of: 1, GPUs: 1}})
	if got := *f.srv.Job("default", "done").Version; got != v {
		t.Errorf("a job whose group finished was written (version %d -> %d)", v, got)
	}
}
