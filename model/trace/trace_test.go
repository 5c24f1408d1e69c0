package trace

import (
	"math"
	"strings"
	"testing"
)

const gavel7 = "ResNet-50 (batch size 64)\tcd x && python3 main.py\t-n\t1\t5000\t0.000000\t1\n" +
	"A3C\tcd y && python3 a3c.py\t--steps\t0\t1200\t30.500000\t4\n"

const gavel10 = "LM (batch size 20)\tpython3 lm.py\t/work\t-n\t1\t800\t2\t3\t1.2\t60\n" +
	"CycleGAN\tpython3 gan.py\t/work\t-n\t1\t90\t1\t1\tNone\t5\n"

func TestParseGavel(t *testing.T) {
	tr, err := ParseGavel(strings.NewReader(gavel7+gavel10), "t.trace")
	if err != nil {
		t.Fatal(err)
	}
	if len(tr.Jobs) != 4 {
		t.Fatalf("%d jobs", len(tr.Jobs))
	}
	// Sorted by arrival: 0, 5, 30.5, 60.
	want := []struct {
		id, typ, model string
		batch, gpus    int
		steps, arr     float64
		prio, slo      float64
	}{
		{"t-00001", "ResNet-50 (batch size 64)", "ResNet-50", 64, 1, 5000, 0, 1, 0},
		{"t-00004", "CycleGAN", "CycleGAN", 0, 1, 90, 5, 1, 0},
		{"t-00002", "A3C", "A3C", 0, 4, 1200, 30.5, 1, 0},
		{"t-00003", "LM (batch size 20)", "LM", 20, 2, 800, 60, 3, 1.2},
	}
	for i, w := range want {
		j := tr.Jobs[i]
		if j.ID != w.id || j.JobType != w.typ || j.Model != w.model || j.BatchSize != w.batch || j.GPUs != w.gpus ||
			j.TotalSteps != w.steps || j.ArrivalS != w.arr || j.Priority != w.prio || j.SLO != w.slo {
			t.Errorf("job %d = %+v, want %+v", i, j, w)
		}
	}
}

func TestParseGavelErrors(t *testing.T) {
	cases := []struct{ name, in, want string }{
		{"columns", "a\tb\tc\n", "t.trace:1: 3 tab-separated fields"},
		{"steps", gavel7 + "A3C\tc\t-n\t1\tmany\t3\t1\n", "t.trace:3: field total_steps = \"many\""},
		{"negative arrival", "A3C\tc\t-n\t1\t10\t-3\t1\n", "t.trace:1: field arrival_time = \"-3\""},
		{"gpus", "A3C\tc\t-n\t1\t10\t3\t0\n", "t.trace:1: field scale_factor = \"0\""},
		{"job type", "LM (batch size x)\tc\t-n\t1\t10\t3\t1\n", "t.trace:1: field job_type"},
		{"priority", "A3C\tc\t/w\t-n\t1\t10\t1\t-2\tNone\t5\n", "t.trace:1: field priority_weight = \"-2\""},
		{"slo", "A3C\tc\t/w\t-n\t1\t10\t1\t1\tsoon\t5\n", "t.trace:1: field SLO = \"soon\""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseGavel(strings.NewReader(c.in), "t.trace")
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want %q", err, c.want)
			}
		})
	}
}

func TestWriteGavelRoundTrip(t *testing.T) {
	tr, err := ParseGavel(strings.NewReader(gavel7), "t.trace")
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := WriteGavel(&b, tr); err != nil {
		t.Fatal(err)
	}
	back, err := ParseGavel(strings.NewReader(b.String()), "t.trace")
	if err != nil {
		t.Fatal(err)
	}
	for i := range tr.Jobs {
		a, c := tr.Jobs[i], back.Jobs[i]
		if a.JobType != c.JobType || a.GPUs != c.GPUs || a.TotalSteps != c.TotalSteps || a.ArrivalS != c.ArrivalS {
			t.Fatalf("round trip %+v -> %+v", a, c)
		}
	}
}

func TestSplitJobType(t *testing.T) {
	for _, c := range []struct {
		in    string
		model string
		batch int
		ok    bool
	}{
		{"ResNet-18 (batch size 256)", "ResNet-18", 256, true},
		{"A3C", "A3C", 0, true},
		{"LM (batch size 0)", "", 0, false},
		{"(batch size 5)", "", 0, false},
		{"", "", 0, false},
	} {
		m, b, err := SplitJobType(c.in)
		if (err == nil) != c.ok || m != c.model || b != c.batch {
			t.Errorf("SplitJobType(%q) = %q, %d, %v", c.in, m, b, err)
		}
	}
}

