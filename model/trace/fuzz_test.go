package trace

import (
	"math"
	"strings"
	"testing"
)

// checkJobs is what every successful parse must give.
func checkJobs(t *testing.T, tr *Trace) {
	t.Helper()
	for i, j := range tr.Jobs {
		if j.GPUs <= 0 || j.ArrivalS < 0 || math.IsNaN(j.ArrivalS) || math.IsInf(j.ArrivalS, 0) || j.JobType == "" {
			t.Fatalf("job %d invalid: %+v", i, j)
		}
		if i > 0 && tr.Jobs[i-1].ArrivalS > j.ArrivalS {
			t.Fatalf("jobs not sorted by arrival at %d", i)
		}
		if j.TotalSteps <= 0 && j.DurationS <= 0 {
			t.Fatalf("job %d has no work: %+v", i, j)
		}
	}
}

func FuzzParseGavel(f *testing.F) {
	f.Add(gavel7)
	f.Add(gavel10)
	f.Add("A3C\tc\t-n\t1\t1e308\t1e308\t1\n")
	f.Add("\n\n\t\t\t\t\t\t\n")
	f.Fuzz(func(t *testing.T, in string) {
		tr, err := ParseGavel(strings.NewReader(in), "f")
		if err == nil {
			checkJobs(t, tr)
		}
	})
}

func FuzzParsePhilly(f *testing.F) {
	f.Add(phillySample)
	f.Add(`[]`)
	f.Add(`[{"jobid":"x","submitted_time":"2017-10-03 00:40:00","attempts":[{"start_time":"2017-10-03 00:41:00","end_time":"2017-10-03 00:41:01","detail":[{"gpus":["a"]}]}]}]`)
	f.Fuzz(func(t *testing.T, in string) {
		tr, err := ParsePhilly(strings.NewReader(in), "f", FormatOptions{})
		if err == nil {
			checkJobs(t, tr)
		}
	})
}

func FuzzParseHelios(f *testing.F) {
	f.Add(heliosSample)
	f.Add("job_id,gpu_num,submit_time,duration\n1,1,0,1\n")
	f.Fuzz(func(t *testing.T, in string) {
		tr, err := ParseHelios(strings.NewReader(in), "f", FormatOptions{})
		if err == nil {
			checkJobs(t, tr)
		}
	})
}

func FuzzParsePAI(f *testing.F) {
	f.Add(paiJobs, paiTasks)
	f.Add("a,b,c,d,1,2\n", "a,w,1,x,1,2,1,1,100,T4\n")
	f.Fuzz(func(t *testing.T, jobs, tasks string) {
		tr, err := ParsePAI(strings.NewReader(jobs), "j", strings.NewReader(tasks), "t", FormatOptions{})
		if err == nil {
			checkJobs(t, tr)
		}
	})
}

func FuzzSyntheticSpec(f *testing.F) {
	f.Add("jobs=100,rate=2,seed=1")
	f.Add("jobs=1,rate=1e-9,ref=t4,multigpu=false")
	f.Fuzz(func(t *testing.T, in string) {
		sp, err := ParseSyntheticSpec(in)
		if err != nil {
			return
		}
		back, err := ParseSyntheticSpec(sp.String())
		if err != nil || back.Jobs != sp.Jobs || back.RatePerHour != sp.RatePerHour || back.Seed != sp.Seed || back.MultiGPU != sp.MultiGPU {
			t.Fatalf("round trip of %q: %+v -> %+v (%v)", in, sp, back, err)
		}
		if sp.Jobs > 2000 {
			sp.Jobs = 2000
		}
		tr, err := Synthetic(sp, SyntheticOptions{Throughput: ref})
		if err == nil {
			checkJobs(t, tr)
		}
	})
}
