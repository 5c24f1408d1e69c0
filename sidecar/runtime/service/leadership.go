package service

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hetgpu/hetgpu/model/cluster"
)

// Leadership is this replica's part in a group of sidecar replicas (sidecar/runtime/ha): only the
// leader runs rounds (pins, re-holds, preemptions), learns and tunes; every replica watches
// the cluster and answers reads.
type Leadership interface {
	// Held is the fence: nil while this replica leads and its lease is current.
	cluster.Fence
	// Role is "leader" or "standby" and who leads (an address, else an id; "" unknown).
	Role() (role, leader string)
	// ID names this replica.
	ID() string
}

// ErrStandby is a write refused by a replica that does not lead; the API sends the writer
// to the leader.
var ErrStandby = errors.New("this sidecar replica is a standby")

// leading reports whether this replica may run a round, learn or tune now.
func (s *Service) leading(ctx context.Context) bool {
	return s.cfg.Leadership == nil || s.cfg.Leadership.Held(ctx) == nil
}

// Standby reports whether writes go to another replica, and its address ("" unknown).
func (s *Service) Standby() (standby bool, leader string) {
	if s.cfg.Leadership == nil {
		return false, ""
	}
	role, leader := s.cfg.Leadership.Role()
	return role != "leader", leader
}

// CatchUp learns the stored runs the learner lacks (after a new leader loaded the shared
// runs into its store); each is learned once.
func (s *Service) CatchUp(ctx context.Context) error { return s.catchUp(ctx) }

// beforeStore refuses a write on a replica that does not lead.
func (s *Service) beforeStore(ctx context.Context) error {
	if s.cfg.Leadership == nil {
		return nil
	}
	if err := s.cfg.Leadership.Held(ctx); err != nil {
		_, leader := s.cfg.Leadership.Role()
		return fmt.Errorf("%w (leader: %q): %w", ErrStandby, leader, err)
	}
	return nil
}

// share copies the stored runs to the shared state (HA) before a write is acknowledged.
func (s *Service) share(ctx context.Context) error {
	if s.cfg.Share == nil {
		return nil
	}
	if err := s.cfg.Share(ctx); err != nil {
		if s.cfg.Leadership != nil && s.cfg.Leadership.Held(ctx) != nil {
			// Leadership ended meanwhile: the writer retries at the new leader (503).
			return fmt.Errorf("%w: share the stored runs: %w", ErrStandby, err)
		}
		return fmt.Errorf("share the stored runs with the other replicas: %w", err)
	}
	return nil
}

// noteLeading records when this replica started leading; it returns leads.
func (s *Service) noteLeading(leads bool) bool {
	if s.cfg.Leadership == nil {
		return leads
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case !leads:
		s.leadSince = time.Time{}
	case s.leadSince.IsZero():
		s.leadSince = s.cfg.Now()
	}
	return leads
}

// role fills the health's replica fields: a standby runs no rounds, so it is not stale; a
// leader's rounds count from since, when it took over (zero for one replica).
func (s *Service) role(h *Health) (standby bool, since time.Time) {
	if s.cfg.Leadership == nil {
		h.Role = "single"
		return false, time.Time{}
	}
	h.Role, h.Leader = s.cfg.Leadership.Role()
	h.ReplicaID = s.cfg.Leadership.ID()
	s.mu.RLock()
	since = s.leadSince
	s.mu.RUnlock()
	if h.Role == "leader" && since.IsZero() {
		// Leading, but the loop has not noticed yet.
		since = s.cfg.Now()
	}
	return h.Role != "leader", since
}

// LastRound is when this replica last ran a round (zero: never); on a standby it is when its
// queue and decisions stopped being current.
func (s *Service) LastRound() time.Time {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.lastRound
}
