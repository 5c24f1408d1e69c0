package nomad

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/hashicorp/nomad/api"

	"github.com/hetgpu/hetgpu/model/cluster"
)

// Starts of the ui lines ShowWaits writes for a held group the user has to act on. A line
// that starts so gives way to the held line (cluster.HeldText) once the group only waits.
const (
	infeasibleText   = "cannot run on this cluster: "
	cannotDecideText = "**held: hetgpu cannot decide** — "
	queueText        = "waits for its queue: "
)

// heldKindOf is the wait kind a held line names, or "".
func heldKindOf(line, group string) string {
	if !strings.HasPrefix(line, GroupLine(group, cluster.HeldPrefix)) {
		return ""
	}
	for _, k := range []string{cluster.WaitCapacity, cluster.WaitBehind} {
		if strings.Contains(line, "; "+cluster.HeldKindWords(k)) {
			return k
		}
	}
	return ""
}

// WaitLine is the ui line for a pending group, or "" when the group only waits (for capacity
// or behind higher-ranked jobs) and needs no line. A group its queue keeps out (a maximum, or
// idle GPUs held for a queue below its guarantee) gets a line naming the queue.
func WaitLine(w *cluster.Wait) string {
	switch w.Kind {
	case cluster.WaitInfeasible:
		return GroupLine(w.Group, infeasibleText+w.Reason+". It stays held; hetgpu checks again whenever nodes join or change (or `hetgpu release "+w.JobID+"`).")
	case cluster.WaitInvalid:
		return GroupLine(w.Group, cannotDecideText+w.Reason+". Fix the job and run it again, or `hetgpu release "+w.JobID+"`.")
	case cluster.WaitQueue:
		return GroupLine(w.Group, queueText+w.Reason+".")
	}
	if t := cluster.HeldText(w); t != "" {
		return GroupLine(w.Group, t)
	}
	return ""
}

// waitLineOf reports whether a ui line is one WaitLine writes.
func waitLineOf(line, group string) bool {
	return strings.HasPrefix(line, GroupLine(group, infeasibleText)) || strings.HasPrefix(line, GroupLine(group, cannotDecideText)) ||
		strings.HasPrefix(line, GroupLine(group, queueText)) || strings.HasPrefix(line, GroupLine(group, cluster.HeldPrefix))
}

// sameLine reports whether the line in the job is want, allowing for fitDescription having
// shortened it to stay under Nomad's limit (else a long line would be written every round).
func sameLine(have, want string) bool {
	if have == want {
		return true
	}
	cut, ok := strings.CutSuffix(have, "…")
	return ok && cut != "" && strings.HasPrefix(want, cut)
}

