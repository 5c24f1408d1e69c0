package nomad

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/hetgpu/hetgpu/model/annot"
	"github.com/hetgpu/hetgpu/model/cluster"
)

var _ cluster.Preempter = (*Backend)(nil)

// Preempt re-holds the preempted groups, all groups of one job in one register (the pipeline
// hands it whole gangs), and stops their allocations. When the groups are all of the job's
// live GPU groups the hold goes on the job, so a launcher without GPUs stops and waits with
// its workers instead of running on alone. A group whose job does not carry
// hetgpu.preemptible = true is refused, whatever the caller asks; a job with a refused group
// is not touched at all (a gang is stopped whole or not at all).
func (b *Backend) Preempt(ctx context.Context, ps []cluster.Preemption) ([]cluster.PinResult, error) {
	if err := cluster.FenceHeld(ctx, b.cfg.Fence); err != nil {
		return nil, fmt.Errorf("preempt: %w", err)
	}
	out := make([]cluster.PinResult, len(ps))
	var order []string
	byJob := map[string][]int{}
	for i, p := range ps {
		out[i].JobKey = p.JobKey()
		k := jobKey(p.Namespace, p.JobID)
		if byJob[k] == nil {
			order = append(order, k)
		}
		byJob[k] = append(byJob[k], i)
	}
	for _, k := range order {
		idx := byJob[k]
		if err := b.checkPreemptible(ps, idx); err != nil {
			for _, i := range idx {
				out[i].Err = err
			}
			continue
		}
		applied, err := b.reholdGang(ctx, ps, idx)
		for _, i := range idx {
			out[i].Applied, out[i].Err = applied, err
		}
	}
	return out, nil
}

// checkPreemptible refuses the job's preemptions unless every group exists and opted in.
func (b *Backend) checkPreemptible(ps []cluster.Preemption, idx []int) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, i := range idx {
		p := ps[i]
		jr, ok := b.jobs[jobKey(p.Namespace, p.JobID)]
		if !ok {
			return fmt.Errorf("preempt %s: %w", p.JobKey(), cluster.ErrJobGone)
		}
		tg := findGroup(jr.job, p.Group)
		if tg == nil {
			return fmt.Errorf("preempt %s: %w", p.JobKey(), cluster.ErrJobGone)
		}
		if a, err := annot.Parse(jr.job.Meta, tg.Meta, p.Group); err != nil || !a.Preemptible {
			return fmt.Errorf("preempt %s: the group is not annotated %s = true", p.JobKey(), annot.KeyPreemptible)
		}
	}
	return nil
}

// registerHeld registers a re-held job (enforcing the index it was read at), records it as
// the tracked job and tags the new version hetgpu-rehold-N with desc.
func (b *Backend) registerHeld(ctx context.Context, job *api.Job, desc string) error {
	ns, id := deref(job.Namespace, "default"), deref(job.ID, "")
	wq := (&api.WriteOptions{Namespace: ns}).WithContext(ctx)
	resp, err := reregister(ctx, b.c, b.rpc, ns, job, deref(job.JobModifyIndex, 0), registerTag(id, "hetgpu-rehold", deref(job.Version, 0)+1, desc))
	if err != nil {
		return fmt.Errorf("register: %w", err)
	}
	b.storeRegistered(job, resp)
	if tagInRegister(id) {
		return nil // tagged by the register
	}
	if err := tagVersion(b.c, id, *job.Version, fmt.Sprintf("hetgpu-rehold-%d", resp.JobModifyIndex), desc, wq); err != nil {
		b.log.Debug("tagging the re-held version failed", "job", jobKey(ns, id), "error", err)
	}
	return nil
}

