package cluster

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"time"
)

// Wait kinds of a pending group (the service's QueueEntry.Wait and GroupExplanation.Wait, the
// hetgpu_waiting_groups metric, the feasibility verdicts of sidecar/stages/feasible).
const (
	// WaitInfeasible: the group can never run on the cluster as it stands (every ready node,
	// draining ones too, with all its healthy GPUs free); it is re-checked every round.
	WaitInfeasible = "infeasible"
	// WaitCapacity: it fits the cluster but not the GPUs free now.
	WaitCapacity = "capacity"
	// WaitBehind: it fits the GPUs that were free, but jobs ranked ahead were placed first (or
	// the placement found no option it accepts).
	WaitBehind = "behind"
	// WaitInvalid: its request cannot be evaluated (Reason names the problem).
	WaitInvalid = "invalid"
	// WaitQueue: the group fits the GPUs free now, but its queue is at its maximum or the idle
	// GPUs are held for a queue below its guarantee (Reason names the queue).
	WaitQueue = "queue"
)

// WaitReporter is a backend that shows in the job itself why a pending group cannot be placed
// (Nomad: a line in the job's ui description). After every round outside shadow mode the
// service hands it every pending group that was not decided; a backend writes what changed and
// removes what it wrote earlier for groups that now only wait.
type WaitReporter interface {
	ShowWaits(ctx context.Context, ws []Wait)
}

// Wait is a pending group that was not decided this round, and why.
type Wait struct {
	Namespace, JobID, Group string
	// Kind is one of the Wait* kinds.
	Kind   string
	Reason string
	// Rank is the group's place in the round's ranked queue (1 first; 0 not ranked) of Of
	// ranked groups; GPUs and Device what it asks for.
	Rank, Of int
	GPUs     int
	Device   string
	// FreeIn is how long until enough GPUs of a type the group can use are expected free
	// (FreeSoon.NextFree; 0 unknown). Preferred are the GPU types it runs best on
	// (PreferredTypes; nil unknown or nothing to prefer).
	FreeIn    time.Duration
	Preferred []string
}

// JobKey returns the group's "namespace/id/group".
func (w *Wait) JobKey() string { return GroupKey(w.Namespace, w.JobID, w.Group) }

// HeldPrefix starts what a group that only waits says about itself (HeldText).
const HeldPrefix = "held by hetgpu: "

// HeldKindWords are the words HeldText uses for a wait kind: "" for kinds it does not cover.
// A job's note is written again only when these change, not when the rank does.
func HeldKindWords(kind string) string {
	switch kind {
	case WaitCapacity:
		return "the cluster has such GPUs, none free now"
	case WaitBehind:
		return "GPUs free up for jobs ranked ahead first"
	}
	return ""
}

// HeldText is what a ranked group that only waits (for free GPUs, or behind jobs ranked
// ahead) says about itself, in its job's ui description and on the dashboard's Queue page:
// "held by hetgpu: rank 3 of 12, waiting for 2 GPUs of one type (nvidia/gpu, A100 or H100
// preferred), next free in about 20 min (estimate); the cluster has such GPUs, none free
// now". The estimate and the preferred types are left out when unknown. "" for other kinds
// and unranked groups. The kind's words come last, after "; ": a note is rewritten only when
// they change (sidecar/backends/nomad), so a new estimate or rank alone writes nothing.
func HeldText(w *Wait) string {
	kind := HeldKindWords(w.Kind)
	if kind == "" || w.Rank <= 0 {
		return ""
	}
	gpus := "1 GPU"
	if w.GPUs != 1 {
		// A placement puts all of a group's GPUs on one type.
		gpus = fmt.Sprintf("%d GPUs of one type", w.GPUs)
	}
	var about []string
	if w.Device != "" {
		about = append(about, w.Device)
	}
	if len(w.Preferred) > 0 {
		names := make([]string, len(w.Preferred))
		for i, t := range w.Preferred {
			names[i] = strings.ToUpper(t)
		}
		about = append(about, orList(names)+" preferred")
	}
	if len(about) > 0 {
		gpus += " (" + strings.Join(about, ", ") + ")"
	}
	if w.FreeIn > 0 {
		gpus += ", next free in " + AboutDuration(w.FreeIn) + " (estimate)"
	}
	return fmt.Sprintf("%srank %d of %d, waiting for %s; %s", HeldPrefix, w.Rank, max(w.Of, w.Rank), gpus, kind)
}

// orList joins "A", "A or B", "A, B or C".
func orList(s []string) string {
	if len(s) < 2 {
		return strings.Join(s, "")
	}
	return strings.Join(s[:len(s)-1], ", ") + " or " + s[len(s)-1]
}

// AboutDuration says a rough duration in words, as precise as an estimate deserves: "about
// 7 min" under 10 minutes, to 5 minutes under 2 hours ("about 35 min"), else to the hour
// ("about 3 h").
func AboutDuration(d time.Duration) string {
	m := d.Minutes()
	switch {
	case m < 10:
		return fmt.Sprintf("about %d min", max(1, int(math.Round(m))))
	case m < 117.5: // 117.5 min and up round to 120 min: say "about 2 h"
		return fmt.Sprintf("about %d min", int(math.Round(m/5))*5)
	}
	return fmt.Sprintf("about %d h", int(math.Round(d.Hours())))
}

