package nomad

import (
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hetgpu/hetgpu/sidecar/runtime/explainlink"
)

// newSigner is an explain-link signer with the secret, its links lasting ttl (0: the default),
// on clock.
func newSigner(t testing.TB, secret string, ttl time.Duration, clock func() time.Time) *explainlink.Signer {
	t.Helper()
	s, err := explainlink.New([]byte(secret), ttl, clock)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// With a signer configured, the link in the job's ui block and the group line's [why] link
// are signed for that job, and verify; the same pin written again that day gives the same
// link.
func TestPinWritesSignedExplainLink(t *testing.T) {
	now := time.Date(2026, 3, 10, 15, 0, 0, 0, time.UTC)
	signer := newSigner(t, "0123456789abcdef0123456789abcdef", 0, func() time.Time { return now })
	f := newFixture(t, func(c *Config) { c.SignExplain = signer.Query })
	f.srv.Register(heldJob("resnet", 2, 1, nil))
	f.resync(t)
	snap := f.snapshot(t)
	f.pin(t, snap, snap.Pending[0], "node-a100-00")
	job := f.srv.Job("default", "resnet")
	link := job.UI.Links[0].URL
	why := regexp.MustCompile(`\[why\]\(([^)]*)\)`).FindStringSubmatch(job.UI.Description)
	if why == nil || why[1] != link {
		t.Fatalf("group line's [why] link %v, ui link %q: want the same signed link", why, link)
	}
	u, err := url.Parse(link)
	if err != nil || u.Host != "sidecar:4656" || u.Path != "/v1/jobs/default/resnet/explain" || u.Query().Get("format") != "html" {
		t.Fatalf("link %q", link)
	}
	q := u.Query()
	if err := signer.Verify("default", "resnet", q.Get("exp"), q.Get("sig")); err != nil {
		t.Errorf("the written link does not verify: %v", err)
	}
	if err := signer.Verify("default", "other", q.Get("exp"), q.Get("sig")); err == nil {
		t.Error("the link opens another job")
	}
	if want := "http://sidecar:4656/v1/jobs/default/resnet/explain?format=html&" + signer.Query("default", "resnet"); link != want || !strings.Contains(link, "exp=1775779200") {
		t.Errorf("link %q, want %q (expiry 10 April 00:00 UTC: 30 days ahead, rounded up to midnight)", link, want)
	}
}
