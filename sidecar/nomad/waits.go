package nomad

import (
	"context"
	"maps"
	"slices"
	"strings"

	"github.com/hashicorp/nomad/api"

	"github.com/hetgpu/hetgpu/model/cluster"
)

// Starts of the ui lines ShowWaits writes for a held group the user has to act on. A line
// that starts so is removed again once the group only waits.
const (
	infeasibleText   = "cannot run on this cluster: "
	cannotDecideText = "**held: hetgpu cannot decide** — "
	queueText        = "waits for its queue: "
)

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
	return ""
}

// waitLineOf reports whether a ui line is one WaitLine writes.
func waitLineOf(line, group string) bool {
	return strings.HasPrefix(line, GroupLine(group, infeasibleText)) || strings.HasPrefix(line, GroupLine(group, cannotDecideText)) ||
		strings.HasPrefix(line, GroupLine(group, queueText))
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
	for i := range ws {
		w := &ws[i]
		k := jobKey(w.Namespace, w.JobID)
		jr, ok := b.jobs[k]
		if !ok || jobStopped(jr.job) || linkedChild(jr.job) {
			continue // a write would cut a child's link to its parent
		}
		have, want := GroupLines(jr.job)[w.Group], WaitLine(w)
		if want == "" && !waitLineOf(have, w.Group) || want != "" && sameLine(have, want) {
			continue
		}
		todo[k] = append(todo[k], change{w.Group, want})
		ids[k] = [2]string{w.Namespace, w.JobID}
	}
	b.mu.Unlock()
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
		changed := false
		for _, c := range todo[k] {
			tg := findGroup(job, c.group)
			if tg == nil || !groupHeld(job, tg) {
				continue
			}
			have := GroupLines(job)[c.group]
			switch {
			case c.line != "" && !sameLine(have, c.line):
				SetGroupLine(job, c.group, c.line, UI{ExplainURL: b.explainURL(ns, id)})
				changed = true
			case c.line == "" && waitLineOf(have, c.group):
				removeGroupLine(job, c.group)
				changed = true
			}
		}
		if !changed {
			continue
		}
		if err := b.registerUI(ctx, ns, job); err != nil {
			b.log.Debug("showing why a group waits in the ui block failed; retrying next round", "job", k, "error", err)
		}
	}
}

// registerUI registers a job whose ui block alone was changed, if nobody changed the job since
// it was read (EnforceIndex), and keeps the registered version as the tracked one.
func (b *Backend) registerUI(ctx context.Context, ns string, job *api.Job) error {
	resp, err := reregister(ctx, b.c, ns, job, deref(job.JobModifyIndex, 0), nil)
	if err != nil {
		return err
	}
	job.JobModifyIndex = &resp.JobModifyIndex
	mi := resp.JobModifyIndex
	job.ModifyIndex = &mi
	b.storeJob(job)
	return nil
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
