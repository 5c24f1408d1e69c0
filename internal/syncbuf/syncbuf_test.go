package syncbuf

import (
	"strings"
	"sync"
	"testing"
)

func TestConcurrentWritesAllKept(t *testing.T) {
	cases := []struct {
		writers, each int
	}{{1, 1}, {8, 100}}
	for _, c := range cases {
		var b Buffer
		var wg sync.WaitGroup
		for range c.writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range c.each {
					_, _ = b.Write([]byte("x\n"))
				}
			}()
		}
		wg.Wait()
		if got := strings.Count(b.String(), "x\n"); got != c.writers*c.each {
			t.Errorf("%d writers x %d: %d lines kept, want %d", c.writers, c.each, got, c.writers*c.each)
		}
	}
}
