package throughput

import (
	"fmt"
	"math"
	"os"
	"strings"
	"testing"
)

func bundled(t testing.TB) *Table {
	t.Helper()
	tab, err := Bundled()
	if err != nil {
		t.Fatalf("Bundled: %v", err)
	}
	return tab
}

func TestBundledMeasured(t *testing.T) {
	tab := bundled(t)
	cases := []struct {
		job  string
		gpu  string
		n    int
		want float64
	}{
		// Straight from gavel/simulation_throughputs_isolated.csv.
		{"ResNet-50 (batch size 64)", "v100", 1, 4.394774823323071},
		{"ResNet-50 (batch size 64)", "Tesla V100-SXM2-16GB", 8, 17.303172756892167},
		{"ResNet-18 (batch size 16)", "k80", 1, 4.795294551566172},
		// ElasticFlow A100 resnet50, global batch 64 on 1 GPU: 6.84 it/s = 6.84 steps/s.
		{"ResNet-50 (batch size 64)", "a100", 1, 6.8429775823889685},
		// Global batch 128 on 2 GPUs = per-GPU batch 64: 6.6195 it/s x 2 GPUs.
		{"ResNet-50 (batch size 64)", "a100", 2, 2 * 6.619528678370847},
		{"BERT (batch size 384)", "t4", 1, 0.03440690542609718},
	}
	for _, c := range cases {
		got, src, ok := tab.Throughput(c.job, c.gpu, c.n)
		if !ok || src != SourceMeasured || math.Abs(got-c.want) > 1e-9 {
			t.Errorf("Throughput(%q, %s, %d) = %v, %s, %v; want %v measured", c.job, c.gpu, c.n, got, src, ok, c.want)
		}
	}
	if got := len(tab.JobTypes()); got < 26 {
		t.Errorf("JobTypes: %d, want at least Gavel's 26", got)
	}
	if got := strings.Join(tab.GPUTypes(), ","); got != "a100,k80,p100,t4,v100" {
		t.Errorf("GPUTypes = %s", got)
	}
}

func TestIsolatedCSVAgreesWithJSON(t *testing.T) {
	data, err := os.ReadFile("../../../shared/data/gavel/simulation_throughputs_isolated.csv")
	if err != nil {
		t.Skipf("shared data not present: %v", err)
	}
	tab := bundled(t)
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")[1:]
	for _, l := range lines {
		f := strings.Split(l, ",")
		var n int
		var want float64
		if _, err := fmt.Sscan(f[4], &n); err != nil {
			t.Fatal(err)
		}
		if _, err := fmt.Sscan(f[5], &want); err != nil {
			t.Fatal(err)
		}
		lookup := tab.Measured
		if strings.HasSuffix(f[0], "_unconsolidated") {
			lookup = tab.Unconsolidated
			f[0] = strings.TrimSuffix(f[0], "_unconsolidated")
		}
		got, ok := lookup(f[1], f[0], n)
		if !ok || math.Abs(got-want) > 1e-9*math.Max(1, want) {
			t.Fatalf("%s: Measured = %v, %v; csv says %v", l, got, ok, want)
		}
	}
}

func TestFallbacks(t *testing.T) {
	tab := bundled(t)
	// A3C has no 8-GPU entry on V100? Whatever is missing must come back scaled, not measured.
	for _, job := range tab.JobTypes() {
		for _, g := range []string{"t4", "a10", "a100", "h100", "k80", "v100"} {
			for _, n := range []int{1, 2, 4, 8} {
				v, src, ok := tab.Throughput(job, g, n)
				if !ok || v < 0 || v == 0 && src != SourceMeasured || math.IsNaN(v) || math.IsInf(v, 0) {
					t.Fatalf("Throughput(%q, %s, %d) = %v, %s, %v; want a positive figure (0 only when measured)", job, g, n, v, src, ok)
				}
				if _, measured := tab.Measured(job, g, n); measured != (src == SourceMeasured) {
					t.Fatalf("Throughput(%q, %s, %d) source %s disagrees with Measured", job, g, n, src)
				}
			}
		}
	}
	// An H100 must come out faster than a V100, and a T4 slower, for a compute-bound model.
	v100, _, _ := tab.Throughput("ResNet-50 (batch size 64)", "v100", 1)
	h100, src, _ := tab.Throughput("ResNet-50 (batch size 64)", "h100", 1)
	t4, _, _ := tab.Throughput("ResNet-50 (batch size 64)", "t4", 1)
	if src != SourceDatasheetRatio || h100 <= v100 || t4 >= v100 {
		t.Errorf("ResNet-50: v100 %v, h100 %v (%s), t4 %v; want t4 < v100 < h100", v100, h100, src, t4)
	}
	// Calibration: A100 against V100 on ResNet-50 is measured at about 1.56x.
	if r := tab.SpeedRatio("v100", "a100"); r < 1.3 || r > 2.0 {
		t.Errorf("SpeedRatio(v100, a100) = %v, want the calibrated ~1.6", r)
	}
	if _, _, ok := tab.Throughput("NoSuchModel", "v100", 1); ok {
		t.Error("unknown job type must not be ok")
	}
	if _, _, ok := tab.Throughput("ResNet-50 (batch size 64)", "voodoo", 1); ok {
		t.Error("unknown GPU type must not be ok")
	}
}