// ShowWaits writes into each job's ui description why its held groups cannot run on the
// cluster (cluster.WaitReporter), and removes such a line once its group only waits. Lines
// already there are not written again; a failed write is retried the next round.
func (b *Backend) ShowWaits(ctx context.Context, ws []cluster.Wait) {
	type change struct{ group, line string } // line "" removes the group's line
	todo := map[string][]change{}
	ids := map[string][2]string{}
	b.mu.Lock()
	counts := b.groupCounts()
	for i := range ws {
		w := &ws[i]
		k := jobKey(w.Namespace, w.JobID)
		jr, ok := b.jobs[k]
		// A write is a new job version: Nomad runs a batch job's finished groups again on one
		// (e2e TestJobUpdateSemantics), and without RPC it would cut a child's link to its parent.
		if !ok || jobStopped(jr.job) || b.cutsLink(jr.job) || anyGroupDone(jr.job, counts) {
			continue
		}
		have, want := GroupLines(jr.job)[w.Group], WaitLine(w)
		if want == "" && !waitLineOf(have, w.Group) || want != "" && sameLine(have, want) {
			continue
		}
		if kind := heldKindOf(want, w.Group); kind != "" && (kind == heldKindOf(have, w.Group) || jr.heldNotes >= b.cfg.WaitNotes ||
			have != "" && !waitLineOf(have, w.Group)) {
			// The kind of wait is unchanged (only the rank moved), the cap is reached, or the
			// line says why hetgpu took the group back (preempted, re-held): that stays.
			continue
		}
		todo[k] = append(todo[k], change{w.Group, want})
		ids[k] = [2]string{w.Namespace, w.JobID}
	}
	b.mu.Unlock()
	if len(todo) > 0 && cluster.FenceHeld(ctx, b.cfg.Fence) != nil {
		return // not the leader (any more): the leader writes
	}
	for _, k := range slices.Sorted(maps.Keys(todo)) {
		if ctx.Err() != nil {
			return
		}
		ns, id := ids[k][0], ids[k][1]
		job, _, err := b.c.Jobs().Info(id, (&api.QueryOptions{Namespace: ns}).WithContext(ctx))
		if err != nil {
			b.log.Debug("reading the job to show why it waits failed; retrying next round", "job", k, "error", err)
			continue
		}
		changed, held := false, false
		for _, c := range todo[k] {
			tg := findGroup(job, c.group)
			if tg == nil || !groupHeld(job, tg) {
				continue
			}
			have := GroupLines(job)[c.group]
			switch {
			case c.line != "" && !sameLine(have, c.line):
				line := c.line
				if u := b.explainURL(ns, id); u != "" && heldKindOf(line, c.group) != "" {
					line += " · [why](" + u + ")"
				}
				SetGroupLine(job, c.group, line, UI{ExplainURL: b.explainURL(ns, id)})
				changed = true
				held = held || heldKindOf(c.line, c.group) != ""
			case c.line == "" && waitLineOf(have, c.group):
				removeGroupLine(job, c.group)
				changed = true
			}
		}
		if !changed {
			continue
		}
		if held {
			// The cap holds across restarts: the versions tagged hetgpu-wait are counted.
			n := b.waitVersions(ctx, ns, id)
			b.mu.Lock()
			if jr, ok := b.jobs[k]; ok {
				jr.heldNotes = max(jr.heldNotes, n)
				n = jr.heldNotes
			}
			b.mu.Unlock()
			if n >= b.cfg.WaitNotes {
				continue
			}
		}
		v := deref(job.Version, 0) + 1
		resp, err := b.registerUI(ctx, ns, job)
		if err != nil {
			b.log.Debug("showing why a group waits in the ui block failed; retrying next round", "job", k, "error", err)
			continue
		}
		b.mu.Lock()
		if jr, ok := b.jobs[k]; ok && held {
			jr.heldNotes++
		}
		b.mu.Unlock()
		wq := (&api.WriteOptions{Namespace: ns}).WithContext(ctx)
		if err := tagVersion(b.c, id, v, fmt.Sprintf("%s-%d", waitTag, resp.JobModifyIndex), "hetgpu: why the job waits", wq); err != nil {
			b.log.Debug("tagging the ui-only version failed", "job", k, "error", err)
		}
	}
}

// waitTag names the versions ShowWaits writes.
const waitTag = "hetgpu-wait"

// waitVersions counts a job's versions tagged hetgpu-wait (Nomad keeps a bounded history, so
// this is a floor).
func (b *Backend) waitVersions(ctx context.Context, ns, id string) int {
	vs, _, _, err := b.c.Jobs().Versions(id, false, (&api.QueryOptions{Namespace: ns}).WithContext(ctx))
	if err != nil {
		return 0
	}
	n := 0
	for _, v := range vs {
		if v.VersionTag != nil && strings.HasPrefix(v.VersionTag.Name, waitTag+"-") {
			n++
		}
	}
	return n
}

// anyGroupDone reports a job with a group that finished its work (counts: groupCounts).
func anyGroupDone(job *api.Job, counts map[string]groupCount) bool {
	for _, tg := range job.TaskGroups {
		if tg.Name != nil && counts[groupKey(deref(job.Namespace, "default"), deref(job.ID, ""), *tg.Name)].done > 0 {
			return true
		}
	}
	return false
}

// registerUI registers a job whose ui block alone was changed, if nobody changed the job since
// it was read (EnforceIndex), and keeps the registered version as the tracked one.
func (b *Backend) registerUI(ctx context.Context, ns string, job *api.Job) (*api.JobRegisterResponse, error) {
	resp, err := reregister(ctx, b.c, b.rpc, ns, job, deref(job.JobModifyIndex, 0), nil)
	if err != nil {
		return nil, err
	}
	b.storeRegistered(job, resp)
	return resp, nil
}

// storeRegistered tracks job as Nomad holds it after the register that answered resp: the
// register raised both indices (a stale read in flight must not win over this) and the
// version by one.
func (b *Backend) storeRegistered(job *api.Job, resp *api.JobRegisterResponse) {
	job.JobModifyIndex = &resp.JobModifyIndex
	mi := resp.JobModifyIndex
	job.ModifyIndex = &mi
	v := deref(job.Version, 0) + 1
	job.Version = &v
	b.storeJob(job)
}

// removeGroupLine drops one group's line from the ui description, keeping the others and the
// user's own text.
func removeGroupLine(job *api.Job, group string) {
	if job.UI == nil {
		return
	}
	lines, user := splitDescription(job.UI.Description)
	if _, ok := lines[group]; !ok {
		return
	}
	delete(lines, group)
	job.UI.Description = describe(job, lines, user)
}

var _ cluster.WaitReporter = (*Backend)(nil)