// FreeSoon is when a round's GPUs are expected free, per GPU type, for NextFree estimates.
// Per type it counts the healthy GPUs of nodes open to new work that nothing holds (less those
// the round's decisions take), then the GPUs of running allocations in the order they are
// expected to end. An allocation ends after its group's remaining runtime estimate (the
// snapshot's Preemptible, which the round's estimates step fills: EstRuntime, or a history
// estimate's expected time left), which is on the reference GPU type: speedup, when given,
// scales it to the type the allocation runs on. GPUs whose holder has no estimate (a shared
// GPU: any of its holders), or that a decision of the round takes, are never counted as
// freeing: an age alone is no estimate to print. GPUs are counted per type over all nodes,
// whatever a group's constraints and node split, so an estimate is a guess, not a promise.
type FreeSoon struct {
	free map[string]int
	// freeing holds, per type, how long until each held GPU is expected free, soonest first.
	freeing map[string][]time.Duration
}

// NewFreeSoon reads snap and the round's decisions (built once a round, read per group).
// speedup(job, type) is how many times faster than on the reference type the running job is
// predicted on type (nil, or a value <= 0: as fast).
func NewFreeSoon(snap *Snapshot, decided []Decision, speedup func(j *Job, gpuType string) float64) *FreeSoon {
	est := map[string]*Job{}
	for i := range snap.Preemptible {
		if j := &snap.Preemptible[i]; j.Hetgpu.EstRuntime > 0 {
			est[j.Key()] = j
		}
	}
	left := func(a *Alloc) time.Duration {
		j := est[a.Key()]
		if j == nil {
			// Not preemptible: the time left of its hetgpu.runtime, as the backend read it for
			// the allocation (Nomad; none without an estimate).
			if a.Hetgpu.EstRuntime <= 0 {
				return -1
			}
			j = &Job{Namespace: a.Namespace, ID: a.JobID, Group: a.Group, GPUs: len(a.DeviceIDs), Hetgpu: a.Hetgpu}
		}
		l := j.Hetgpu.EstRuntime
		if j.Hetgpu.Est.Left > 0 {
			l = j.Hetgpu.Est.Left // a history estimate ranks by EstRuntime; Left is its time left
		}
		if speedup != nil {
			if f := speedup(j, a.GPUType); f > 0 && !math.IsInf(f, 0) {
				l = time.Duration(float64(l) / f)
			}
		}
		return max(l, time.Second)
	}
	// ends is when each held GPU is expected free: when its last holder ends; -1 when one of
	// its holders never counts as ending.
	ends := map[instKey]time.Duration{}
	for i := range snap.Running {
		a := &snap.Running[i]
		l := left(a)
		for _, id := range a.DeviceIDs {
			k := instKey{a.NodeID, id}
			if e, seen := ends[k]; !seen || l < 0 || e >= 0 && l > e {
				ends[k] = l
			}
		}
	}
	for i := range decided {
		for _, as := range decided[i].Assign {
			for _, id := range as.InstanceIDs {
				ends[instKey{as.NodeID, id}] = -1
			}
		}
	}
	f := &FreeSoon{free: map[string]int{}, freeing: map[string][]time.Duration{}}
	for i := range snap.Nodes {
		n := &snap.Nodes[i]
		if !n.Ready() {
			continue
		}
		for gi := range n.Devices {
			g := &n.Devices[gi]
			t := g.TypeKey()
			for _, in := range g.Instances {
				if !in.Healthy {
					continue
				}
				switch e, held := ends[instKey{n.ID, in.ID}]; {
				case !held:
					f.free[t]++
				case e > 0:
					f.freeing[t] = append(f.freeing[t], e)
				}
			}
		}
	}
	for _, es := range f.freeing {
		slices.Sort(es)
	}
	return f
}

// NextFree estimates how long until need GPUs of one of types (those a waiting group can use)
// are free: the soonest type's time. 0 means unknown: no type frees enough GPUs with known
// ends, or a type has enough free already (the group then waits for something the count
// cannot see: node fit, constraints, jobs ranked ahead).
func (f *FreeSoon) NextFree(types []string, need int) time.Duration {
	if need < 1 {
		return 0
	}
	var best time.Duration
	for _, t := range types {
		short := need - f.free[t]
		if short <= 0 {
			return 0
		}
		if es := f.freeing[t]; len(es) >= short && (best == 0 || es[short-1] < best) {
			best = es[short-1]
		}
	}
	return best
}

// PreferredTypes are the GPU types a group runs best on, from its predicted throughput on
// each type it can use: the fastest, and the next one too when it is predicted within a
// fifth of it. Nil when that would be every type it can use (nothing to prefer) or nothing
// is predicted.
func PreferredTypes(throughput map[string]float64) []string {
	types := make([]string, 0, len(throughput))
	for t, thr := range throughput {
		if thr > 0 && !math.IsInf(thr, 0) {
			types = append(types, t)
		}
	}
	sort.Slice(types, func(a, b int) bool {
		ta, tb := throughput[types[a]], throughput[types[b]]
		return ta > tb || ta == tb && types[a] < types[b]
	})
	n := min(1, len(types))
	if len(types) > 1 && throughput[types[1]] >= 0.8*throughput[types[0]] {
		n = 2
	}
	if n == 0 || n == len(throughput) {
		return nil
	}
	return types[:n]
}
