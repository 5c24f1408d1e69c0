package driver

import (
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/hetgpu/hetgpu/plugin/proto/drivers"
)

// eventBus fans task events out to the TaskEvents streams (Nomad keeps one open). A slow
// subscriber loses events rather than stalling a task. Events published while nobody
// listens (RecoverTask runs before a restarted client opens its stream) wait for the next
// subscriber.
type eventBus struct {
	mu      sync.Mutex
	subs    map[chan *drivers.DriverTaskEvent]struct{}
	pending []*drivers.DriverTaskEvent
}

// maxPendingEvents bounds what waits for a subscriber.
const maxPendingEvents = 128

func newEventBus() *eventBus {
	return &eventBus{subs: map[chan *drivers.DriverTaskEvent]struct{}{}}
}

func (b *eventBus) subscribe() (<-chan *drivers.DriverTaskEvent, func()) {
	ch := make(chan *drivers.DriverTaskEvent, maxPendingEvents)
	b.mu.Lock()
	b.subs[ch] = struct{}{}
	for _, ev := range b.pending {
		ch <- ev
	}
	b.pending = nil
	b.mu.Unlock()
	return ch, func() {
		b.mu.Lock()
		delete(b.subs, ch)
		b.mu.Unlock()
	}
}

func (b *eventBus) publish(ev *drivers.DriverTaskEvent) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.subs) == 0 {
		if len(b.pending) == maxPendingEvents {
			b.pending = b.pending[1:]
		}
		b.pending = append(b.pending, ev)
		return
	}
	for ch := range b.subs {
		select {
		case ch <- ev:
		default:
		}
	}
}

// taskEvent builds the event Nomad shows as a "Driver" task event.
func taskEvent(cfg *drivers.TaskConfig, msg string, ann map[string]string) *drivers.DriverTaskEvent {
	return &drivers.DriverTaskEvent{
		TaskId:      cfg.GetId(),
		AllocId:     cfg.GetAllocId(),
		TaskName:    cfg.GetName(),
		Timestamp:   timestamppb.New(time.Now()),
		Message:     msg,
		Annotations: ann,
	}
}
