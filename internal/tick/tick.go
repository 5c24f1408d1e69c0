// Package tick runs a function on a fixed period until its context ends, so that the
// background loops of the driver and the sidecar share one ticker-and-select loop.
package tick

import (
	"context"
	"time"
)

// Every calls fn once a period, the first time one period after the call, until ctx ends.
// It blocks; callers run it in their own goroutine. A period of zero or less is an error of
// the caller's config and panics in time.NewTicker, so callers default it first.
func Every(ctx context.Context, period time.Duration, fn func()) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		// A tick and the end of ctx can both be ready; the select picks at random, so check
		// again rather than run fn after the caller asked to stop.
		if ctx.Err() != nil {
			return
		}
		fn()
	}
}

// Sleep waits d, or less when wake has a value first (woken; a nil wake never has one). It
// reports false, at once, when ctx ends first.
func Sleep(ctx context.Context, d time.Duration, wake <-chan struct{}) (woken, ok bool) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false, false
	case <-wake:
		return true, true
	case <-t.C:
		return false, true
	}
}
