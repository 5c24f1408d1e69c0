package main

import (
	"bytes"
	"context"
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hetgpu/hetgpu/model/trace"
	"github.com/hetgpu/hetgpu/sidecar/backends/sim"
	"github.com/hetgpu/hetgpu/sidecar/backends/sim/simtest"
	"github.com/hetgpu/hetgpu/sidecar/research/rltrain"
	"github.com/hetgpu/hetgpu/sidecar/stages/rank"
)

func TestTrainUsageErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"train", "--epochs", "3"}, "--out FILE is required"},
		{[]string{"train", "--out", "x.json", "--epochs", "0"}, "--epochs = 0"},
		{[]string{"train", "--out", "x.json", "--eval-episodes", "0"}, "--eval-episodes = 0"},
		{[]string{"train", "--out", "x.json", "--score", "speed"}, `score "speed"`},
		{[]string{"train", "--out", "x.json", "extra"}, "unexpected argument"},
		{[]string{"train", "eval", "--clusters", ""}, "must not be empty"},
		{[]string{"train", "eval", "--policies", "nobody"}, "unknown policy"},
		{[]string{"train", "verdict"}, "--policy FILE is required"},
		{[]string{"train", "ceiling", "--seeds", "1,x"}, `"x" is not a seed`},
		{[]string{"train", "ceiling", "--seeds", "2,2"}, "seed 2 is listed twice"},
		{[]string{"train", "ceiling", "--seeds", " , "}, "lists no seed"},
		{[]string{"train", "ceiling", "--traces", ""}, "must not be empty"},
		{[]string{"train", "ceiling", "--estimates", "Live"}, `train ceiling --estimates = "Live"`},
		{[]string{"train", "eval", "--estimates", ""}, `train eval --estimates = ""`},
		{[]string{"train", "verdict", "--policy", "p.json", "--pooled-max", "0"}, "expected positive ratios"},
		{[]string{"train", "verdict", "--policy", "p.json", "extra"}, "unexpected argument"},
	} {
		var out, errb bytes.Buffer
		if code := run(context.Background(), c.args, &out, &errb); code != 2 || !strings.Contains(errb.String(), c.want) {
			t.Errorf("%q: exit %d, stderr %q; want 2 and %q", c.args, code, errb.String(), c.want)
		}
	}
}

// TestTrainWritesPolicyAndCurve runs a tiny training and checks its outputs.
func TestTrainWritesPolicyAndCurve(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "p.json")
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"train", "--cluster", "modern-mix", "--trace", "bundled:train-0", "--epochs", "1",
		"--out", out, "--episode-jobs", "12", "--stride", "400", "--rollouts", "2", "--eval-every", "1", "--min-bsld", "-1"}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	c, err := rank.LoadCheckpoint(out)
	if err != nil {
		t.Fatal(err)
	}
	if c.Training == nil || c.Training.Epoch != 1 || c.Meta["cluster"] != "modern-mix" {
		t.Fatalf("checkpoint: training %+v, meta %v", c.Training, c.Meta)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "p.png")); err != nil || !bytes.HasPrefix(b, []byte("\x89PNG")) {
		t.Fatalf("learning curve not written: %v", err)
	}
	if !strings.Contains(stdout.String(), "epoch   1") || !strings.Contains(stdout.String(), "trained 1 epochs") {
		t.Fatalf("stdout: %s", stdout.String())
	}
}

