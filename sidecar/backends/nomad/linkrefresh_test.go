package nomad

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

// TestExplainLinkRefresh: a pinned job's signed explain link is signed again, in its ui link and
// its description, once it expires within the refresh window, and only then; the rewrite
// leaves the pin alone, and a stopped job is not rewritten.
func TestExplainLinkRefresh(t *testing.T) {
	now := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	signer := newSigner(t, strings.Repeat("k", 32), 24*time.Hour, clock)
	f := newFixture(t, func(c *Config) {
		c.SignExplain, c.ExplainRefresh, c.Now = signer.Query, 12*time.Hour, clock
	})
	f.srv.Register(heldJob("long", 2, 1, nil))
	f.srv.Register(heldJob("stopped", 1, 1, nil))
	f.resync(t)
	snap := f.snapshot(t)
	for _, j := range snap.Pending {
		node := "node-a100-00"
		if j.ID == "stopped" {
			node = "node-v100-00"
		}
		f.pin(t, snap, j, node)
	}
	stopped := f.srv.Job("default", "stopped")
	stopped.Stop = ptr(true)
	f.srv.Register(stopped)
	f.resync(t)
	first := f.srv.Job("default", "long")
	link := explainLink(first)
	// 2026-12-01 09:00 + 24 h, rounded up to the next UTC day.
	if exp, ok := linkExpiry(link); !ok || !exp.Equal(time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC)) || !strings.Contains(first.UI.Description, link) {
		t.Fatalf("pinned link %q (expiry %v), description %q", link, exp, first.UI.Description)
	}
	stoppedLink := explainLink(f.srv.Job("default", "stopped"))

	maintain := func() {
		t.Helper()
		if _, err := f.b.Maintain(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		name    string
		at      time.Time
		changed bool
	}{
		{"a day and more left", time.Date(2026, 12, 1, 23, 0, 0, 0, time.UTC), false},
		{"exactly the window left", time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC), true},
		{"just re-signed", time.Date(2026, 12, 2, 13, 0, 0, 0, time.UTC), false},
		{"the new link is within the window", time.Date(2026, 12, 3, 12, 30, 0, 0, time.UTC), true},
	} {
		t.Run(c.name, func(t *testing.T) {
			now = c.at
			before := f.srv.Job("default", "long")
			maintain()
			after := f.srv.Job("default", "long")
			if changed := *after.JobModifyIndex != *before.JobModifyIndex; changed != c.changed {
				t.Fatalf("job rewritten: %v, want %v (link %q)", changed, c.changed, explainLink(after))
			}
			if !c.changed {
				return
			}
			fresh := explainLink(after)
			u, err := url.Parse(fresh)
			if err != nil {
				t.Fatal(err)
			}
			q := u.Query()
			if err := signer.Verify("default", "long", q.Get("exp"), q.Get("sig")); err != nil {
				t.Errorf("re-signed link %q does not verify: %v", fresh, err)
			}
			if exp, _ := linkExpiry(fresh); exp.Sub(now) < 24*time.Hour {
				t.Errorf("re-signed link expires %v, less than the TTL after %v", exp, now)
			}
			if strings.Contains(after.UI.Description, explainLink(before)) || !strings.Contains(after.UI.Description, fresh) {
				t.Errorf("description still carries the old link: %q", after.UI.Description)
			}
			n1, d1, _ := PinOf(before.TaskGroups[0])
			n2, d2, _ := PinOf(after.TaskGroups[0])
			if strings.Join(n1, ",") != strings.Join(n2, ",") || strings.Join(d1, ",") != strings.Join(d2, ",") || groupHeld(after, after.TaskGroups[0]) {
				t.Errorf("the refresh changed the pin: %v %v -> %v %v", n1, d1, n2, d2)
			}
		})
	}
	if got := explainLink(f.srv.Job("default", "stopped")); got != stoppedLink {
		t.Errorf("the stopped job's link was rewritten: %q -> %q", stoppedLink, got)
	}
}

// BenchmarkRefreshLinksScan is the maintenance pass's look at 10,000 live jobs whose signed
// links are far from expiring: what every round pays under the backend lock.
func BenchmarkRefreshLinksScan(b *testing.B) {
	now := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	signer := newSigner(b, strings.Repeat("k", 32), 30*24*time.Hour, clock)
	f := newFixture(b, func(c *Config) {
		c.SignExplain, c.ExplainRefresh, c.Now = signer.Query, 15*24*time.Hour, clock
	})
	for i := range 10000 {
		job := heldJob(fmt.Sprintf("job-%05d", i), 1, 1, nil)
		job.UI = &api.JobUIConfig{Links: []*api.JobUILink{{Label: LinkLabel, URL: f.b.explainURL("default", *job.ID)}}}
		f.b.storeJob(job)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		f.b.refreshLinks(context.Background())
	}
}
