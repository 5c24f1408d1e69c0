package report

import (
	"context"
	"fmt"
	"net/http"
	"strings"
)

// resolve finds the sidecar's URL when none is configured.
func (r *Reporter) resolve(ctx context.Context) (string, error) {
	if r.cfg.Addr != "" {
		return r.cfg.Addr, nil
	}
	addr, err := r.cfg.Resolve(ctx)
	if err != nil {
		return "", fmt.Errorf("find the sidecar: %w", err)
	}
	if !strings.HasPrefix(addr, "http://") && !strings.HasPrefix(addr, "https://") {
		return "", fmt.Errorf("find the sidecar: got %q, want an http:// or https:// URL", addr)
	}
	r.cfg.Logger.Debug("sidecar found", "address", addr)
	return strings.TrimRight(addr, "/"), nil
}

// forget drops a resolved address so the next delivery resolves again (a fixed Addr stays).
func (r *Reporter) forget() {
	if r.cfg.Resolve != nil && r.cfg.Addr == "" {
		r.addr = ""
	}
}

// maxRedirects bounds the redirects one delivery follows (a standby sends writers to the
// leader: one hop).
const maxRedirects = 3

// FollowRedirects returns a copy of c that follows a 307 or 308 (a standby sidecar sending a
// writer to the leader) with the body and the Authorization header re-sent. Go re-sends the
// body on 307/308 itself, but drops Authorization when the host changes; the token goes on
// only where the redirect does not downgrade https to http.
func FollowRedirects(c *http.Client) *http.Client {
	cp := *c
	cp.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		if len(via) >= maxRedirects {
			return fmt.Errorf("stopped after %d redirects", maxRedirects)
		}
		first := via[0]
		if auth := first.Header.Get("Authorization"); auth != "" && req.Header.Get("Authorization") == "" {
			if first.URL.Scheme == "https" && req.URL.Scheme != "https" {
				return fmt.Errorf("redirect from %s to %s would send the token without TLS", first.URL.Host, req.URL.Redacted())
			}
			req.Header.Set("Authorization", auth)
		}
		return nil
	}
	return &cp
}
