package trace

import (
	"strings"
	"testing"
)

// A Philly cluster_job_log sample in the published layout: a JSON array of jobs with attempts.
const phillySample = `[
{"status": "Pass", "vc": "6214e9", "jobid": "application_1506638472019_10238", "user": "u1",
 "submitted_time": "2017-10-03 00:42:09",
 "attempts": [{"start_time": "2017-10-03 00:46:29", "end_time": "2017-10-03 01:46:29",
               "detail": [{"ip": "m94", "gpus": ["gpu0", "gpu1"]}, {"ip": "m95", "gpus": ["gpu3", "gpu4"]}]},
              {"start_time": "2017-10-03 02:00:00", "end_time": "2017-10-03 02:30:00",
               "detail": [{"ip": "m96", "gpus": ["gpu0", "gpu1", "gpu2", "gpu3"]}]}]},
{"status": "Killed", "vc": "ee9e8c", "jobid": "application_1506638472019_10239", "user": "u2",
 "submitted_time": "2017-10-03 00:40:00",
 "attempts": [{"start_time": "2017-10-03 00:41:00", "end_time": "2017-10-03 00:51:00",
               "detail": [{"ip": "m1", "gpus": ["gpu0"]}]}]},
{"status": "Failed", "vc": "ee9e8c", "jobid": "application_1506638472019_10240", "user": "u2",
 "submitted_time": "2017-10-03 00:50:00", "attempts": []}
]`

// wantParsed fails the test unless the parse that gave tr and err succeeded with jobs jobs
// and skipped skipped.
func wantParsed(t *testing.T, tr *Trace, err error, jobs, skipped int) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	if len(tr.Jobs) != jobs || tr.Skipped != skipped {
		t.Fatalf("%d jobs, %d skipped; want %d and %d: %+v", len(tr.Jobs), tr.Skipped, jobs, skipped, tr.Jobs)
	}
}

func TestParsePhilly(t *testing.T) {
	tr, err := ParsePhilly(strings.NewReader(phillySample), "cluster_job_log", FormatOptions{})
	wantParsed(t, tr, err, 2, 1) // the third never ran
	a, b := tr.Jobs[0], tr.Jobs[1]
	if a.ID != "application_1506638472019_10239" || a.ArrivalS != 0 || a.GPUs != 1 || a.DurationS != 600 || a.Namespace != "ee9e8c" {
		t.Errorf("first job %+v", a)
	}
	if b.ArrivalS != 129 || b.GPUs != 4 || b.DurationS != 3600+1800 || b.RefGPUType != "p100" || b.Source != "cluster_job_log:2" {
		t.Errorf("second job %+v", b)
	}
	if b.JobType == "" || b.JobType != pickJobType(b.ID, DefaultJobTypes()) {
		t.Errorf("job type %q not the hash-assigned one", b.JobType)
	}
}

func TestParsePhillyErrors(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`{"a": 1}`, "cluster_job_log:1: expected a JSON array"},
		{"[\n{\"jobid\": \"x\", \"submitted_time\": \"yesterday\", \"attempts\": []}\n]", `cluster_job_log:2: job x: field submitted_time = "yesterday"`},
		{"[\n{\"jobid\": \"x\", \"submitted_time\": \"2017-10-03 00:40:00\",\n \"attempts\": [{\"start_time\": \"2017-10-03 00:41:00\", \"end_time\": \"noon\", \"detail\": []}]}]", "field attempts[0].end_time = \"noon\""},
		{"[\n{\"jobid\": 5}]", "cluster_job_log:2: field jobid"},
		{"[\n{\"jobid\": \"\"}]", "field jobid is empty"},
	} {
		_, err := ParsePhilly(strings.NewReader(c.in), "cluster_job_log", FormatOptions{})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("input %q: error %v, want %q", c.in, err, c.want)
		}
	}
}

// A Helios cluster_log.csv sample with the published header.
const heliosSample = `job_id,user,vc,jobname,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,duration,queue
1,u1,vc1,train,8,32,1,COMPLETED,2020-04-01 00:00:10,2020-04-01 00:00:20,2020-04-01 01:00:20,3600,10
2,u2,vc1,cpu,0,4,1,COMPLETED,2020-04-01 00:00:00,2020-04-01 00:00:01,2020-04-01 00:10:01,600,1
3,u2,vc2,eval,1,4,1,FAILED,2020-04-01 00:00:05,2020-04-01 00:00:05,2020-04-01 00:00:35,30,0
`

