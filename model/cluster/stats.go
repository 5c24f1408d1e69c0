package cluster

import (
	"context"
	"time"
)

// DeviceStats are the live readings of one GPU instance. A nil field was not reported (the
// backend has no such reading, or the device's query failed): it is shown as missing, never
// as zero.
type DeviceStats struct {
	PowerW      *float64 `json:"power_w,omitempty"`
	PowerLimitW *float64 `json:"power_limit_w,omitempty"`
	// UtilPct is the GPU's compute utilisation in percent.
	UtilPct     *float64 `json:"utilization_pct,omitempty"`
	MemUsedMiB  *float64 `json:"memory_used_mib,omitempty"`
	MemTotalMiB *float64 `json:"memory_total_mib,omitempty"`
	TempC       *float64 `json:"temperature_c,omitempty"`
	// Time is when the readings were taken (the backend's clock).
	Time time.Time `json:"time,omitzero"`
}

// DeviceStatsReader is a backend that can report live device readings, keyed by instance ID.
// It is optional: the scheduling pipeline never needs it; the dashboard shows what it gives.
type DeviceStatsReader interface {
	DeviceStats(ctx context.Context) (map[string]DeviceStats, error)
}
