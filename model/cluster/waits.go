package cluster

import (
	"context"
	"fmt"
)

// Wait kinds of a pending group (the service's QueueEntry.Wait and GroupExplanation.Wait, the
// hetgpu_waiting_groups metric, the feasibility verdicts of sidecar/feasible).
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
// "held by hetgpu: rank 3 of 12, waiting for 2 GPUs (nvidia/gpu); GPUs free up for jobs
// ranked ahead first". "" for other kinds and unranked groups.
func HeldText(w *Wait) string {
	kind := HeldKindWords(w.Kind)
	if kind == "" || w.Rank <= 0 {
		return ""
	}
	gpus := "1 GPU"
	if w.GPUs != 1 {
		gpus = fmt.Sprintf("%d GPUs", w.GPUs)
	}
	if w.Device != "" {
		gpus += " (" + w.Device + ")"
	}
	return fmt.Sprintf("%srank %d of %d, waiting for %s; %s", HeldPrefix, w.Rank, max(w.Of, w.Rank), gpus, kind)
}
