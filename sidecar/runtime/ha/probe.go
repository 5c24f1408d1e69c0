package ha

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"syscall"
)

// leaderAlive probes the leader's GET /v1/health. Only proof that its process is gone
// counts as dead: the connection is refused (nothing listens at its address) or another replica
// answers there (the leader restarted). A timeout or any other failure
// counts as alive: a leader cut off from this standby but not from Nomad keeps its lock
// until Nomad's TTL frees it.
func (e *Elector) leaderAlive(ctx context.Context, h Holder) bool {
	if u, err := url.Parse(h.Address); err != nil || u.Hostname() == "" || net.ParseIP(u.Hostname()).IsUnspecified() {
		// 0.0.0.0 would reach this host, not the leader's: no evidence either way.
		return true
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(h.Address, "/")+"/v1/health", nil)
	if err != nil {
		return true
	}
	resp, err := e.cfg.Probe.Do(req)
	if err != nil {
		return !errors.Is(err, syscall.ECONNREFUSED)
	}
	defer resp.Body.Close()
	var hl struct {
		Role   string `json:"role"`
		ID     string `json:"replica_id"`
		Status string `json:"status"`
	}
	if resp.StatusCode != http.StatusOK || json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&hl) != nil {
		return true
	}
	if hl.ID != "" {
		// The leader's own process answers (it may still be loading the shared state); an
		// address that reaches this replica itself proves nothing.
		return hl.ID == h.ID || hl.ID == e.cfg.ID
	}
	return hl.Role == "" || hl.Role == RoleLeader
}
