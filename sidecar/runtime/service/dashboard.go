package service

import (
	"context"

	"github.com/hetgpu/hetgpu/model/cluster"
)

// LastSnapshot returns the snapshot the last round decided on; nil before the first round.
// Callers must not modify it.
func (s *Service) LastSnapshot() *cluster.Snapshot {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.lastSnap
}

// FleetSnapshot is LastSnapshot with the GPUs the last round pinned counted as held (by
// allocations with IDs "pinned:<job key>"), as the cluster stands once the round's pins are
// placed: what a view of the fleet should show. Callers must not modify it.
func (s *Service) FleetSnapshot() *cluster.Snapshot {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.lastSnap == nil || len(s.lastPinned) == 0 {
		return s.lastSnap
	}
	cp := *s.lastSnap
	cp.Running = append([]cluster.Alloc(nil), s.lastSnap.Running...)
	for _, d := range s.lastPinned {
		for _, a := range d.Assign {
			cp.Running = append(cp.Running, cluster.Alloc{ID: "pinned:" + d.JobKey(), Namespace: d.Namespace, JobID: d.JobID,
				Group: d.Group, NodeID: a.NodeID, DeviceIDs: a.InstanceIDs, GPUType: d.GPUType, Shared: d.Shared, StartTime: cp.Now})
		}
	}
	return &cp
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

// Ranker is the ranking policy in use and why (Config.Ranker); ok is false when the service
// was given none.
func (s *Service) Ranker() (rs RankerStatus, ok bool) {
	if s.cfg.Ranker == nil {
		return RankerStatus{}, false
	}
	return s.cfg.Ranker(), true
}
