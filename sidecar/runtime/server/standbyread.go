package server

import (
	"net/http"
	"time"
)

// staleMark is added to a standby's /v1/queue and /v1/decisions: they show what this
// replica decided while it last led, not the leader's current state. Reads are answered
// here rather than redirected so that a reader holding only a standby's address (a
// dashboard, curl) sees something, and can tell it is stale.
type staleMark struct {
	Role   string `json:"role"`
	Leader string `json:"leader"`
	// StaleSince is the time of this replica's last round; null when it never led.
	StaleSince *time.Time `json:"stale_since"`
}

// standbyRead is the mark for a read on a standby (nil on the leader or a single sidecar);
// it also names the leader in X-Hetgpu-Leader, as a redirect does.
func standbyRead(w http.ResponseWriter, svc Service) *staleMark {
	standby, leader := svc.Standby()
	if !standby {
		return nil
	}
	m := &staleMark{Role: "standby", Leader: leader}
	if t := svc.LastRound(); !t.IsZero() {
		m.StaleSince = &t
	}
	if leader != "" {
		w.Header().Set("X-Hetgpu-Leader", leader)
	}
	return m
}
