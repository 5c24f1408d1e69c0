package report

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"flag"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hetgpu/hetgpu/internal/golden"
	"github.com/hetgpu/hetgpu/model/trace"
	"github.com/hetgpu/hetgpu/sidecar/backends/sim"
)

var update = flag.Bool("update", false, "rewrite golden files")

// fixture is a hand-made comparison: deterministic input for the golden report.
func fixture(t *testing.T) (Meta, []*sim.Result) {
	s, err := sim.LoadSpec("modern-mix")
	if err != nil {
		t.Fatal(err)
	}
	tr := &trace.Trace{Name: "fixture", Jobs: []trace.Job{
		{ID: "a", JobType: "A3C", GPUs: 1, TotalSteps: 10},
		{ID: "b", JobType: "A3C", GPUs: 4, TotalSteps: 10, ArrivalS: 7200},
	}}
	mk := func(name string, scale float64) *sim.Result {
		r := &sim.Result{Policy: name, Cluster: s.Name, Trace: tr.Name, Jobs: 2, AvgJCTS: 3600 * scale, P50JCTS: 3000 * scale,
			P95JCTS: 5000 * scale, P99JCTS: 5400 * scale, AvgQueueS: 600 * scale, MakespanS: 20000, GPUUtil: 0.5 / scale,
			EnergyKWh: 12 * scale, EnergyPerWork: 0.2 * scale, BoundedSlowdown: 1.5 * scale, JainFairness: 0.9 / scale,
			Preemptions: int(10 * scale), Rounds: 4, DecisionP50Ms: 0.1, DecisionP99Ms: 2}
		r.JobResults = []sim.JobResult{
			{ID: "a", JobType: "A3C", GPUs: 1, StartS: 0, FinishS: 3000 * scale, JCTS: 3000 * scale, IdealS: 2000, GPUType: "h100"},
			{ID: "b", JobType: "A3C", GPUs: 4, ArrivalS: 7200, StartS: 7800, FinishS: 7200 + 4200*scale, JCTS: 4200 * scale, IdealS: 3000, GPUType: "a100"},
		}
		r.Series = []sim.Sample{{T: 0, BusyGPUs: 1, Queue: 0, Running: 1, PowerW: 900},
			{T: 3000 * scale, BusyGPUs: 0, Queue: 0, PowerW: 700},
			{T: 7200, BusyGPUs: 4, Queue: 1, Running: 1, PowerW: 2000},
			{T: 7200 + 4200*scale, BusyGPUs: 0, PowerW: 700}}
		return r
	}
	return Meta{Cluster: s, Trace: tr, Seed: 1}, []*sim.Result{mk("fifo", 2), mk("gavel", 1)}
}

func TestHTMLGolden(t *testing.T) {
	m, rs := fixture(t)
	got, err := HTML(m, rs)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("testdata", "report.html.golden")
	if !golden.Compare(t, path, got, *update) {
		t.FailNow()
	}
	// The best average JCT and energy are highlighted on gavel's row, not fifo's.
	for _, r := range strings.Split(string(got), "<tr><td>")[1:] {
		best := strings.Count(r, `class="best"`)
		if strings.HasPrefix(r, "gavel<") && best != 2 || strings.HasPrefix(r, "fifo<") && best != 0 {
			t.Fatalf("highlighting wrong in row %q", r)
		}
	}
}

func TestWriteDirSanity(t *testing.T) {
	m, rs := fixture(t)
	dir := t.TempDir()
	if err := WriteDir(dir, m, rs); err != nil {
		t.Fatal(err)
	}
	html, err := os.ReadFile(filepath.Join(dir, FileHTML))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{FileJCTCDF, FileUtil, FileQueue, FileEnergy, FileAvgJCT} {
		if !bytes.Contains(html, []byte(`src="`+f+`"`)) {
			t.Errorf("index.html does not show %s", f)
		}
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		bd := img.Bounds()
		if bd.Dx() < 300 || bd.Dy() < 150 {
			t.Fatalf("%s: %v too small", f, bd)
		}
		// A plot is not a blank canvas: count distinct colours.
		colours := map[[4]uint32]bool{}
		for y := bd.Min.Y; y < bd.Max.Y; y += 3 {
			for x := bd.Min.X; x < bd.Max.X; x += 3 {
				r, g, b, a := img.At(x, y).RGBA()
				colours[[4]uint32{r, g, b, a}] = true
			}
		}
		if len(colours) < 4 {
			t.Fatalf("%s looks blank (%d colours)", f, len(colours))
		}
	}
	var back []map[string]any
	b, _ := os.ReadFile(filepath.Join(dir, FileJSON))
	if err := json.Unmarshal(b, &back); err != nil || len(back) != 2 || back[1]["policy"] != "gavel" {
		t.Fatalf("results.json: %v %v", err, back)
	}
	for _, k := range []string{"policy", "jobs", "avg_jct_s", "p99_jct_s", "avg_queue_s", "makespan_s", "gpu_util", "energy_kwh", "decision_p99_ms"} {
		if _, ok := back[0][k]; !ok {
			t.Errorf("results.json lacks key %s", k)
		}
	}
	f, _ := os.Open(filepath.Join(dir, FileJobs))
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil || len(rows) != 1+4 {
		t.Fatalf("jobs.csv: %v, %d rows, want 5", err, len(rows))
	}
}

// The time-weighted downsampling keeps the integral of the step function.
func TestDownsampleKeepsArea(t *testing.T) {
	s := []sim.Sample{{T: 0, BusyGPUs: 4}, {T: 10, BusyGPUs: 2}, {T: 10.5, BusyGPUs: 8}, {T: 33.3, BusyGPUs: 0}}
	for _, n := range []int{1, 7, 400} {
		bs := downsample(s, 8, n)
		w := 33.3 / float64(n)
		area := 0.0
		for _, b := range bs {
			area += b.util * w * 8
		}
		want := 4*10 + 2*0.5 + 8*22.8
		if d := area - want; d > 1e-6 || d < -1e-6 {
			t.Fatalf("n=%d: area %v, want %v", n, area, want)
		}
	}
}

func TestWriteTable(t *testing.T) {
	_, rs := fixture(t)
	var b bytes.Buffer
	if err := WriteTable(&b, rs); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 3 || !strings.Contains(lines[1], "fifo") || !strings.Contains(lines[2], "1.00") {
		t.Fatalf("table:\n%s", b.String())
	}
}
