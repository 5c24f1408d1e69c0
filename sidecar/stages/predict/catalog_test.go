package predict

import (
	"bytes"
	"context"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hetgpu/hetgpu/model/cluster"
)

func rec(name string, batch int, gpu string, gpus int, thr float64) Record {
	return Record{Schema: RecordSchema, Source: SourceObserved, ModelName: name, BatchSize: batch, GPUType: gpu, GPUs: gpus, Throughput: thr}
}

func TestRecordValidate(t *testing.T) {
	good := rec("ResNet-50", 64, "v100", 1, 4.4)
	cases := []struct {
		name string
		edit func(*Record)
		want string // "" = valid
	}{
		{"good", func(*Record) {}, ""},
		{"seed", func(r *Record) { r.Source = SourceSeed }, ""},
		{"zero throughput (out of memory)", func(r *Record) { r.Throughput = 0 }, ""},
		{"schema", func(r *Record) { r.Schema = 2 }, "field v = 2"},
		{"source", func(r *Record) { r.Source = "guess" }, "field source"},
		{"name", func(r *Record) { r.ModelName = "" }, "field model_name"},
		{"batch", func(r *Record) { r.BatchSize = -1 }, "field batch_size"},
		{"gpu type", func(r *Record) { r.GPUType = "gtx480" }, "field gpu_type"},
		{"gpus", func(r *Record) { r.GPUs = 0 }, "field gpus"},
		{"throughput", func(r *Record) { r.Throughput = math.Inf(1) }, "field throughput"},
		{"power", func(r *Record) { r.AvgPowerW = math.NaN() }, "field avg_power_w"},
		{"energy", func(r *Record) { r.EnergyPerStepJ = -1 }, "field energy_per_step_j"},
	}
	for _, c := range cases {
		r := good
		c.edit(&r)
		err := r.Validate()
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%s: Validate = %v, want %q", c.name, err, c.want)
		}
	}
}

func TestRecordFromObservation(t *testing.T) {
	o := cluster.Observation{Namespace: "ns", JobID: "j", Group: "g", ModelName: "BERT", BatchSize: 32,
		GPUName: "NVIDIA A100-SXM4-40GB", GPUs: 4, Throughput: 20, EnergyJ: 600_000, RuntimeS: 500, CoRunner: "LM"}
	r, err := RecordFromObservation(&o)
	if err != nil {
		t.Fatal(err)
	}
	if r.GPUType != "a100" || r.AvgPowerW != 1200 || r.EnergyPerStepJ != 60 || r.Job != "ns/j/g" || r.CoRunner != "LM" {
		t.Errorf("record %+v: want a100, 1200 W (energy/runtime), 60 J/step, job ns/j/g, co-runner LM", r)
	}
	o.GPUName, o.GPUType = "", ""
	if _, err := RecordFromObservation(&o); err == nil || !strings.Contains(err.Error(), "gpu_type") {
		t.Errorf("observation without a GPU type: %v", err)
	}
}