func TestParseHelios(t *testing.T) {
	tr, err := ParseHelios(strings.NewReader(heliosSample), "cluster_log.csv", FormatOptions{})
	wantParsed(t, tr, err, 2, 1)
	if j := tr.Jobs[0]; j.ID != "helios-3" || j.ArrivalS != 0 || j.GPUs != 1 || j.DurationS != 30 || j.Namespace != "vc2" {
		t.Errorf("first %+v", j)
	}
	if j := tr.Jobs[1]; j.ID != "helios-1" || j.ArrivalS != 5 || j.GPUs != 8 || j.RefGPUType != "v100" || j.Source != "cluster_log.csv:2" {
		t.Errorf("second %+v", j)
	}
}

func TestParseHeliosErrors(t *testing.T) {
	hdr := "job_id,user,gpu_num,submit_time,duration\n"
	for _, c := range []struct{ in, want string }{
		{"job_id,user\n1,u\n", `header has no column "gpu_num"`},
		{hdr + "1,u,two,2020-04-01 00:00:00,5\n", `cluster_log.csv:2: field gpu_num = "two"`},
		{hdr + "1,u,1,2020-04-01 00:00:00,5\n2,u,1,someday,5\n", `cluster_log.csv:3: field submit_time = "someday"`},
		{hdr + "1,u,1,2020-04-01 00:00:00,-5\n", `field duration = "-5"`},
		{hdr + "1,u,1\n", "field submit_time is missing"},
	} {
		_, err := ParseHelios(strings.NewReader(c.in), "cluster_log.csv", FormatOptions{})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("input %q: error %v, want %q", c.in, err, c.want)
		}
	}
}

// PAI 2020 samples in the published (headerless) layouts.
const paiJobs = `job_a,inst_a,user1,Terminated,100,500
job_b,inst_b,user2,Terminated,50,900
job_c,inst_c,user3,Terminated,70,80
job_d,inst_d,user4,Running,60,
`

const paiTasks = `job_a,worker,2,Terminated,120,480,600,29.3,100,V100
job_a,ps,1,Terminated,110,490,400,10,,
job_b,tensorflow,1,Terminated,60,860,600,29.3,50,T4
job_c,worker,1,Terminated,70,80,600,29.3,,
job_d,worker,1,Running,65,,600,29.3,100,P100
`

func TestParsePAI(t *testing.T) {
	tr, err := ParsePAI(strings.NewReader(paiJobs), "pai_job_table.csv", strings.NewReader(paiTasks), "pai_task_table.csv", FormatOptions{})
	wantParsed(t, tr, err, 2, 2)
	b, a := tr.Jobs[0], tr.Jobs[1]
	if b.ID != "pai-job_b" || b.ArrivalS != 0 || b.GPUs != 1 || b.DurationS != 800 || b.RefGPUType != "t4" {
		t.Errorf("job_b %+v", b)
	}
	if a.ID != "pai-job_a" || a.ArrivalS != 50 || a.GPUs != 2 || a.DurationS != 360 || a.RefGPUType != "v100" || a.User != "user1" {
		t.Errorf("job_a %+v", a)
	}
	// A header row in the published column names is accepted.
	hj := "job_name,inst_id,user,status,start_time,end_time\n" + paiJobs
	ht := "job_name,task_name,inst_num,status,start_time,end_time,plan_cpu,plan_mem,plan_gpu,gpu_type\n" + paiTasks
	if tr2, err := ParsePAI(strings.NewReader(hj), "j", strings.NewReader(ht), "t", FormatOptions{}); err != nil || len(tr2.Jobs) != 2 {
		t.Fatalf("with headers: %v", err)
	}
}

func TestParsePAIErrors(t *testing.T) {
	for _, c := range []struct{ jobs, tasks, want string }{
		{paiJobs, "job_a,worker,2,Terminated,120,480,600,29.3,lots,V100\n", `pai_task_table.csv:1: field plan_gpu = "lots"`},
		{paiJobs, "job_a,worker\n", "pai_task_table.csv:1: 2 fields, expected 10"},
		{"job_a,i,u,Terminated,abc,5\n", paiTasks, `pai_job_table.csv:1: field start_time = "abc"`},
		{paiJobs, "job_a,worker,x,Terminated,120,480,600,29.3,100,V100\n", `field inst_num = "x"`},
	} {
		_, err := ParsePAI(strings.NewReader(c.jobs), "pai_job_table.csv", strings.NewReader(c.tasks), "pai_task_table.csv", FormatOptions{})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("error %v, want %q", err, c.want)
		}
	}
}
