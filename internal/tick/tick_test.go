package tick

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

func TestEvery(t *testing.T) {
	cases := []struct {
		name    string
		cancel  bool // cancel before the first tick
		atLeast int32
	}{
		{name: "runs until cancelled", atLeast: 3},
		{name: "cancelled before the first tick runs nothing", cancel: true, atLeast: 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			var n atomic.Int32
			done := make(chan struct{})
			if c.cancel {
				cancel()
			}
			go func() {
				defer close(done)
				Every(ctx, time.Millisecond, func() {
					if n.Add(1) >= c.atLeast && c.atLeast > 0 {
						cancel()
					}
				})
			}()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("Every did not return after its context ended")
			}
			cancel()
			if got := n.Load(); got < c.atLeast || (c.cancel && got != 0) {
				t.Fatalf("fn ran %d times, want at least %d (cancelled first: %v)", got, c.atLeast, c.cancel)
			}
			if got := n.Load(); !c.cancel && got != c.atLeast {
				t.Fatalf("fn ran %d times after cancel at %d", got, c.atLeast)
			}
		})
	}
}
