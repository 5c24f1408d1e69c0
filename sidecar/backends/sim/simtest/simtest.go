// Package simtest loads the simulator's clusters and traces for tests: the LoadSpec and
// trace.Load steps (with sim.TraceOptions over the shared bundled throughput table) that
// simulated tests and benchmarks begin with, an error failing the test.
package simtest

import (
	"testing"

	"github.com/hetgpu/hetgpu/model/throughput/throughputtest"
	"github.com/hetgpu/hetgpu/model/trace"
	"github.com/hetgpu/hetgpu/sidecar/backends/sim"
)

// Spec is sim.LoadSpec(ref); an error fails the test.
func Spec(tb testing.TB, ref string) *sim.Spec {
	tb.Helper()
	s, err := sim.LoadSpec(ref)
	if err != nil {
		tb.Fatalf("sim.LoadSpec(%q): %v", ref, err)
	}
	return s
}

// Trace is trace.Load(ref) with sim.TraceOptions over the shared bundled throughput table
// (throughputtest.Bundled) and seed; an error fails the test.
func Trace(tb testing.TB, ref string, seed uint64) *trace.Trace {
	tb.Helper()
	tr, err := trace.Load(ref, sim.TraceOptions(throughputtest.Bundled(tb), seed))
	if err != nil {
		tb.Fatalf("trace.Load(%q): %v", ref, err)
	}
	return tr
}
