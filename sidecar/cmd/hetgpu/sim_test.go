package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hetgpu/hetgpu/sidecar/backends/sim"
)

func TestSimJSONAndReport(t *testing.T) {
	dir := t.TempDir()
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"sim", "--cluster", "gavel-108", "--trace", "synthetic:jobs=60,rate=4",
		"--policies", "fifo,sjf", "--seed", "3", "--json", "--out", dir}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var rs []map[string]any
	if err := json.Unmarshal(out.Bytes(), &rs); err != nil {
		t.Fatalf("stdout is not a JSON array: %v\n%s", err, out.String())
	}
	if len(rs) != 2 || rs[0]["policy"] != "fifo" || rs[1]["policy"] != "sjf" {
		t.Fatalf("results %v", rs)
	}
	for _, k := range []string{"policy", "jobs", "avg_jct_s", "p99_jct_s", "avg_queue_s", "makespan_s", "gpu_util", "energy_kwh", "decision_p99_ms"} {
		if _, ok := rs[0][k]; !ok {
			t.Errorf("JSON lacks key %s", k)
		}
	}
	if rs[0]["jobs"].(float64) != 60 {
		t.Errorf("jobs = %v, want 60", rs[0]["jobs"])
	}
	if !strings.Contains(errb.String(), filepath.Join(dir, "index.html")) {
		t.Errorf("stderr does not say where the report is: %q", errb.String())
	}
	for _, f := range []string{"index.html", "results.csv", "jct_cdf.png", "energy.png"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Error(err)
		}
	}
}

func TestSimTable(t *testing.T) {
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"sim", "--cluster", "modern-mix", "--trace", "synthetic:jobs=30,rate=4", "--policies", "fifo"}, &out, &errb)
	if code != 0 || !strings.Contains(out.String(), "avg JCT h") || !strings.Contains(out.String(), "fifo") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out.String(), errb.String())
	}
}

func TestSimUsageErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"sim", "--policies", "nope"}, 2, `unknown policy "nope"`},
		{[]string{"sim", "extra"}, 2, `unexpected argument "extra"`},
		{[]string{"sim", "--restart-penalty", "-1"}, 2, "--restart-penalty"},
		{[]string{"sim", "--estimates", "exact"}, 2, `--estimates = "exact", expected scaled, live, live:SIGMA, live:auto, live:auto:SIGMA (SIGMA from 0 to 3), none or partial:F`},
		{[]string{"sim", "--estimates", "live:auto:7"}, 2, `--estimates = "live:auto:7"`},
		{[]string{"sim", "--estimates", "live:auto:"}, 2, `--estimates = "live:auto:"`},
		{[]string{"sim", "--estimate-skew", "0"}, 2, `--estimate-skew = 0, expected a factor from 0.05 to 20`},
		{[]string{"sim", "--estimate-skew", "25"}, 2, `--estimate-skew = 25`},
		{[]string{"sim", "--estimate-skew-spread", "-1"}, 2, `--estimate-skew-spread = -1, expected 0 to 3`},
		{[]string{"sim", "--estimates", "live:9"}, 2, `--estimates = "live:9"`},
		{[]string{"sim", "--estimates", "live:-0.5"}, 2, `--estimates = "live:-0.5"`},
		{[]string{"sim", "--estimates", "scaled:0.5"}, 2, `--estimates = "scaled:0.5"`},
		{[]string{"sim", "--cluster", "mars", "--policies", "fifo"}, 1, `cluster "mars"`},
		{[]string{"sim", "--trace", "synthetic:jobs=5", "--policies", "fifo"}, 1, "key rate is missing"},
	} {
		var out, errb bytes.Buffer
		code := run(context.Background(), c.args, &out, &errb)
		if code != c.code || !strings.Contains(errb.String(), c.want) {
			t.Errorf("run(%q) = %d, stderr %q; want %d and %q", c.args, code, errb.String(), c.code, c.want)
		}
	}
}

// Absurd flag values are refused naming the flag; an empty trace is an error; unknown job
// types are named under the table.
func TestSimRefusesAbsurdInput(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty.txt")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"sim", "--restart-penalty", "NaN"}, 2, "--restart-penalty = NaN"},
		{[]string{"sim", "--restart-penalty", "Inf"}, 2, "--restart-penalty = +Inf"},
		{[]string{"sim", "--restart-penalty", "1e9"}, 2, "expected seconds from 0 to 86400"},
		{[]string{"sim", "--parallel", "-3"}, 2, "--parallel = -3"},
		{[]string{"sim", "--cluster", "modern-mix:scale=1e6", "--policies", "fifo"}, 2, "64000000 GPUs would need about"},
		{[]string{"sim", "--cluster", "modern-mix:scale=NaN"}, 1, "--cluster: cluster modern-mix: scale = NaN"},
		{[]string{"sim", "--trace", empty, "--policies", "fifo"}, 1, "holds no jobs"},
	} {
		var out, errb bytes.Buffer
		code := run(context.Background(), c.args, &out, &errb)
		if code != c.code || !strings.Contains(errb.String(), c.want) {
			t.Errorf("run(%q) = %d, stderr %q; want %d and %q", c.args, code, errb.String(), c.code, c.want)
		}
	}
	// A Gavel trace line of a job type no table knows.
	tr := filepath.Join(dir, "trace.txt")
	lines := "ResNet-18 (batch size 64)\tcmd\t--steps\tfalse\t1000\t0\t1\n" + "Quantum (batch size 3)\tcmd\t--steps\tfalse\t1000\t10\t1\n"
	if err := os.WriteFile(tr, []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"sim", "--cluster", "gavel-108", "--trace", tr, "--policies", "fifo"}, &out, &errb)
	if code != 0 || !strings.Contains(out.String(), `unschedulable: 1 jobs, left out of the metrics: unknown job types "Quantum (batch size 3)" x1`) {
		t.Errorf("exit %d\nstdout %s\nstderr %s", code, out.String(), errb.String())
	}
}

// TestParseEstimates: every --estimates form gives the replay the simulator runs.
func TestParseEstimates(t *testing.T) {
	for _, c := range []struct {
		v    string
		want sim.EstimateReplay
	}{
		{"scaled", sim.EstimateReplay{}},
		{"live", sim.EstimateReplay{LiveEstimates: true}},
		{"live:0.25", sim.EstimateReplay{LiveEstimates: true, EstimateError: 0.25}},
		{"live:auto", sim.EstimateReplay{LiveEstimates: true, EstimateError: 0.5, CalibrateEstimates: true}},
		{"live:auto:1", sim.EstimateReplay{LiveEstimates: true, EstimateError: 1, CalibrateEstimates: true}},
		{"live:auto:0", sim.EstimateReplay{LiveEstimates: true, CalibrateEstimates: true}},
		{"none", sim.EstimateReplay{NoEstimates: true}},
		{"partial:0.3", sim.EstimateReplay{PartialEstimates: 0.3}},
	} {
		got, err := parseEstimates("hetgpu sim", c.v)
		if err != nil || got != c.want {
			t.Errorf("parseEstimates(%q) = %+v, %v; want %+v", c.v, got, err, c.want)
		}
		if r := got.Regime(); r != c.v && c.v != "live:auto" {
			t.Errorf("%q reads back as regime %q", c.v, r)
		}
	}
	for _, bad := range []string{"partial", "partial:1", "partial:0", "partial:x", "nothing"} {
		if _, err := parseEstimates("hetgpu sim", bad); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("--estimates = %q", bad)) {
			t.Errorf("parseEstimates(%q): %v, want an error naming the value", bad, err)
		}
	}
}