func TestScaledGPUs(t *testing.T) {
	tab, err := ParseGavelJSON(strings.NewReader(`{"v100": {"('M (batch size 8)', 1)": {"null": 10}}}`))
	if err != nil {
		t.Fatal(err)
	}
	got, src, ok := tab.Throughput("M (batch size 8)", "v100", 4)
	want := 10 * math.Pow(4, ScalingExponent)
	if !ok || src != SourceScaledGPUs || math.Abs(got-want) > 1e-9 {
		t.Fatalf("scaled = %v %s %v, want %v scaled-gpus", got, src, ok, want)
	}
}

func TestColocatedSymmetric(t *testing.T) {
	tab := bundled(t)
	a, b, ok := tab.Colocated("k80", "ResNet-18 (batch size 16)", 1, "ResNet-18 (batch size 32)", 1)
	if !ok || math.Abs(a-2.539979567443098) > 1e-9 || math.Abs(b-3.1201925448827033) > 1e-9 {
		t.Fatalf("Colocated = %v %v %v", a, b, ok)
	}
	b2, a2, ok := tab.Colocated("k80", "ResNet-18 (batch size 32)", 1, "ResNet-18 (batch size 16)", 1)
	if !ok || a2 != a || b2 != b {
		t.Fatalf("swapped Colocated = %v %v %v, want %v %v", b2, a2, ok, b, a)
	}
}

func TestParseGavelJSONErrors(t *testing.T) {
	cases := map[string]string{
		`{}`:                                                "no worker types",
		`{"voodoo": {}}`:                                    `worker type "voodoo"`,
		`{"v100": {"ResNet": {"null": 1}}}`:                 `job key "ResNet"`,
		`{"v100": {"('R', 0)": {"null": 1}}}`:               "positive integer",
		`{"v100": {"('R', 1)": {"null": "fast"}}}`:          "isolated throughput",
		`{"v100": {"('R', 1)": {"('S', 1)": [1]}}}`:         "",
		`{"v100": {"('R', 1)": {"('S', 1)": "x"}}}`:         "pair throughput",
		`{"v100": {"('R', 1)": {"null": 1, "bad": [1,2]}}}`: `job key "bad"`,
	}
	for in, want := range cases {
		_, err := ParseGavelJSON(strings.NewReader(in))
		if want == "" {
			continue
		}
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseGavelJSON(%s) error = %v, want it to mention %q", in, err, want)
		}
	}
}

func TestParseJobType(t *testing.T) {
	cases := []struct {
		in    string
		model string
		batch int
		bad   bool
	}{
		{"ResNet-50 (batch size 64)", "ResNet-50", 64, false},
		{"A3C", "A3C", 0, false},
		{"LM (batch size 5)", "LM", 5, false},
		{"", "", 0, true},
		{"X (batch size zero)", "", 0, true},
	}
	for _, c := range cases {
		m, b, err := ParseJobType(c.in)
		if (err != nil) != c.bad || m != c.model || b != c.batch {
			t.Errorf("ParseJobType(%q) = %q, %d, %v", c.in, m, b, err)
		}
		if !c.bad && JobType(m, b) != c.in {
			t.Errorf("JobType round trip of %q = %q", c.in, JobType(m, b))
		}
	}
}

func FuzzParseGavelJSON(f *testing.F) {
	f.Add(`{"v100": {"('R (batch size 2)', 1)": {"null": 1.5, "('S', 1)": [1, 2]}}}`)
	f.Add(`{"k80_unconsolidated": {"('R', 2)": {"null": 3}}}`)
	f.Fuzz(func(t *testing.T, in string) {
		tab, err := ParseGavelJSON(strings.NewReader(in))
		if err != nil {
			return
		}
		for _, j := range tab.JobTypes() {
			for _, g := range tab.GPUTypes() {
				if v, _, ok := tab.Throughput(j, g, 1); ok && (v < 0 || math.IsNaN(v)) {
					t.Fatalf("negative or NaN throughput %v", v)
				}
			}
		}
	})
}

func BenchmarkThroughputFallback(b *testing.B) {
	tab := bundled(b)
	for i := 0; i < b.N; i++ {
		tab.Throughput("ResNet-50 (batch size 64)", "h100", 4)
	}
}

// TestBundledIsBitReproducible: every load of the table gives the same fallback throughputs
// to the last bit. The calibration once summed logs in map order, so loads differed in the
// last bits and simulations (and training runs) with them, about one in twenty.
func TestBundledIsBitReproducible(t *testing.T) {
	ref := bundled(t)
	types := append(ref.GPUTypes(), "h100", "a10", "l4")
	for i := 0; i < 30; i++ {
		tab := bundled(t)
		for _, from := range types {
			for _, to := range types {
				if a, b := tab.SpeedRatio(from, to), ref.SpeedRatio(from, to); a != b {
					t.Fatalf("load %d: SpeedRatio(%s, %s) = %v, first load %v", i, from, to, a, b)
				}
			}
		}
		for _, job := range ref.JobTypes() {
			for _, g := range types {
				for _, n := range []int{1, 2, 3, 8} {
					a, _, _ := tab.Throughput(job, g, n)
					b, _, _ := ref.Throughput(job, g, n)
					if a != b {
						t.Fatalf("load %d: Throughput(%s, %s, %d) = %v, first load %v", i, job, g, n, a, b)
					}
				}
			}
		}
	}
}
