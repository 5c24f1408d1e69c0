package ppo

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hetgpu/hetgpu/sidecar/stages/rank"
)

func trainedCheckpoint(t testing.TB) *rank.Checkpoint {
	tr, err := NewTrainer(smallConfig(), spptSchema)
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Train(context.Background(), spptEnv{jobs: 6}, 1, nil, nil); err != nil {
		t.Fatal(err)
	}
	c := tr.Checkpoint()
	c.Meta = map[string]string{"cluster": "test"}
	return c
}

func TestCheckpointRoundTrip(t *testing.T) {
	c := trainedCheckpoint(t)
	path := filepath.Join(t.TempDir(), "sub", "p.json")
	if err := c.Save(path); err != nil {
		t.Fatal(err)
	}
	got, err := rank.LoadCheckpoint(path)
	if err != nil {
		t.Fatal(err)
	}
	p1, _ := c.Policy()
	p2, err := got.Policy()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(p1.Actor.Params, p2.Actor.Params) || !slices.Equal(p1.Norm.M2, p2.Norm.M2) || !p1.Schema.Equal(p2.Schema) {
		t.Fatal("policy changed through save and load")
	}
	if got.Meta["cluster"] != "test" || got.Training.Epoch != 1 || len(got.Training.Curve) != 1 {
		t.Fatalf("training state lost: %+v", got.Training)
	}
	// A shipped policy without training state loads but cannot resume.
	stripped := rank.PolicyCheckpoint(p1)
	var b bytes.Buffer
	stripped.Write(&b)
	sc, err := rank.ReadCheckpoint(&b)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Resume(sc); err == nil {
		t.Fatal("a checkpoint without training state resumed")
	}
}

func TestCheckpointValidationNamesTheField(t *testing.T) {
	base, _ := json.Marshal(trainedCheckpoint(t))
	for _, c := range []struct {
		name  string
		edit  func(m map[string]any)
		field string
	}{
		{"format", func(m map[string]any) { m["format"] = "pickle" }, "format"},
		{"version", func(m map[string]any) { m["version"] = 7 }, "version"},
		{"schema", func(m map[string]any) { m["schema"].(map[string]any)["features"] = []any{} }, "schema.features"},
		{"norm width", func(m map[string]any) { m["norm"].(map[string]any)["mean"] = []any{1.0} }, "norm"},
		{"actor sizes", func(m map[string]any) { m["actor"].(map[string]any)["sizes"] = []any{2.0, 1.0, 1.0, 5.0} }, "actor.sizes"},
		{"actor params", func(m map[string]any) { m["actor"].(map[string]any)["params"] = []any{1.0} }, "actor.params"},
		{"critic params", func(m map[string]any) { m["critic"].(map[string]any)["params"] = []any{} }, "critic.params"},
		{"unknown field", func(m map[string]any) { m["surprise"] = 1 }, "surprise"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var m map[string]any
			json.Unmarshal(base, &m)
			c.edit(m)
			b, _ := json.Marshal(m)
			_, err := rank.ReadCheckpoint(bytes.NewReader(b))
			if err == nil || !strings.Contains(err.Error(), c.field) {
				t.Fatalf("error %v, want one naming %q", err, c.field)
			}
		})
	}
}

func FuzzReadCheckpoint(f *testing.F) {
	var b bytes.Buffer
	trainedCheckpoint(f).Write(&b)
	f.Add(b.Bytes())
	f.Add([]byte(`{"format":"hetgpu-rank-policy","version":1}`))
	f.Add([]byte(`{}`))
	f.Add([]byte(`[`))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := rank.ReadCheckpoint(bytes.NewReader(data))
		if err != nil {
			return
		}
		// Anything accepted must yield a usable policy.
		p, err := c.Policy()
		if err != nil {
			t.Fatalf("validated checkpoint has no policy: %v", err)
		}
		n := 2
		x := make([]float64, n*p.NumFeatures())
		for i := range x {
			x[i] = float64(i)
		}
		p.Actor.Forward(p.Actor.NewWorkspace(n), x, n)
	})
}

func TestPlotCurve(t *testing.T) {
	curve := []EpochStats{{Epoch: 1, Reward: -0.1, RewardMin: -0.3, RewardMax: 0.1}, {Epoch: 2, Reward: 0.1, RewardMin: 0, RewardMax: 0.2, Evaluated: true, EvalReward: 0.15}}
	path := filepath.Join(t.TempDir(), "curve.png")
	if err := PlotCurve(curve, "test", path); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil || len(b) < 1000 || !bytes.HasPrefix(b, []byte("\x89PNG")) {
		t.Fatalf("no PNG written (%d bytes, %v)", len(b), err)
	}
	if err := PlotCurve(nil, "x", path); err == nil {
		t.Fatal("empty curve accepted")
	}
}
