package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hetgpu/hetgpu/sidecar/rank"
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
