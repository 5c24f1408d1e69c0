package poll

import (
	"sync/atomic"
	"testing"
)

// Until returns once cond holds, having asked as many times as it took.
func TestUntilReturnsWhenCondHolds(t *testing.T) {
	for _, after := range []int32{1, 3} {
		var calls atomic.Int32
		Until(t, "the condition", func() bool { return calls.Add(1) >= after })
		if got := calls.Load(); got != after {
			t.Errorf("cond true at call %d: Until asked %d times", after, got)
		}
	}
}
