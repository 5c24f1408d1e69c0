package service_test

import (
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/hetgpu/hetgpu/sidecar/backends/nomad"
	"github.com/hetgpu/hetgpu/sidecar/runtime/service"
	"github.com/hetgpu/hetgpu/sidecar/runtime/service/servicetest"
	"github.com/hetgpu/hetgpu/sidecar/runtime/store"
	"github.com/hetgpu/hetgpu/sidecar/sched"
	"github.com/hetgpu/hetgpu/sidecar/stages/place"
)

// gangJob is a held batch job with a CPU-only launcher and two GPU groups of gpus each.
func gangJob(id string, gpus uint64, meta map[string]string) *api.Job {
	j := servicetest.HeldJob(id, gpus, 1, meta)
	w := j.TaskGroups[0]
	w.Name = ptr("w1")
	w2 := *w
	w2.Name = ptr("w2")
	w2.Tasks = []*api.Task{{Name: "train", Driver: "hetgpu", Resources: &api.Resources{
		Devices: []*api.RequestedDevice{{Name: "nvidia/gpu", Count: ptr(gpus)}},
	}}}
	launcher := &api.TaskGroup{Name: ptr("launcher"), Count: ptr(1), Tasks: []*api.Task{{Name: "run", Driver: "exec"}}}
	j.TaskGroups = []*api.TaskGroup{launcher, w, &w2}
	return j
}

func ptr[T any](v T) *T { return &v }

func group(job *api.Job, name string) *api.TaskGroup {
	for _, tg := range job.TaskGroups {
		if *tg.Name == name {
			return tg
		}
	}
	return nil
}

func jobHeld(job *api.Job) bool {
	for _, c := range job.Constraints {
		if c.LTarget == "${meta.hetgpu.queue}" {
			return true
		}
	}
	return false
}

// A gang whose second GPU group does not fit is not pinned at all (the launcher stays held
// too), the job queued behind it gets the GPUs in the same round, and once room frees up the
// whole gang, launcher included, is pinned in one job update. With hetgpu.gang = "false" the
// group that fits is pinned alone.
func TestGangPlacedAllOrNothing(t *testing.T) {
	withEachPlacer(t, gangAllOrNothing)
}

