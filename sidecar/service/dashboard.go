package service

import (
	"context"

	"github.com/hetgpu/hetgpu/sidecar/cluster"
)

// LastSnapshot returns the snapshot the last round decided on; nil before the first round.
// Callers must not modify it.
func (s *Service) LastSnapshot() *cluster.Snapshot {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.lastSnap
}

// DeviceStats returns the backend's live device readings by instance ID when the backend
// reports them (cluster.DeviceStatsReader), and nil otherwise.
func (s *Service) DeviceStats(ctx context.Context) (map[string]cluster.DeviceStats, error) {
	r, ok := s.backend.(cluster.DeviceStatsReader)
	if !ok {
		return nil, nil
	}
	return r.DeviceStats(ctx)
}

// BackendName is the backend's name ("nomad", "simulated").
func (s *Service) BackendName() string { return s.cfg.BackendName }