// `hetgpu train verdict` writes the held-out verdict into the checkpoint's meta, from a
// simulation or from a saved evaluation, and leaves the weights as they were.
func TestTrainVerdict(t *testing.T) {
	bundled, err := rank.DefaultCheckpoint()
	if err != nil || bundled == nil {
		t.Fatalf("bundled checkpoint: %v %v", bundled, err)
	}
	// A saved evaluation in which the learned order wins by 10 % everywhere.
	res := func(p string, f float64) *sim.Result {
		return &sim.Result{Policy: p, Jobs: 10, AvgJCTS: 1000 * f, BoundedSlowdown: 2 * f}
	}
	ev := rltrain.Eval{Traces: []string{"bundled:heldout-0"}, Clusters: []rltrain.ClusterEval{{Cluster: "modern-mix",
		PerTrace: map[string][]*sim.Result{"bundled:heldout-0": {res("hetgpu", 0.9), res(rltrain.HeuristicVariant, 1)}},
		Pooled: []rltrain.Pooled{{Policy: "hetgpu", Jobs: 10, AvgJCTS: 900, BSLD: 1.8},
			{Policy: rltrain.HeuristicVariant, Jobs: 10, AvgJCTS: 1000, BSLD: 2}}}}}
	dir := t.TempDir()
	evalFile := filepath.Join(dir, "eval.json")
	b, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(evalFile, b, 0o644); err != nil {
		t.Fatal(err)
	}
	traceFile := smallTraceFile(t, dir)
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"saved evaluation", []string{"--eval", evalFile}, rank.VerdictBeats},
		{"simulated", []string{"--clusters", "modern-mix:scale=0.25", "--traces", traceFile, "--parallel", "2"}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "p.json")
			if err := bundled.Save(path); err != nil {
				t.Fatal(err)
			}
			var stdout, stderr bytes.Buffer
			if code := run(context.Background(), append([]string{"train", "verdict", "--policy", path}, c.args...), &stdout, &stderr); code != 0 {
				t.Fatalf("exit %d: %s", code, stderr.String())
			}
			got, err := rank.LoadCheckpoint(path)
			if err != nil {
				t.Fatal(err)
			}
			v, err := rank.VerdictFromMeta(got.Meta)
			if err != nil || v == nil {
				t.Fatalf("verdict in meta: %+v %v (meta %v)", v, err, got.Meta)
			}
			if c.want != "" && v.Result != c.want {
				t.Fatalf("verdict %s, want %s", v, c.want)
			}
			if !slices.Equal(got.Actor.Params, bundled.Actor.Params) || !slices.Equal(got.Critic.Params, bundled.Critic.Params) ||
				!slices.Equal(got.Norm.Mean, bundled.Norm.Mean) || got.Meta["cluster"] != bundled.Meta["cluster"] {
				t.Fatal("train verdict changed the policy or dropped its other meta")
			}
			if !strings.Contains(stdout.String(), v.Result) {
				t.Fatalf("stdout does not name the verdict: %s", stdout.String())
			}
		})
	}
}

// smallTraceFile writes a 30-job synthetic trace into dir and returns its path: --traces is a
// comma-separated list, so a small simulated trace goes through a file.
// zeroPolicyFile saves a freshly initialised residual policy (one hidden layer of 8, fixed
// seed) at path: its correction is zero, so it orders exactly as the heuristic.
func zeroPolicyFile(t *testing.T, path string) string {
	t.Helper()
	p, err := rank.NewResidualPolicy(rank.DefaultSchema(), []int{8}, rand.New(rand.NewPCG(1, 2)))
	if err != nil {
		t.Fatal(err)
	}
	if err := rank.PolicyCheckpoint(p).Save(path); err != nil {
		t.Fatal(err)
	}
	return path
}

func smallTraceFile(t *testing.T, dir string) string {
	t.Helper()
	small := simtest.Trace(t, "synthetic:jobs=30,rate=6,seed=2", 1)
	path := filepath.Join(dir, "small.trace")
	var tb bytes.Buffer
	if err := trace.WriteGavel(&tb, small); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, tb.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// `hetgpu train ceiling` runs the three orders once per seed. A residual policy with a zero
// correction orders exactly as the heuristic, so its ratios are 1 and it closes none of the gap.
func TestTrainCeiling(t *testing.T) {
	dir := t.TempDir()
	traceFile := smallTraceFile(t, dir)
	policyFile := zeroPolicyFile(t, filepath.Join(dir, "zero.json"))
	var stdout, stderr bytes.Buffer
	args := []string{"train", "ceiling", "--policy", policyFile, "--seeds", "1,2", "--clusters", "modern-mix:scale=0.25",
		"--traces", traceFile, "--parallel", "2", "--json"}
	if code := run(context.Background(), args, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	var ce rltrain.Ceiling
	if err := json.Unmarshal(stdout.Bytes(), &ce); err != nil {
		t.Fatalf("%v: %s", err, stdout.String())
	}
	if len(ce.Rows) != 4 || len(ce.Summary) != 2 || !slices.Equal(ce.Seeds, []uint64{1, 2}) {
		t.Fatalf("report %+v", ce)
	}
	for _, r := range ce.Rows {
		if r.LearnedRatio != 1 || r.Learned != r.Heuristic || !(r.OracleRatio > 0) {
			t.Errorf("row %+v: a zero correction must order as the heuristic", r)
		}
		if r.GapCaptured != nil && *r.GapCaptured != 0 {
			t.Errorf("row %+v: gap captured %v, want 0", r, *r.GapCaptured)
		}
	}
	// Each seed draws other estimate errors: the heuristic's figures differ between seeds.
	if ce.Rows[0].Heuristic == ce.Rows[2].Heuristic && ce.Rows[1].Heuristic == ce.Rows[3].Heuristic {
		t.Errorf("seeds 1 and 2 gave the heuristic the same figures: %+v", ce.Rows)
	}
	if !strings.Contains(stderr.String(), "seed 2: simulating") {
		t.Errorf("no per-seed progress on stderr: %s", stderr.String())
	}
}

// TestSubcommandUsage: commands with one subcommand name it when it is missing or wrong.
func TestSubcommandUsage(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"place"}, "hetgpu place: missing subcommand (bench)"},
		{[]string{"place", "run"}, `hetgpu place: unknown subcommand "run", expected bench`},
		{[]string{"bench"}, "hetgpu bench: missing subcommand (live)"},
		{[]string{"bench", "foo"}, `hetgpu bench: unknown subcommand "foo", expected live`},
	} {
		var out, errb bytes.Buffer
		if code := run(context.Background(), c.args, &out, &errb); code != 2 || !strings.Contains(errb.String(), c.want) {
			t.Errorf("%q: exit %d, stderr %q; want 2 and %q", c.args, code, errb.String(), c.want)
		}
	}
}

