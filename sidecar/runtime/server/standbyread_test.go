package server_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"
)

// A standby's /v1/queue and /v1/decisions carry role, leader and stale_since (its last
// round as leader, null when it never led) and X-Hetgpu-Leader; the leader's carry none.
func TestStandbyReadsMarkedStale(t *testing.T) {
	const leaderURL = "http://10.0.0.7:4656"
	for _, tc := range []struct {
		name       string
		ledBefore  bool
		leadsNow   bool
		wantMarked bool
		wantSince  bool
	}{
		{"leader", true, true, false, false},
		{"standby that led", true, false, true, true},
		{"standby that never led", false, false, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, l, srv := replica(t)
			before := time.Now()
			if tc.ledBefore {
				l.Set(true, srv.URL)
				h.Round()
			}
			if tc.leadsNow {
				l.Set(true, srv.URL)
			} else {
				l.Set(false, leaderURL)
			}
			for _, path := range []string{"/v1/queue", "/v1/decisions"} {
				resp, err := http.Get(srv.URL + path)
				if err != nil {
					t.Fatal(err)
				}
				var body map[string]any
				err = json.NewDecoder(resp.Body).Decode(&body)
				resp.Body.Close()
				if err != nil || resp.StatusCode != http.StatusOK {
					t.Fatalf("GET %s = %d, %v", path, resp.StatusCode, err)
				}
				if path == "/v1/queue" && body["jobs"] == nil || path == "/v1/decisions" && body["decisions"] == nil {
					t.Fatalf("GET %s lost its content: %v", path, body)
				}
				_, marked := body["role"]
				if marked != tc.wantMarked {
					t.Fatalf("GET %s marked: %v, want %v (%v)", path, marked, tc.wantMarked, body)
				}
				if got := resp.Header.Get("X-Hetgpu-Leader"); (got == leaderURL) != tc.wantMarked {
					t.Fatalf("GET %s X-Hetgpu-Leader = %q", path, got)
				}
				if !marked {
					continue
				}
				if body["role"] != "standby" || body["leader"] != leaderURL {
					t.Fatalf("GET %s role %v leader %v; want standby, %s", path, body["role"], body["leader"], leaderURL)
				}
				since, _ := body["stale_since"].(string)
				if (since != "") != tc.wantSince {
					t.Fatalf("GET %s stale_since = %v, want set: %v", path, body["stale_since"], tc.wantSince)
				}
				if since != "" {
					ts, err := time.Parse(time.RFC3339Nano, since)
					if err != nil || ts.Before(before) || ts.After(time.Now()) {
						t.Fatalf("GET %s stale_since = %q (%v): want the last round's time, after %s", path, since, err, before)
					}
				}
			}
		})
	}
}