// TestCatalogPersistence: observed runs survive a restart, the window keeps the newest,
// and the file is compacted.
func TestCatalogPersistence(t *testing.T) {
	path := filepath.Join(t.TempDir(), "catalog.jsonl")
	opts := CatalogOptions{Window: 4, MinSamples: 2}
	c, err := OpenCatalog(path, nil, opts)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 11; i++ {
		r := rec("Net", 8, "t4", 1, float64(i+1))
		r.Time = time.Unix(int64(i), 0).UTC()
		if err := c.Add(r); err != nil {
			t.Fatal(err)
		}
	}
	if got := len(c.Observed()); got != 4 {
		t.Fatalf("window holds %d records, want 4", got)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if lines := bytes.Count(data, []byte("\n")); lines > 2*opts.Window {
		t.Errorf("file has %d lines, want at most %d after compaction", lines, 2*opts.Window)
	}
	c2, err := OpenCatalog(path, nil, opts)
	if err != nil {
		t.Fatal(err)
	}
	got := c2.Observed()
	if len(got) != 4 {
		t.Fatalf("reopened window holds %d records, want 4", len(got))
	}
	for i, r := range got {
		if want := c.Observed()[i]; r != want {
			t.Errorf("record %d after restart: %+v, want %+v", i, r, want)
		}
		if r.Throughput != float64(8+i) {
			t.Errorf("record %d throughput %v, want %v (newest four of eleven)", i, r.Throughput, 8+i)
		}
	}
}

// TestPredictorPersistence: a restarted predictor predicts as before the restart.
func TestPredictorPersistence(t *testing.T) {
	path := filepath.Join(t.TempDir(), "catalog.jsonl")
	p := smallPredictor(t, Options{CatalogPath: path})
	for i, g := range []string{"k80", "p100", "p100"} {
		if err := p.Observe(context.Background(), obs("ResNet-34", 64, g, 1, 5+float64(i), 100, i)); err != nil {
			t.Fatal(err)
		}
	}
	p2 := smallPredictor(t, Options{CatalogPath: path})
	j := job("ResNet-34", 64)
	for _, g := range []string{"k80", "v100", "a100"} {
		a, b := p.Predict(j, g, 1), p2.Predict(j, g, 1)
		if a != b || a.Source != SrcP1P2 {
			t.Errorf("%s: before restart %+v, after %+v", g, a, b)
		}
	}
}

func TestCatalogBadLines(t *testing.T) {
	good := `{"v":1,"source":"observed","time":"2026-01-01T00:00:00Z","model_name":"Net","gpu_type":"t4","gpus":1,"throughput":2}`
	cases := []struct {
		name, data string
		n          int
		want       string
	}{
		{"torn last line (crash mid-append) is dropped", good + "\n" + `{"v":1,"sour`, 1, ""},
		{"blank lines", "\n" + good + "\n\n" + good + "\n", 2, ""},
		{"garbage in the middle", good + "\n{oops\n" + good + "\n", 0, "line 2"},
		{"invalid field", good + "\n" + strings.Replace(good, `"gpus":1`, `"gpus":0`, 1) + "\n", 0, "line 2: field gpus = 0"},
	}
	for _, c := range cases {
		path := filepath.Join(t.TempDir(), "c.jsonl")
		if err := os.WriteFile(path, []byte(c.data), 0o644); err != nil {
			t.Fatal(err)
		}
		cat, err := OpenCatalog(path, nil, CatalogOptions{})
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.want == "" && len(cat.Observed()) != c.n:
			t.Errorf("%s: %d records, want %d", c.name, len(cat.Observed()), c.n)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: error %v, want one with %q", c.name, err, c.want)
		}
	}
}

// FuzzReadRecords: the catalog reader never panics, and what it accepts is valid.
func FuzzReadRecords(f *testing.F) {
	f.Add([]byte(`{"v":1,"source":"observed","model_name":"Net","gpu_type":"t4","gpus":1,"throughput":2}` + "\n"))
	f.Add([]byte(`{"v":1,"source":"seed","model_name":"LM","batch_size":5,"gpu_type":"k80","gpus":8,"throughput":0}`))
	f.Add([]byte("{\"v\":1,\n{}\n"))
	f.Add([]byte(`{"v":1,"source":"observed","model_name":"N","gpu_type":"V100","gpus":2,"throughput":1e400}`))
	line, _ := encodeLine(&Record{Schema: 1, Source: SourceObserved, ModelName: "Net", GPUType: "t4", GPUs: 1, Throughput: 2, Seq: 7})
	f.Add(line)
	f.Add(append(append([]byte(nil), line...), line[:len(line)/2]...))
	f.Fuzz(func(t *testing.T, data []byte) {
		recs, _, err := readRecords(bytes.NewReader(data), "fuzz")
		if err != nil {
			return
		}
		for i := range recs {
			if err := recs[i].Validate(); err != nil {
				t.Fatalf("accepted invalid record %+v: %v", recs[i], err)
			}
		}
	})
}
