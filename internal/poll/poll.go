// Package poll waits in tests for a condition that another goroutine makes true (a leader
// elected, an event streamed), instead of sleeping a fixed time.
package poll

import (
	"testing"
	"time"
)

// Timeout is how long Until waits: generous, since a loaded CI machine is slow, and only a
// failing test waits that long.
const Timeout = 10 * time.Second

// Until checks cond every few milliseconds and fails the test, naming what it waited for,
// if cond is still false after Timeout.
func Until(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(Timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
