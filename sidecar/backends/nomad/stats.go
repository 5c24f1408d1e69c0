package nomad

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/nomad/api"
	"golang.org/x/sync/errgroup"

	"github.com/hetgpu/hetgpu/model/cluster"
)

// DeviceStats reads every GPU's live readings from the device stats of the ready nodes
// (cluster.DeviceStatsReader): the hetgpu device plugin's power_draw, power_limit,
// gpu_utilization, memory and temperature, or the NVIDIA plugin's "Power usage", "GPU
// utilization", "Memory state" and "Temperature". A node that does not answer is left out;
// the readings of the others are still returned.
func (b *Backend) DeviceStats(ctx context.Context) (map[string]cluster.DeviceStats, error) {
	b.mu.Lock()
	var ids []string
	for id, n := range b.nodes {
		if n.node.Status == api.NodeStatusReady && len(n.node.Devices) > 0 {
			ids = append(ids, id)
		}
	}
	b.mu.Unlock()
	var mu sync.Mutex
	out := map[string]cluster.DeviceStats{}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(b.cfg.StatsParallel)
	for _, id := range ids {
		g.Go(func() error {
			hs, err := b.c.Nodes().Stats(id, (&api.QueryOptions{}).WithContext(gctx))
			if err != nil {
				b.log.Debug("node device stats unavailable", "node", id, "error", err)
				return nil
			}
			mu.Lock()
			defer mu.Unlock()
			eachInstance(hs, func(inst string, st *api.DeviceStats) {
				if st.Stats != nil {
					out[inst] = readings(st.Stats, st.Timestamp)
				}
			})
			return nil
		})
	}
	_ = g.Wait()
	return out, ctx.Err()
}

// eachInstance calls fn for every device instance a node reports stats for, skipping the
// nil groups and instances the API may hold.
func eachInstance(hs *api.HostStats, fn func(id string, st *api.DeviceStats)) {
	for _, g := range hs.DeviceStats {
		if g == nil {
			continue
		}
		for id, st := range g.InstanceStats {
			if st != nil {
				fn(id, st)
			}
		}
	}
}

// readings picks the known readings out of an instance's stats (names matched
// case-insensitively with spaces as underscores; "N/A" and missing values stay nil).
func readings(s *api.StatObject, at time.Time) cluster.DeviceStats {
	ds := cluster.DeviceStats{Time: at}
	for k, v := range s.Attributes {
		if v == nil {
			continue
		}
		f, ok := statNumber(v)
		if !ok {
			continue
		}
		val := f
		switch strings.ReplaceAll(strings.ToLower(k), " ", "_") {
		case "power_draw", "power_usage", "power", "power_w":
			switch strings.ToLower(v.Unit) {
			case "mw":
				val /= 1000
			case "kw":
				val *= 1000
			}
			ds.PowerW = &val
		case "power_limit":
			ds.PowerLimitW = &val
		case "gpu_utilization", "utilization":
			ds.UtilPct = &val
		case "memory", "memory_state":
			ds.MemUsedMiB = &val
			if d, ok := statDenominator(v); ok {
				ds.MemTotalMiB = &d
			}
		case "temperature":
			ds.TempC = &val
		}
	}
	return ds
}

func statDenominator(v *api.StatValue) (float64, bool) {
	switch {
	case v.FloatDenominatorVal != nil:
		return *v.FloatDenominatorVal, true
	case v.IntDenominatorVal != nil:
		return float64(*v.IntDenominatorVal), true
	}
	return 0, false
}

var _ cluster.DeviceStatsReader = (*Backend)(nil)
