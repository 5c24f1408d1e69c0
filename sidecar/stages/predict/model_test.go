package predict

import (
	"bytes"
	"flag"
	"os"
	"runtime"
	"strings"
	"testing"

	"github.com/hetgpu/hetgpu/model/throughput"
)

var update = flag.Bool("update", false, "rewrite model/default.json from the bundled measurements")

func smallTable(t testing.TB) *throughput.Table {
	t.Helper()
	f, err := os.Open("testdata/small_throughputs.json")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tab, err := throughput.ParseGavelJSON(f)
	if err != nil {
		t.Fatal(err)
	}
	return tab
}

func saved(t testing.TB, m *Model) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := m.Save(&b); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestTrainDeterministic: the same records and seed give the same model file byte for
// byte, whatever the parallelism; another seed gives another model.
func TestTrainDeterministic(t *testing.T) {
	recs := SeedRecords(smallTable(t))
	a, err := Train(recs, TrainOptions{Seed: 3, Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	b, err := Train(recs, TrainOptions{Seed: 3, Workers: 4})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(saved(t, a), saved(t, b)) {
		t.Error("two trainings with seed 3 differ")
	}
	c, err := Train(recs, TrainOptions{Seed: 4, Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(saved(t, a), saved(t, c)) {
		t.Error("seeds 3 and 4 gave identical models")
	}
	for _, arch := range archs {
		if v, ok := a.ValMAE[arch]; !ok || !(v > 0 && v < 1) {
			t.Errorf("ValMAE[%s] = %v, %v; want a validation error in (0, 1)", arch, v, ok)
		}
	}
	if a.ValMAE[a.Arch] > a.ValMAE[ArchFFN] || a.ValMAE[a.Arch] > a.ValMAE[ArchRNN] || a.ValMAE[a.Arch] > a.ValMAE[ArchAttention] {
		t.Errorf("kept %s with validation MAE %v, not the best of %v", a.Arch, a.ValMAE[a.Arch], a.ValMAE)
	}
}

// TestModelRoundTrip: a saved and loaded model predicts exactly as the original.
func TestModelRoundTrip(t *testing.T) {
	tab := smallTable(t)
	recs := SeedRecords(tab)
	m, err := Train(recs, TrainOptions{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	data := saved(t, m)
	m2, err := LoadModel(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(data, saved(t, m2)) {
		t.Error("save(load(save(m))) differs from save(m)")
	}
	// A job type the table lacks, so P1 (not the catalog) answers.
	f := Features{Name: "ResNet-50", BatchSize: 48}
	p1, err := New(Options{Model: m, Seeds: recs, Pairs: tab})
	if err != nil {
		t.Fatal(err)
	}
	p2, err := New(Options{Model: m2, Seeds: recs, Pairs: tab})
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range []string{"k80", "p100", "v100", "a100"} {
		a, b := p1.PredictFeatures(f, g, 2), p2.PredictFeatures(f, g, 2)
		if a != b || a.Throughput <= 0 {
			t.Errorf("%s: original %+v, loaded %+v", g, a, b)
		}
	}
}

func TestLoadModelRejects(t *testing.T) {
	m, err := DefaultModel()
	if err != nil {
		t.Fatal(err)
	}
	good := string(saved(t, m))
	cases := []struct {
		name, from, to, want string
	}{
		{"schema", ModelSchema, "hetgpu-predict-model/0", "field schema"},
		{"features", `"log2_batch"`, `"batch"`, "field query_features"},
		{"arch", `"arch": "` + m.Arch + `"`, `"arch": "lstm"`, "arch"},
		{"unknown field", `"seed"`, `"sead"`, "unknown field"},
		{"truncated", good, good[:len(good)/2], "unexpected EOF"},
	}
	for _, c := range cases {
		bad := strings.Replace(good, c.from, c.to, 1)
		if _, err := LoadModel(strings.NewReader(bad)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: LoadModel error %v, want one mentioning %q", c.name, err, c.want)
		}
	}
}

// TestDefaultModelReproducible retrains the shipped model from the bundled measurements
// (what `hetgpu predict train --seed 1` does) and compares it with the embedded file. Run
// with -update to rewrite it. Floating-point contraction differs by architecture, so the
// byte comparison runs on amd64 only.
func TestDefaultModelReproducible(t *testing.T) {
	if testing.Short() && !*update {
		t.Skip("trains on the bundled table")
	}
	tab, err := throughput.Bundled()
	if err != nil {
		t.Fatal(err)
	}
	m, err := Train(SeedRecords(tab), TrainOptions{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	got := saved(t, m)
	if *update {
		if err := os.WriteFile("model/default.json", got, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote model/default.json: %s, validation MAE %v", m.Arch, m.ValMAE)
		return
	}
	if runtime.GOARCH != "amd64" {
		t.Skipf("model file bytes are pinned on amd64; this is %s", runtime.GOARCH)
	}
	if !bytes.Equal(got, defaultModelJSON) {
		t.Error("model/default.json differs from a fresh training on the bundled table with seed 1; run go test ./sidecar/stages/predict -run TestDefaultModelReproducible -update")
	}
}
