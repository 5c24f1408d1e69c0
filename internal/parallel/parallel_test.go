package parallel

import (
	"sync/atomic"
	"testing"
)

func TestForRunsEveryIndexOnceWithinTheLimit(t *testing.T) {
	for _, workers := range []int{0, 1, 3, 64} {
		const n = 200
		var seen [n]atomic.Int32
		var running, peak atomic.Int32
		For(n, workers, func(i int) {
			r := running.Add(1)
			for {
				p := peak.Load()
				if r <= p || peak.CompareAndSwap(p, r) {
					break
				}
			}
			seen[i].Add(1)
			running.Add(-1)
		})
		for i := range seen {
			if seen[i].Load() != 1 {
				t.Fatalf("workers %d: index %d ran %d times", workers, i, seen[i].Load())
			}
		}
		if limit := int32(max(1, workers)); peak.Load() > limit {
			t.Fatalf("workers %d: %d ran at once, limit %d", workers, peak.Load(), limit)
		}
	}
}
