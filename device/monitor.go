package device

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/hashicorp/go-hclog"
	"google.golang.org/protobuf/proto"

	"github.com/hetgpu/hetgpu/internal/tick"
	"github.com/hetgpu/hetgpu/plugin/proto/device"
)

// monitor owns NVML: it enumerates GPUs every fingerprint period (sooner after a failure or an
// XID), keeps health, and publishes a fingerprint whenever set, health or attributes change.
// Fingerprint and Stats streams read from it; none of them ever talks to NVML on its own.
type monitor struct {
	logger  hclog.Logger
	lib     nvml.Interface
	period  time.Duration
	ignored map[string]bool
	enabled bool
	sharing *SharingConfig

	mu       sync.Mutex
	inv      *inventory
	xids     map[xidKey]string
	last     *device.FingerprintResponse
	version  uint64
	changed  chan struct{} // closed and replaced on every publish
	wake     chan struct{}
	watchers context.CancelFunc
	watched  []string // UUIDs the XID watcher registered
}

// retryMin is the first retry delay after NVML fails; it doubles up to the fingerprint period.
const retryMin = 200 * time.Millisecond

func newMonitor(lib nvml.Interface, cfg Config, logger hclog.Logger) *monitor {
	ignored := map[string]bool{}
	for _, id := range cfg.IgnoredGPUIDs {
		ignored[id] = true
	}
	return &monitor{logger: logger, lib: lib, period: cfg.FingerprintPeriod, ignored: ignored, enabled: cfg.Enabled, sharing: cfg.Sharing,
		xids: map[xidKey]string{}, changed: make(chan struct{}), wake: make(chan struct{}, 1)}
}

// run loops until ctx ends.
func (m *monitor) run(ctx context.Context) {
	if !m.enabled {
		m.logger.Info("plugin disabled by config; reporting no devices")
		m.publish(nil)
		<-ctx.Done()
		return
	}
	initialized := false
	defer func() {
		m.stopWatcher()
		if initialized {
			m.lib.Shutdown()
		}
	}()
	delay := retryMin
	for {
		var err error
		if !initialized {
			if r := m.lib.Init(); r != nvml.SUCCESS {
				err = &errNVML{"init", r}
			} else {
				initialized = true
				m.logger.Info("NVML initialised")
			}
		}
		if err == nil {
			err = m.refresh(ctx)
		} else {
			// Nomad waits for a first fingerprint; an empty one lets the node register.
			m.publish(nil)
		}
		wait := m.period
		if err != nil {
			// Durations as strings: the plugin logs JSON, where a Duration is a bare count of
			// nanoseconds that Nomad re-logs as a float ("1.6688645394e+10").
			m.logger.Error("GPU fingerprint failed; retrying", "error", err, "retry_in", delay.String())
			wait, delay = delay, min(2*delay, m.period)
		} else {
			delay = retryMin
		}
		if _, ok := tick.Sleep(ctx, wait, m.wake); !ok {
			return
		}
	}
}

// refresh enumerates, probes health, restarts the XID watcher if the GPU set changed, publishes.
func (m *monitor) refresh(ctx context.Context) error {
	m.mu.Lock()
	prev := m.inv
	m.mu.Unlock()
	inv, err := enumerate(m.lib, m.ignored, prev)
	if err != nil {
		if prev != nil {
			// Keep the last known devices, all unhealthy with the reason.
			stale := *prev
			stale.devices = nil
			for _, d := range prev.devices {
				c := *d
				c.fault = err.Error()
				stale.devices = append(stale.devices, &c)
			}
			m.publish(&stale)
		} else {
			m.publish(nil)
		}
		return err
	}
	probeHealth(inv)
	applySharing(inv, m.sharing)
	m.publish(inv)
	m.ensureWatcher(ctx, inv)
	return nil
}

// ensureWatcher (re)starts the XID watcher when the set of physical GPUs changed.
func (m *monitor) ensureWatcher(ctx context.Context, inv *inventory) {
	var uuids []string
	for _, g := range inv.physical {
		if g.handle != nil {
			uuids = append(uuids, g.uuid)
		}
	}
	m.mu.Lock()
	same := m.watchers != nil && slices.Equal(uuids, m.watched)
	m.mu.Unlock()
	if same {
		return
	}
	m.stopWatcher()
	wctx, cancel := context.WithCancel(ctx)
	m.mu.Lock()
	m.watchers, m.watched = cancel, uuids
	m.mu.Unlock()
	go watchXIDs(wctx, m.lib, inv.physical, m.logger, m.recordXID)
}

func (m *monitor) stopWatcher() {
	m.mu.Lock()
	cancel := m.watchers
	m.watchers = nil
	m.mu.Unlock()
	if cancel != nil {
		cancel()
	}
}

// recordXID marks a GPU (or one MIG instance) unhealthy until the plugin restarts: XIDs that take
// a GPU out of service need a GPU reset, which restarts the plugin's view anyway.
func (m *monitor) recordXID(e xidEvent) {
	m.mu.Lock()
	key := xidKey{e.uuid, e.gi}
	if _, seen := m.xids[key]; !seen {
		m.xids[key] = XIDDescription(e.xid)
	}
	inv := m.inv
	m.mu.Unlock()
	m.publish(inv)
}

// publish stores inv and, if the fingerprint differs from the last one sent, wakes the streams.
func (m *monitor) publish(inv *inventory) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.inv = inv
	groups, errs := inv.groups(func(d *instance) string { return healthOf(d, m.xids) })
	for _, err := range errs {
		m.logger.Error("device group left out of the fingerprint: Nomad would reject it", "error", err)
	}
	resp := &device.FingerprintResponse{DeviceGroup: groups}
	if m.last != nil && proto.Equal(resp, m.last) {
		return
	}
	m.last = resp
	m.version++
	close(m.changed)
	m.changed = make(chan struct{})
}

// current returns the latest fingerprint (nil before the first), its version and a channel
// closed at the next change.
func (m *monitor) current() (*device.FingerprintResponse, uint64, <-chan struct{}) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.last, m.version, m.changed
}

// inventory returns the latest enumeration (nil before the first).
func (m *monitor) inventory() *inventory {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.inv
}