func ref(jt, g string, n int) (float64, bool) {
	if g == "none" {
		return 0, false
	}
	return 2 * float64(n), true
}

func TestSynthetic(t *testing.T) {
	sp, err := ParseSyntheticSpec("jobs=4000,rate=5,seed=9")
	if err != nil {
		t.Fatal(err)
	}
	measured := func(jt, g string, n int) bool { return jt != "A3C" && jt != "CycleGAN" }
	tr, err := Synthetic(sp, SyntheticOptions{Throughput: ref, Measured: measured})
	if err != nil {
		t.Fatal(err)
	}
	again, _ := Synthetic(sp, SyntheticOptions{Throughput: ref, Measured: measured})
	counts := map[int]int{}
	long := 0
	for i, j := range tr.Jobs {
		if j != again.Jobs[i] {
			t.Fatalf("not deterministic at job %d", i)
		}
		counts[j.GPUs]++
		if (j.JobType == "A3C" || j.JobType == "CycleGAN") && j.GPUs != 1 {
			t.Fatalf("non-distributed %s got %d GPUs", j.JobType, j.GPUs)
		}
		if j.DurationS < 60*math.Pow(10, 1.5)-1e-6 || j.DurationS > 60*1e4+1e-6 {
			t.Fatalf("duration %v outside Gavel's range", j.DurationS)
		}
		if j.DurationS > 60*1000 {
			long++
		}
		if math.Abs(j.TotalSteps-j.DurationS*2*float64(j.GPUs)) > 1e-6*j.TotalSteps {
			t.Fatalf("steps %v != duration x throughput", j.TotalSteps)
		}
	}
	n := float64(len(tr.Jobs))
	// 24 of 26 job types are distributed: 1 GPU with p = 0.7*24/26 + 2/26.
	p1 := 0.7*24/26 + 2.0/26
	if f := float64(counts[1]) / n; math.Abs(f-p1) > 0.03 {
		t.Errorf("1-GPU fraction %.3f, want about %.3f", f, p1)
	}
	if f := float64(counts[8]) / n; math.Abs(f-0.05*24/26) > 0.015 {
		t.Errorf("8-GPU fraction %.3f, want about %.3f", f, 0.05*24/26)
	}
	if f := float64(long) / n; math.Abs(f-0.2) > 0.03 {
		t.Errorf("long-job fraction %.3f, want about 0.2", f)
	}
	span := tr.Jobs[len(tr.Jobs)-1].ArrivalS / 3600
	if rate := (n - 1) / span; math.Abs(rate-5) > 0.4 {
		t.Errorf("arrival rate %.2f/h, want about 5", rate)
	}
}

func TestSyntheticSpecErrors(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"rate=2", "key jobs is missing"},
		{"jobs=10", "key rate is missing"},
		{"jobs=x,rate=1", "key jobs = \"x\""},
		{"jobs=10,rate=-1", "key rate = \"-1\""},
		{"jobs=10,rate=1,seed=-4", "key seed = \"-4\""},
		{"jobs=10,rate=1,multigpu=maybe", "key multigpu = \"maybe\""},
		{"jobs=10,rate=1,colour=red", "unknown key \"colour\""},
		{"jobs", "not key=value"},
	} {
		if _, err := ParseSyntheticSpec(c.in); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseSyntheticSpec(%q) error %v, want %q", c.in, err, c.want)
		}
	}
}

func TestResolveWorkAndValidate(t *testing.T) {
	jobs := []Job{{ID: "a", JobType: "A3C", GPUs: 2, DurationS: 100, RefGPUType: "v100"}}
	if err := ResolveWork(jobs, ref); err != nil || jobs[0].TotalSteps != 400 {
		t.Fatalf("ResolveWork: %v, steps %v", err, jobs[0].TotalSteps)
	}
	bad := []Job{{ID: "b", JobType: "A3C", GPUs: 1, DurationS: 5, RefGPUType: "none", Source: "f:3"}}
	if err := ResolveWork(bad, ref); err == nil || !strings.Contains(err.Error(), "f:3") {
		t.Fatalf("ResolveWork error %v should name f:3", err)
	}
	tr := &Trace{Name: "x", Jobs: []Job{jobs[0], jobs[0]}}
	if err := tr.Validate(); err == nil || !strings.Contains(err.Error(), "duplicated") {
		t.Fatalf("Validate duplicate: %v", err)
	}
}
