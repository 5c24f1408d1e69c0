// Package throughputtest gives tests the bundled throughput table, parsed once per test
// binary: the tests that read it (and never change it) share one copy instead of paying
// for the parse in every test.
package throughputtest

import (
	"sync"
	"testing"

	"github.com/hetgpu/hetgpu/model/throughput"
)

var bundled = sync.OnceValues(throughput.Bundled)

// Bundled is throughput.Bundled's table, shared by every caller of the test binary; callers
// must not change it. An error fails the test.
func Bundled(t testing.TB) *throughput.Table {
	t.Helper()
	tab, err := bundled()
	if err != nil {
		t.Fatalf("throughput.Bundled: %v", err)
	}
	return tab
}
