package nomad

import (
	"context"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/hetgpu/hetgpu/model/cluster"
)

// A signed explain link expires (explain_link_ttl, 30 days by default) and is written only
// when the sidecar rewrites a job's ui block: at a pin, a re-hold or a wait line. A job that
// runs or waits longer than the link lives would keep a link that no longer opens.
// refreshLinks re-signs such links once they expire within Config.ExplainRefresh: one job
// version each time, rewriting only the ui block (Nomad updates the job's allocations in place;
// nothing restarts). Links are rounded to a UTC day, so a job is rewritten at most once a day
// even with the shortest TTL.

// explainLink is the job's explain link as the ui block carries it, or "".
func explainLink(job *api.Job) string {
	if job.UI == nil {
		return ""
	}
	for _, l := range job.UI.Links {
		if l != nil && l.Label == LinkLabel {
			return l.URL
		}
	}
	return ""
}

// linkExpiry reads the exp parameter of a signed link (false: unsigned or unreadable).
func linkExpiry(link string) (time.Time, bool) {
	u, err := url.Parse(link)
	if err != nil {
		return time.Time{}, false
	}
	exp, err := strconv.ParseInt(u.Query().Get("exp"), 10, 64)
	if err != nil {
		return time.Time{}, false
	}
	return time.Unix(exp, 0), true
}

// staleLink reports whether the job carries a signed explain link that expires within the
// refresh window and whose re-signed form differs. Callers hold b.mu or own job.
func (b *Backend) staleLink(job *api.Job, now time.Time) (old, fresh string, ok bool) {
	old = explainLink(job)
	if old == "" {
		return "", "", false
	}
	exp, signed := linkExpiry(old)
	if !signed || exp.Sub(now) > b.cfg.ExplainRefresh {
		return "", "", false
	}
	fresh = b.explainURL(deref(job.Namespace, "default"), deref(job.ID, ""))
	return old, fresh, fresh != "" && fresh != old
}

// refreshLinks re-signs the explain links that expire within Config.ExplainRefresh in the
// jobs still live (see above). A failed write is retried at the next maintenance.
func (b *Backend) refreshLinks(ctx context.Context) {
	if b.cfg.SignExplain == nil || b.cfg.ExplainRefresh <= 0 {
		return
	}
	now := b.now()
	var todo [][2]string
	b.mu.Lock()
	for _, jr := range b.jobs {
		if jr.linkExp.IsZero() || jr.linkExp.Sub(now) > b.cfg.ExplainRefresh || jobStopped(jr.job) {
			continue
		}
		if _, _, ok := b.staleLink(jr.job, now); ok {
			todo = append(todo, [2]string{deref(jr.job.Namespace, "default"), deref(jr.job.ID, "")})
		}
	}
	b.mu.Unlock()
	if len(todo) == 0 {
		return
	}
	if err := cluster.FenceHeld(ctx, b.cfg.Fence); err != nil {
		return // not the leader: the leader refreshes
	}
	slices.SortFunc(todo, func(a, c [2]string) int {
		return strings.Compare(cluster.JobKey(a[0], a[1]), cluster.JobKey(c[0], c[1]))
	})
	for _, k := range todo {
		if ctx.Err() != nil {
			return
		}
		ns, id := k[0], k[1]
		key := cluster.JobKey(ns, id)
		job, _, err := b.c.Jobs().Info(id, (&api.QueryOptions{Namespace: ns}).WithContext(ctx))
		if err != nil {
			b.log.Debug("reading the job to refresh its explain link failed; retrying later", "job", key, "error", err)
			continue
		}
		old, fresh, ok := b.staleLink(job, now)
		if jobStopped(job) || !ok {
			continue
		}
		job.UI.Description = strings.ReplaceAll(job.UI.Description, old, fresh)
		for _, l := range job.UI.Links {
			if l != nil && l.Label == LinkLabel {
				l.URL = fresh
			}
		}
		if _, err := b.registerUI(ctx, ns, job); err != nil {
			b.log.Debug("refreshing the explain link failed; retrying later", "job", key, "error", err)
			continue
		}
		oldExp, _ := linkExpiry(old)
		newExp, _ := linkExpiry(fresh)
		b.log.Info("explain link re-signed before it expired", "job", key,
			"expired_at", oldExp.UTC().Format(time.RFC3339), "expires_at", newExp.UTC().Format(time.RFC3339))
	}
}
