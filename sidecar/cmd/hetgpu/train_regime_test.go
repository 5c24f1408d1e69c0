package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hetgpu/hetgpu/sidecar/backends/sim"
	"github.com/hetgpu/hetgpu/sidecar/research/rltrain"
	"github.com/hetgpu/hetgpu/sidecar/stages/rank"
)

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
