package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
)

func TestPlaceBench(t *testing.T) {
	var out, errb bytes.Buffer
	args := []string{"place", "bench", "--jobs", "12", "--gpus", "32", "--types", "2", "--seed", "3", "--rounds", "2", "--json"}
	if code := run(context.Background(), args, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var res map[string]any
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, out.String())
	}
	for _, k := range []string{"p50_ms", "p99_ms", "fallbacks", "deadline_hits", "objective", "greedy_objective", "vs_greedy_pct", "warm_ms", "phase_ms", "gap"} {
		if _, ok := res[k]; !ok {
			t.Errorf("JSON lacks %q: %s", k, out.String())
		}
	}
	if res["placed"].(float64) <= 0 {
		t.Errorf("nothing placed: %s", out.String())
	}
	// A deadline that has always passed is counted, and --compare-full reports the loss.
	out.Reset()
	cut := append(append([]string(nil), args...), "--round-deadline", "1ns", "--compare-full", "--warm=false")
	if code := run(context.Background(), cut, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	res = nil
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, out.String())
	}
	if _, ok := res["full_objective"]; !ok || res["warm_ms"].(float64) != 0 {
		t.Errorf("--compare-full --warm=false: %s", out.String())
	}
	out.Reset()
	if code := run(context.Background(), args[:len(args)-1], &out, &errb); code != 0 || !strings.Contains(out.String(), "decision time") {
		t.Fatalf("table output: exit %d, %s", code, out.String())
	}
	for _, bad := range [][]string{
		{"place"},
		{"place", "solve"},
		{"place", "bench", "--gpus", "12"},
		{"place", "bench", "--types", "0"},
		{"place", "bench", "--preset", "slurm"},
		{"place", "bench", "--rounds", "0"},
		{"place", "bench", "extra"},
		{"place", "bench", "--round-deadline", "-1ms"},
	} {
		errb.Reset()
		if code := run(context.Background(), bad, &out, &errb); code != 2 {
			t.Errorf("run(%q) = %d, want usage error 2 (stderr %q)", bad, code, errb.String())
		}
	}
}
