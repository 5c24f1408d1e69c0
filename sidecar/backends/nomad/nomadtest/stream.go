package nomadtest

import (
	"context"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/hetgpu/hetgpu/internal/tick"
)

// What the real agent (Nomad 2.0) does on its event stream and status endpoint, as the
// sidecar's watchdog relies on: the stream sends a heartbeat frame ({}) every 30 s (measured
// by e2e/leader_test.go); a stream forwarded through a server that died sends nothing more;
// /v1/status/leader names the leader's RPC address, and answers 500 "No cluster leader"
// during an election.

// SetHeartbeat makes streams opened from now on send {} every d (0: never, the default).
func (s *Server) SetHeartbeat(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.heartbeat = d
}

// Stall makes every open stream stop sending, heartbeats included, without closing; false
// lets them go on.
func (s *Server) Stall(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stalled = on
	s.wake.Broadcast()
}

// SetLeader sets what /v1/status/leader answers (default "127.0.0.1:4647"); "" answers
// 500 "No cluster leader", as during an election.
func (s *Server) SetLeader(addr string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.leader, s.noLeader = addr, addr == ""
}

func (s *Server) statusLeader(w http.ResponseWriter) {
	s.mu.Lock()
	leader, none := s.leader, s.noLeader
	s.mu.Unlock()
	if none {
		http.Error(w, "No cluster leader", http.StatusInternalServerError)
		return
	}
	if leader == "" {
		leader = "127.0.0.1:4647"
	}
	s.reply(w, leader)
}

// beat tells the stream loop a heartbeat is due.
type beat struct{ pending atomic.Bool }

func (b *beat) due() bool { return b != nil && b.pending.Swap(false) }

// startHeartbeat ticks at the configured interval until ctx ends, waking the stream loop.
// Callers do not hold s.mu.
func (s *Server) startHeartbeat(ctx context.Context) *beat {
	s.mu.Lock()
	d := s.heartbeat
	s.mu.Unlock()
	if d <= 0 {
		return nil
	}
	b := &beat{}
	b.pending.Store(true) // Nomad sends one when the stream opens
	go tick.Every(ctx, d, func() {
		b.pending.Store(true)
		s.mu.Lock()
		s.wake.Broadcast()
		s.mu.Unlock()
	})
	return b
}