// withEachPlacer runs a scenario on a started harness once with the built-in first fit and
// once with the MILP placer, since queueing semantics must not depend on the placer.
func withEachPlacer(t *testing.T, scenario func(*testing.T, *servicetest.Harness)) {
	t.Helper()
	milp, err := place.New(place.Default(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name   string
		placer sched.Placer
	}{{"first fit", nil}, {"MILP placer", milp}} {
		t.Run(tt.name, func(t *testing.T) {
			h := servicetest.NewHarness(t, nil)
			if tt.placer != nil {
				h.Stop()
				h.Placer = tt.placer
				h.Start()
			}
			scenario(t, h)
		})
	}
}

func gangAllOrNothing(t *testing.T, h *servicetest.Harness) {
	// One of the two 8-GPU nodes is taken; the gang needs both.
	h.Nomad.Register(servicetest.HeldJob("filler", 8, 1, nil))
	h.Round()
	pinOf(t, h.Nomad.Job("default", "filler"))
	h.Nomad.Register(gangJob("gang", 8, nil))
	h.Nomad.Register(gangJob("solo", 8, map[string]string{"hetgpu.enable": "true", "hetgpu.gang": "false"}))
	h.Nomad.Register(servicetest.HeldJob("small", 4, 1, nil))
	h.Round()

	gang := h.Nomad.Job("default", "gang")
	waited := *gang.Version // 1 with the ui note saying why it waits
	for _, g := range []string{"w1", "w2"} {
		if _, _, ok := nomad.PinOf(group(gang, g)); ok {
			t.Fatalf("gang group %s pinned while its mate could not be", g)
		}
	}
	// The one write a waiting gang gets is the ui note saying why it waits; it keeps the hold.
	if !jobHeld(gang) || *gang.Version > 1 || *gang.Version == 1 && !strings.Contains(gang.UI.Description, "held by hetgpu: rank") {
		t.Fatalf("gang job rewritten (version %d, held %v): its launcher would run without workers", *gang.Version, jobHeld(gang))
	}
	// The launcher waits with its gang under the job-level hold; it is not a malformed group.
	if inv := h.Service.Queue().Invalid; len(inv) != 0 {
		t.Errorf("invalid jobs %+v, want none (a CPU-only launcher beside GPU groups is a gang companion)", inv)
	}
	if l := nomad.GroupLines(gang)["launcher"]; strings.Contains(l, "cannot decide") {
		t.Errorf("launcher ui line %q", l)
	}
	q := queueByKey(h)
	if e := q["default/gang/w1"]; e.Status == "decided" || !strings.Contains(e.Reason, "gang") || e.Gang != "default/gang" {
		t.Errorf("gang/w1 queue entry %+v, want waiting because of its gang", e)
	}
	// solo opted out: the group that fits is pinned, the other keeps waiting.
	solo := h.Nomad.Job("default", "solo")
	_, _, p1 := nomad.PinOf(group(solo, "w1"))
	_, _, p2 := nomad.PinOf(group(solo, "w2"))
	if p1 == p2 {
		t.Fatalf("solo (hetgpu.gang = false): w1 pinned %v, w2 pinned %v; want exactly one", p1, p2)
	}
	if r, ok := h.Store.Latest("default/small/train"); !ok || r.Status != store.StatusPinned {
		t.Fatalf("small not pinned beside the deferred gang: %+v", r)
	}
	m := scrape(t, h)
	if !strings.Contains(m, "hetgpu_gangs_deferred_total 1") || !strings.Contains(m, "hetgpu_gang_partial_pins_total 0") {
		t.Errorf("gang metrics:\n%s", grepLines(m, "gang"))
	}

	// Room for the whole gang: both GPU groups pinned and the launcher released, in one update.
	for _, id := range []string{"filler", "solo"} {
		j := h.Nomad.Job("default", id)
		j.Stop = ptr(true)
		h.Nomad.Register(j)
	}
	h.Round()
	gang = h.Nomad.Job("default", "gang")
	for _, g := range []string{"w1", "w2"} {
		if _, _, ok := nomad.PinOf(group(gang, g)); !ok {
			t.Fatalf("gang group %s not pinned once the gang fits", g)
		}
	}
	if jobHeld(gang) || *gang.Version != waited+1 {
		t.Fatalf("gang pinned in version %d (held %v), want version %d: one register for the whole gang", *gang.Version, jobHeld(gang), waited+1)
	}
	for _, c := range group(gang, "launcher").Constraints {
		if c.LTarget == "${meta.hetgpu.queue}" {
			t.Fatalf("launcher still held after its gang was pinned")
		}
	}
	if !strings.Contains(scrape(t, h), "hetgpu_gang_partial_pins_total 0") {
		t.Error("a gang was pinned in part")
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// A gang with a member that can never run on the cluster is set aside whole: its mate that
// would fit takes no GPUs and says why it waits.
func TestGangWithInfeasibleMemberWaitsWhole(t *testing.T) {
	h := servicetest.NewHarness(t, nil)
	j := gangJob("gang", 4, nil)
	group(j, "w2").Tasks[0].Resources.Devices[0].Count = ptr(uint64(16))
	h.Nomad.Register(j)
	h.Round()
	q := queueByKey(h)
	if e := q["default/gang/w2"]; !e.Infeasible || e.Gang != "default/gang" {
		t.Fatalf("w2 (16 GPUs) = %+v, want infeasible", e)
	}
	e := q["default/gang/w1"]
	if !e.Infeasible || !strings.Contains(e.Reason, `its gang's group "w2" cannot run on this cluster: needs 16 GPUs`) {
		t.Fatalf("w1 = %+v, want infeasible because of w2", e)
	}
	if _, _, ok := nomad.PinOf(group(h.Nomad.Job("default", "gang"), "w1")); ok {
		t.Fatal("w1 pinned without its infeasible mate")
	}
}

// A gang that waited past gang.reserve_after and cannot be placed reserves GPUs: a long job
// that would take the GPUs it needs waits (with the reservation as its reason), a small one
// that fits in what is left over starts.
func TestGangReservationHoldsBackLongJobs(t *testing.T) {
	h := servicetest.NewHarness(t, func(c *service.Config, _ *nomad.Config) { c.GangReserveAfter = time.Nanosecond })
	h.Nomad.Register(servicetest.HeldJob("filler", 8, 1, nil))
	h.Round()
	pinOf(t, h.Nomad.Job("default", "filler"))
	h.Nomad.Register(gangJob("gang", 8, nil))
	long := map[string]string{"hetgpu.enable": "true", "hetgpu.runtime": "10h"}
	h.Nomad.Register(servicetest.HeldJob("long", 8, 1, long))
	h.Nomad.Register(servicetest.HeldJob("small", 2, 1, nil))
	h.Round()

	q := queueByKey(h)
	if e := q["default/long/train"]; e.Status == "decided" || !strings.Contains(e.Reason, "GPUs are reserved for gang default/gang (16 GPUs") {
		t.Errorf("long = %+v, want held back by the gang's reservation", e)
	}
	if e := q["default/gang/w1"]; !strings.Contains(e.Reason, "reservation for 16 GPUs") {
		t.Errorf("gang/w1 = %+v, want its reservation in the reason", e)
	}
	if r, ok := h.Store.Latest("default/small/train"); !ok || r.Status != store.StatusPinned {
		t.Errorf("small not pinned (it fits in the GPUs left over beside the reservation): %+v", r)
	}
	if m := scrape(t, h); !strings.Contains(m, "hetgpu_gang_reserved_gpus 16") {
		t.Errorf("gang metrics:\n%s", grepLines(m, "gang"))
	}
}
