package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hetgpu/hetgpu/driver/telemetry"
)

func TestToyTrainWritesMetricsTheDriverReads(t *testing.T) {
	metrics := filepath.Join(t.TempDir(), "m.jsonl")
	var out, errb bytes.Buffer
	code := run([]string{"-steps", "5", "-step-time", "1ms", "-batch", "32", "-log-every", "2", "-exit-code", "3", "-metrics", metrics}, &out, &errb)
	if code != 3 {
		t.Fatalf("exit = %d, stderr %s", code, errb.String())
	}
	lines, errs := telemetry.NewTail(metrics).Poll()
	if len(errs) != 0 || len(lines) != 5 {
		t.Fatalf("metrics: %d lines, errors %v", len(lines), errs)
	}
	for i, l := range lines {
		if !l.HasSamples || l.Samples != float64(32*(i+1)) || l.Time.IsZero() {
			t.Errorf("line %d = %+v", i, l)
		}
	}
	// The stdout progress lines match the regex documented for metrics.regex.
	x, err := telemetry.NewRegexExtractor(`throughput (?P<samples_per_sec>[0-9.]+) samples/s`)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(out.String(), "\n") {
		if _, ok := x.Extract([]byte(line)); ok {
			n++
		}
	}
	if n != 3 { // steps 2, 4 and the last
		t.Fatalf("%d progress lines matched, want 3:\n%s", n, out.String())
	}
}

func TestToyTrainRejectsBadFlags(t *testing.T) {
	for _, args := range [][]string{{"-batch", "0"}, {"-jitter", "2"}, {"-nope"}} {
		var out, errb bytes.Buffer
		if code := run(args, &out, &errb); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
}