// reholdGang re-holds the groups ps[idx] (one job) in one register and stops their
// allocations, and those of the job's groups without GPUs when the hold went on the job.
func (b *Backend) reholdGang(ctx context.Context, ps []cluster.Preemption, idx []int) (bool, error) {
	ns, id := ps[idx[0]].Namespace, ps[idx[0]].JobID
	key := jobKey(ns, id)
	q := (&api.QueryOptions{Namespace: ns}).WithContext(ctx)
	job, _, err := b.c.Jobs().Info(id, q)
	if err != nil {
		if statusCode(err) == 404 {
			b.dropJob(ns, id)
			return false, fmt.Errorf("preempt %s: %w", key, cluster.ErrJobGone)
		}
		return false, fmt.Errorf("preempt %s: read job: %w", key, err)
	}
	groups := make([]string, 0, len(idx))
	set := map[string]bool{}
	lines := map[string]string{}
	now := b.now()
	at := now.UTC().Format(time.RFC3339)
	for _, i := range idx {
		p := ps[i]
		if set[p.Group] {
			continue
		}
		set[p.Group] = true
		groups = append(groups, p.Group)
		ranText := ""
		if ran, ok := b.addRan(job, p.Group, now); ok {
			ranText = fmt.Sprintf("; ran %s so far", ran)
		}
		lines[p.Group] = GroupLine(p.Group, fmt.Sprintf("**re-held** at %s: preempted: %s%s; hetgpu decides again", at, p.Reason, ranText))
	}
	b.mu.Lock()
	counts := b.groupCounts()
	b.mu.Unlock()
	// The hold goes on the job when no other GPU group of it still runs or waits to run.
	jobLevel := true
	var companions []string
	for _, tg := range job.TaskGroups {
		if tg.Name == nil || set[*tg.Name] {
			continue
		}
		if len(gpuDevices(tg)) == 0 {
			companions = append(companions, *tg.Name)
			continue
		}
		if !groupHeld(job, tg) && groupActive(job, tg, counts) {
			jobLevel = false
		}
	}
	if jobLevel {
		for _, g := range companions {
			lines[g] = GroupLine(g, fmt.Sprintf("**re-held** at %s with its job's GPU groups (%s); starts again with them", at, strings.Join(groups, ", ")))
		}
	} else {
		companions = nil
	}
	if err := ReholdGang(job, groups, jobLevel, lines, UI{ExplainURL: b.explainURL(ns, id)}); err != nil {
		b.storeJob(job)
		return false, fmt.Errorf("preempt %s: %w", key, err)
	}
	reason := ps[idx[0]].Reason
	if err := b.registerHeld(ctx, job, "hetgpu preempted "+strings.Join(groups, ", ")+": "+truncate(reason, 120)); err != nil {
		return false, fmt.Errorf("preempt %s: %w", key, err)
	}
	b.log.Warn("pinned job preempted", "job", key, "groups", groups, "job_level_hold", jobLevel, "reason", reason)
	// A batch job's running allocations survive a job update: stop them. Their replacements
	// meet the hold and wait for hetgpu.
	stop := append(append([]string(nil), groups...), companions...)
	sort.Strings(stop)
	var errs []error
	for _, g := range stop {
		if err := b.stopGroup(ctx, ns, id, g); err != nil {
			errs = append(errs, err)
		}
	}
	return true, errors.Join(errs...)
}

// addRan adds the time the group's running allocations have run to the hetgpu.ran it carries
// (job or group meta) and writes the sum into the group's meta: the group checkpoints, so when
// it starts again only the rest of its runtime is left (pendingJob). It reports the sum and
// whether the group was running.
func (b *Backend) addRan(job *api.Job, group string, now time.Time) (time.Duration, bool) {
	tg := findGroup(job, group)
	if tg == nil {
		return 0, false
	}
	ns, id := deref(job.Namespace, "default"), deref(job.ID, "")
	var start time.Time
	b.mu.Lock()
	for _, a := range b.allocs {
		if a.Namespace == ns && a.JobID == id && a.Group == group && !terminal(a) && a.ClientStatus == api.AllocClientStatusRunning &&
			!a.Start.IsZero() && (start.IsZero() || a.Start.Before(start)) {
			start = a.Start
		}
	}
	b.mu.Unlock()
	if start.IsZero() {
		return 0, false
	}
	before := time.Duration(0)
	if a, err := annot.Parse(job.Meta, tg.Meta, group); err == nil {
		before = a.Ran
	}
	ran := (before + max(now.Sub(start), 0)).Round(time.Second)
	if tg.Meta == nil {
		tg.Meta = map[string]string{}
	}
	tg.Meta[annot.KeyRan] = ran.String()
	return ran, true
}

// stopGroup stops the group's live allocations.
func (b *Backend) stopGroup(ctx context.Context, ns, id, group string) error {
	b.mu.Lock()
	var ids []string
	for _, a := range b.allocs {
		if a.Namespace == ns && a.JobID == id && a.Group == group && !terminal(a) {
			ids = append(ids, a.ID)
		}
	}
	b.mu.Unlock()
	sort.Strings(ids)
	q := (&api.QueryOptions{Namespace: ns}).WithContext(ctx)
	var errs []error
	for _, aid := range ids {
		if _, err := b.c.Allocations().Stop(&api.Allocation{ID: aid, Namespace: ns}, q); err != nil && statusCode(err) != 404 {
			errs = append(errs, fmt.Errorf("stop allocation %s: %w", aid, err))
		}
	}
	return errors.Join(errs...)
}
