package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const smallThroughputs = "../../stages/predict/testdata/small_throughputs.json"

func TestPredictEvalJSON(t *testing.T) {
	var out, errb bytes.Buffer
	trace := filepath.Join(t.TempDir(), "trace.jsonl")
	if code := run(context.Background(), []string{"predict", "eval", "--throughputs", smallThroughputs, "--json", "--trace", trace}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var rep struct {
		MAE             map[string]float64 `json:"mae"`
		Within10After10 *float64           `json:"within10_after10"`
		Estimators      map[string]map[string]struct {
			Predictions int     `json:"predictions"`
			MAE         float64 `json:"mae"`
		} `json:"estimators"`
	}
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("--json output is not JSON: %v\n%s", err, out.String())
	}
	for _, k := range []string{"p1p2", "p1p2_entry", "ffn", "rnn", "attention"} {
		if v, ok := rep.MAE[k]; !ok || !(v > 0 && v < 1) {
			t.Errorf("mae[%s] = %v, %v", k, v, ok)
		}
	}
	if rep.Within10After10 == nil || *rep.Within10After10 <= 0 || *rep.Within10After10 > 1 {
		t.Errorf("within10_after10 = %v, want a share in (0, 1]", rep.Within10After10)
	}
	for _, proto := range []string{"b", "b_entry"} {
		for _, k := range []string{"p1", "posterior", "transfer", "lowrank", "p1p2"} {
			if e := rep.Estimators[proto][k]; e.Predictions == 0 || !(e.MAE > 0 && e.MAE < 1) {
				t.Errorf("estimators[%s][%s] = %+v, want predictions and an error in (0, 1)", proto, k, e)
			}
		}
	}
	data, err := os.ReadFile(trace)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	var e struct {
		Protocol  string                    `json:"protocol"`
		Estimates map[string]map[string]any `json:"estimates"`
	}
	if len(lines) != 96+96 || json.Unmarshal([]byte(lines[0]), &e) != nil || e.Estimates["p1p2"] == nil {
		t.Errorf("--trace: %d lines (want 192, every held-out cell of (b) and (b')), first %.200s", len(lines), lines[0])
	}
}

func TestPredictUsage(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.json")
	if err := os.WriteFile(bad, []byte(`{"v100": {"ResNet": {"null": 1}}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		args     []string
		code     int
		inStderr string
	}{
		{[]string{"predict"}, 2, "usage: hetgpu predict"},
		{[]string{"predict", "bogus"}, 2, `unknown predict subcommand "bogus"`},
		{[]string{"predict", "eval"}, 2, "--throughputs FILE is required"},
		{[]string{"predict", "eval", "--throughputs", smallThroughputs, "--noise", "-1"}, 2, "--noise = -1"},
		{[]string{"predict", "eval", "--throughputs", "/nonexistent.json"}, 1, "--throughputs"},
		{[]string{"predict", "eval", "--throughputs", smallThroughputs, "--max-runs", "0"}, 2, "--max-runs = 0"},
		{[]string{"predict", "eval", "--throughputs", bad}, 1, `job key "ResNet"`},
		{[]string{"predict", "train"}, 2, "--out FILE is required"},
	}
	for _, c := range cases {
		var out, errb bytes.Buffer
		code := run(context.Background(), c.args, &out, &errb)
		if code != c.code || !strings.Contains(errb.String(), c.inStderr) {
			t.Errorf("run(%q) = %d, stderr %q; want %d with %q", c.args, code, errb.String(), c.code, c.inStderr)
		}
	}
}

func TestPredictTrain(t *testing.T) {
	path := filepath.Join(t.TempDir(), "model.json")
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"predict", "train", "--throughputs", smallThroughputs, "--seed", "2", "--out", path}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(data, []byte(`"schema": "hetgpu-predict-model/1"`)) || !strings.Contains(out.String(), "trained ") {
		t.Errorf("model file or message unexpected: %s / %.200s", out.String(), data)
	}
}