func TestSplitList(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []string
	}{
		{"gavel-108,modern-mix", []string{"gavel-108", "modern-mix"}},
		{" bundled:train , ", []string{"bundled:train"}},
		{"bundled:train,synthetic:jobs=300,rate=12,seed=2", []string{"bundled:train", "synthetic:jobs=300,rate=12,seed=2"}},
		{"synthetic:jobs=10,rate=1,synthetic:jobs=20,rate=2", []string{"synthetic:jobs=10,rate=1", "synthetic:jobs=20,rate=2"}},
		{"gavel-108:scale=0.25,modern-mix:slots=2", []string{"gavel-108:scale=0.25", "modern-mix:slots=2"}},
		{"", nil},
	} {
		if got := splitList(c.in); strings.Join(got, "|") != strings.Join(c.want, "|") || len(got) != len(c.want) {
			t.Errorf("splitList(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// `hetgpu train verdict --estimates R` writes regime R's verdict and keeps the others'.
func TestTrainVerdictPerRegime(t *testing.T) {
	dir := t.TempDir()
	policyFile := zeroPolicyFile(t, filepath.Join(dir, "p.json"))
	// An evaluation in which the learned order has ratio jct and bsld against the heuristic.
	evalFile := func(name string, jct, bsld float64) string {
		res := func(pol string, j, b float64) *sim.Result {
			return &sim.Result{Policy: pol, Jobs: 10, AvgJCTS: j, BoundedSlowdown: b}
		}
		ev := rltrain.Eval{Traces: []string{"bundled:heldout-0"}, Clusters: []rltrain.ClusterEval{{Cluster: "c",
			PerTrace: map[string][]*sim.Result{"bundled:heldout-0": {res("hetgpu", 100*jct, 2*bsld), res(rltrain.HeuristicVariant, 100, 2)}},
			Pooled:   []rltrain.Pooled{{Policy: "hetgpu", Jobs: 10, AvgJCTS: 100 * jct, BSLD: 2 * bsld}, {Policy: rltrain.HeuristicVariant, Jobs: 10, AvgJCTS: 100, BSLD: 2}}}}}
		b, err := json.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	for _, c := range []struct {
		estimates, eval, regime, result string
	}{
		{"none", evalFile("none.json", 0.9, 0.95), rank.RegimeNone, rank.VerdictBeats},
		{"scaled", evalFile("scaled.json", 1.01, 1), rank.RegimeEstimates, rank.VerdictNotBetter},
		{"partial:0.3", evalFile("partial.json", 0.96, 1.2), rank.RegimePartial, rank.VerdictNotBetter},
	} {
		var stdout, stderr bytes.Buffer
		args := []string{"train", "verdict", "--policy", policyFile, "--estimates", c.estimates, "--eval", c.eval}
		if code := run(context.Background(), args, &stdout, &stderr); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, stderr.String())
		}
		if !strings.Contains(stdout.String(), "in the "+c.regime+" regime (--estimates "+c.estimates+"): "+c.result) {
			t.Errorf("output %q", stdout.String())
		}
	}
	ck, err := rank.LoadCheckpoint(policyFile)
	if err != nil {
		t.Fatal(err)
	}
	vs, err := rank.VerdictsFromMeta(ck.Meta)
	if err != nil {
		t.Fatal(err)
	}
	if len(vs) != 3 || vs[rank.RegimeNone].Result != rank.VerdictBeats || vs[rank.RegimeNone].Estimates != "none" ||
		vs[rank.RegimeEstimates].Result != rank.VerdictNotBetter || vs[rank.RegimePartial].Estimates != "partial:0.3" {
		t.Fatalf("verdicts %v", vs)
	}
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"train", "--out", filepath.Join(dir, "x.json"), "--estimates", "sometimes"}, &stdout, &stderr); code != 2 ||
		!strings.Contains(stderr.String(), "hetgpu train --estimates") {
		t.Fatalf("bad --estimates: exit %d, %s", code, stderr.String())
	}
}
