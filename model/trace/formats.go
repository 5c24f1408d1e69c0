package trace

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"
)

// FormatOptions tune the loaders of time-based traces (Philly, Helios, PAI).
type FormatOptions struct {
	// JobTypes assigned by hash of the job ID (DefaultJobTypes when empty).
	JobTypes []string
	// RefGPU overrides the GPU type the recorded durations are taken to have run on. Defaults:
	// Philly "p100" (Philly's 12/24 GB Pascal-era GPUs; P100 is the closest measured type),
	// Helios "v100" (SenseTime's V100 clusters), PAI the task's gpu_type (MISC and unknown ->
	// "p100").
	RefGPU string
}

func (o FormatOptions) types() []string {
	if len(o.JobTypes) > 0 {
		return o.JobTypes
	}
	return DefaultJobTypes()
}

func (o FormatOptions) ref(def string) string {
	if o.RefGPU != "" {
		return strings.ToLower(o.RefGPU)
	}
	return def
}

// --- Microsoft Philly (msr-fiddle/philly-traces, cluster_job_log, CC BY 4.0) ---

// phillyJob is one element of cluster_job_log: a JSON array of jobs.
type phillyJob struct {
	Status        string          `json:"status"`
	VC            string          `json:"vc"`
	JobID         string          `json:"jobid"`
	User          string          `json:"user"`
	SubmittedTime *string         `json:"submitted_time"`
	Attempts      []phillyAttempt `json:"attempts"`
}

type phillyAttempt struct {
	StartTime *string        `json:"start_time"`
	EndTime   *string        `json:"end_time"`
	Detail    []phillyDetail `json:"detail"`
}

type phillyDetail struct {
	IP   string   `json:"ip"`
	GPUs []string `json:"gpus"`
}

const phillyTimeLayout = "2006-01-02 15:04:05"

// ParsePhilly reads Philly's cluster_job_log. Each job becomes one Job: arrival = submitted_time
// (relative to the earliest), GPUs = GPUs held by the first attempt, duration = the sum of its
// attempts' run times (what the job occupied the cluster for, whatever its final status). Jobs
// that never ran (no attempt with both times) or held no GPU are skipped and counted in Skipped.
func ParsePhilly(r io.Reader, file string, o FormatOptions) (*Trace, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("%s: read: %w", file, err)
	}
	lineAt := func(off int64) int {
		if off > int64(len(data)) {
			off = int64(len(data))
		}
		return 1 + bytes.Count(data[:off], []byte{'\n'})
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	tok, err := dec.Token()
	if err != nil {
		return nil, fmt.Errorf("%s:%d: expected a JSON array of jobs: %w", file, lineAt(dec.InputOffset()), err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '[' {
		return nil, fmt.Errorf("%s:1: expected a JSON array of jobs, found %v", file, tok)
	}
	t := &Trace{Name: file}
	ref := o.ref("p100")
	first := math.Inf(1)
	for dec.More() {
		line := lineAt(dec.InputOffset())
		// InputOffset points before the separating comma and whitespace; step to the value.
		for off := dec.InputOffset(); off < int64(len(data)); off++ {
			c := data[off]
			if c == '{' || c == '[' || c == '"' || (c >= '0' && c <= '9') || c == 'n' || c == 't' || c == 'f' || c == '-' {
				line = lineAt(off)
				break
			}
		}
		var pj phillyJob
		if err := dec.Decode(&pj); err != nil {
			var ute *json.UnmarshalTypeError
			if errors.As(err, &ute) {
				return nil, fmt.Errorf("%s:%d: field %s: %s, expected %s", file, line, ute.Field, ute.Value, ute.Type)
			}
			return nil, fmt.Errorf("%s:%d: %w", file, line, err)
		}
		where := fmt.Sprintf("%s:%d", file, line)
		if pj.JobID == "" {
			return nil, fmt.Errorf("%s: field jobid is empty", where)
		}
		if pj.SubmittedTime == nil {
			return nil, fmt.Errorf("%s: job %s: field submitted_time is missing", where, pj.JobID)
		}
		sub, err := time.Parse(phillyTimeLayout, *pj.SubmittedTime)
		if err != nil {
			return nil, fmt.Errorf("%s: job %s: field submitted_time = %q, expected %q", where, pj.JobID, *pj.SubmittedTime, phillyTimeLayout)
		}
		var dur float64
		gpus := 0
		for ai, a := range pj.Attempts {
			if ai == 0 {
				for _, d := range a.Detail {
					gpus += len(d.GPUs)
				}
			}
			if a.StartTime == nil || a.EndTime == nil || *a.StartTime == "None" || *a.EndTime == "None" {
				continue
			}
			st, err := time.Parse(phillyTimeLayout, *a.StartTime)
			if err != nil {
				return nil, fmt.Errorf("%s: job %s: field attempts[%d].start_time = %q, expected %q", where, pj.JobID, ai, *a.StartTime, phillyTimeLayout)
			}
			et, err := time.Parse(phillyTimeLayout, *a.EndTime)
			if err != nil {
				return nil, fmt.Errorf("%s: job %s: field attempts[%d].end_time = %q, expected %q", where, pj.JobID, ai, *a.EndTime, phillyTimeLayout)
			}
			if et.Before(st) {
				return nil, fmt.Errorf("%s: job %s: field attempts[%d].end_time %s is before start_time %s", where, pj.JobID, ai, *a.EndTime, *a.StartTime)
			}
			dur += et.Sub(st).Seconds()
		}
		if gpus == 0 || dur <= 0 {
			t.Skipped++
			continue
		}
		arr := float64(sub.Unix())
		first = math.Min(first, arr)
		ns := pj.VC
		if ns == "" {
			ns = "default"
		}
		j := Job{ID: pj.JobID, Namespace: ns, User: pj.User, GPUs: gpus, ArrivalS: arr, DurationS: dur,
			RefGPUType: ref, Priority: 1, Source: where}
		if err := j.setType(pickJobType(pj.JobID, o.types())); err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		t.Jobs = append(t.Jobs, j)
	}
	if _, err := dec.Token(); err != nil {
		return nil, fmt.Errorf("%s:%d: expected the end of the job array: %w", file, lineAt(dec.InputOffset()), err)
	}
	rebase(t.Jobs, first)
	sortByArrival(t.Jobs)
	return t, nil
}

func rebase(jobs []Job, first float64) {
	for i := range jobs {
		jobs[i].ArrivalS -= first
	}
}

// --- SenseTime Helios (S-Lab-System-Group/HeliosData, cluster_log.csv, CC BY 4.0) ---

// heliosRequired are the cluster_log.csv columns the loader needs; the file's header row names
// them (the published file has job_id, user, vc, jobname, gpu_num, cpu_num, node_num, state,
// submit_time, start_time, end_time, duration, queue; extra or reordered columns are fine).
var heliosRequired = []string{"job_id", "gpu_num", "submit_time", "duration"}

// ParseHelios reads Helios' cluster_log.csv. arrival = submit_time (relative to the earliest),
// GPUs = gpu_num, duration = duration (seconds). CPU-only jobs (gpu_num 0) and jobs with zero
// duration are skipped and counted in Skipped.
func ParseHelios(r io.Reader, file string, o FormatOptions) (*Trace, error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1
	hdr, err := cr.Read()
	if err != nil {
		return nil, fmt.Errorf("%s:1: read header: %w", file, err)
	}
	col := map[string]int{}
	for i, h := range hdr {
		col[strings.TrimSpace(strings.TrimPrefix(h, "\ufeff"))] = i
	}
	for _, c := range heliosRequired {
		if _, ok := col[c]; !ok {
			return nil, fmt.Errorf("%s:1: header has no column %q (need %s)", file, c, strings.Join(heliosRequired, ", "))
		}
	}
	t := &Trace{Name: file}
	ref := o.ref("v100")
	first := math.Inf(1)
	for {
		rec, err := cr.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		line, _ := cr.FieldPos(0)
		field := func(name string) (string, error) {
			i, ok := col[name]
			if !ok {
				return "", nil
			}
			if i >= len(rec) {
				return "", fmt.Errorf("%s:%d: field %s is missing (%d fields, header has %d)", file, line, name, len(rec), len(hdr))
			}
			return strings.TrimSpace(rec[i]), nil
		}
		vals := map[string]string{}
		for _, c := range []string{"job_id", "gpu_num", "submit_time", "duration", "user", "vc", "node_num"} {
			if vals[c], err = field(c); err != nil {
				return nil, err
			}
		}
		where := fmt.Sprintf("%s:%d", file, line)
		if vals["job_id"] == "" {
			return nil, fmt.Errorf("%s: field job_id is empty", where)
		}
		gpus, err := strconv.Atoi(vals["gpu_num"])
		if err != nil || gpus < 0 || gpus > 1<<20 {
			return nil, fmt.Errorf("%s: field gpu_num = %q, expected a non-negative integer", where, vals["gpu_num"])
		}
		dur, err := strconv.ParseFloat(vals["duration"], 64)
		if err != nil || !(dur >= 0) || math.IsInf(dur, 0) {
			return nil, fmt.Errorf("%s: field duration = %q, expected a non-negative number of seconds", where, vals["duration"])
		}
		sub, err := parseTimeOrSeconds(vals["submit_time"])
		if err != nil {
			return nil, fmt.Errorf("%s: field submit_time = %q: %w", where, vals["submit_time"], err)
		}
		if gpus == 0 || dur == 0 {
			t.Skipped++
			continue
		}
		first = math.Min(first, sub)
		ns := vals["vc"]
		if ns == "" {
			ns = "default"
		}
		j := Job{ID: "helios-" + vals["job_id"], Namespace: ns, User: vals["user"], GPUs: gpus, ArrivalS: sub,
			DurationS: dur, RefGPUType: ref, Priority: 1, Source: where}
		if err := j.setType(pickJobType(j.ID, o.types())); err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		t.Jobs = append(t.Jobs, j)
	}
	rebase(t.Jobs, first)
	sortByArrival(t.Jobs)
	return t, nil
}

// parseTimeOrSeconds accepts "2020-04-01 00:00:24" (UTC) or a number of seconds.
func parseTimeOrSeconds(s string) (float64, error) {
	if v, err := strconv.ParseFloat(s, 64); err == nil {
		if !(v >= 0) || math.IsInf(v, 0) {
			return 0, fmt.Errorf("expected a non-negative number of seconds")
		}
		return v, nil
	}
	ts, err := time.Parse(phillyTimeLayout, s)
	if err != nil {
		return 0, fmt.Errorf("expected %q or seconds", phillyTimeLayout)
	}
	return float64(ts.Unix()), nil
}

// --- Alibaba PAI 2020 (alibaba/clusterdata cluster-trace-gpu-v2020, CC BY 4.0) ---

// Published layouts (the files have no header row; one matching these names is accepted).
var (
	paiJobCols  = []string{"job_name", "inst_id", "user", "status", "start_time", "end_time"}
	paiTaskCols = []string{"job_name", "task_name", "inst_num", "status", "start_time", "end_time", "plan_cpu", "plan_mem", "plan_gpu", "gpu_type"}
)

type paiTaskAgg struct {
	gpus       int
	start, end float64
	gpuType    string
	line       int
}

// ParsePAI reads pai_job_table and pai_task_table. A job's GPUs = sum over its tasks of
// inst_num x ceil(plan_gpu/100) (plan_gpu is in percent of one GPU); its duration = the span of
// its GPU tasks (latest end - earliest start); its arrival = the job's start_time (submission) in
// the job table; its GPU type = the gpu_type of its first GPU task (V100M32 -> v100, MISC ->
// p100). Jobs without GPU tasks or without finished GPU tasks are skipped and counted.
func ParsePAI(jobs io.Reader, jobFile string, tasks io.Reader, taskFile string, o FormatOptions) (*Trace, error) {
	agg := map[string]*paiTaskAgg{}
	if err := readPAI(tasks, taskFile, paiTaskCols, func(line int, f map[string]string) error {
		where := fmt.Sprintf("%s:%d", taskFile, line)
		pg := f["plan_gpu"]
		var planGPU float64
		if pg != "" {
			v, err := strconv.ParseFloat(pg, 64)
			if err != nil || !(v >= 0) || math.IsInf(v, 0) {
				return fmt.Errorf("%s: field plan_gpu = %q, expected a non-negative percentage of one GPU", where, pg)
			}
			planGPU = v
		}
		n, err := strconv.Atoi(f["inst_num"])
		if f["inst_num"] == "" {
			n, err = 1, nil
		}
		if err != nil || n < 0 || n > 1<<20 {
			return fmt.Errorf("%s: field inst_num = %q, expected a non-negative integer", where, f["inst_num"])
		}
		if planGPU == 0 || n == 0 {
			return nil
		}
		st, err := optSeconds(f["start_time"])
		if err != nil {
			return fmt.Errorf("%s: field start_time = %q: %w", where, f["start_time"], err)
		}
		et, err := optSeconds(f["end_time"])
		if err != nil {
			return fmt.Errorf("%s: field end_time = %q: %w", where, f["end_time"], err)
		}
		a := agg[f["job_name"]]
		if a == nil {
			a = &paiTaskAgg{start: math.Inf(1), end: math.Inf(-1), gpuType: paiGPUType(f["gpu_type"]), line: line}
			agg[f["job_name"]] = a
		}
		a.gpus += n * int(math.Ceil(planGPU/100))
		if !math.IsNaN(st) && !math.IsNaN(et) && et >= st {
			a.start = math.Min(a.start, st)
			a.end = math.Max(a.end, et)
		}
		return nil
	}); err != nil {
		return nil, err
	}
	t := &Trace{Name: jobFile}
	first := math.Inf(1)
	seen := map[string]bool{}
	if err := readPAI(jobs, jobFile, paiJobCols, func(line int, f map[string]string) error {
		where := fmt.Sprintf("%s:%d", jobFile, line)
		name := f["job_name"]
		if name == "" {
			return fmt.Errorf("%s: field job_name is empty", where)
		}
		sub, err := optSeconds(f["start_time"])
		if err != nil {
			return fmt.Errorf("%s: field start_time = %q: %w", where, f["start_time"], err)
		}
		if _, err := optSeconds(f["end_time"]); err != nil {
			return fmt.Errorf("%s: field end_time = %q: %w", where, f["end_time"], err)
		}
		a := agg[name]
		if a == nil || a.gpus == 0 || math.IsInf(a.start, 0) || a.end <= a.start || math.IsNaN(sub) || seen[name] {
			t.Skipped++
			return nil
		}
		seen[name] = true
		first = math.Min(first, sub)
		user := f["user"]
		j := Job{ID: "pai-" + name, Namespace: "default", User: user, GPUs: a.gpus, ArrivalS: sub,
			DurationS: a.end - a.start, RefGPUType: o.ref(a.gpuType), Priority: 1, Source: where}
		if err := j.setType(pickJobType(j.ID, o.types())); err != nil {
			return fmt.Errorf("%s: %w", where, err)
		}
		t.Jobs = append(t.Jobs, j)
		return nil
	}); err != nil {
		return nil, err
	}
	rebase(t.Jobs, first)
	sortByArrival(t.Jobs)
	return t, nil
}

func readPAI(r io.Reader, file string, cols []string, row func(line int, f map[string]string) error) error {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1
	first := true
	for {
		rec, err := cr.Read()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			// csv.ParseError already says "record on line N".
			return fmt.Errorf("%s: %w", file, err)
		}
		line, _ := cr.FieldPos(0)
		if first {
			first = false
			if len(rec) > 0 && strings.TrimSpace(strings.TrimPrefix(rec[0], "\ufeff")) == cols[0] {
				continue
			}
		}
		if len(rec) != len(cols) {
			return fmt.Errorf("%s:%d: %d fields, expected %d (%s)", file, line, len(rec), len(cols), strings.Join(cols, ","))
		}
		f := make(map[string]string, len(cols))
		for i, c := range cols {
			f[c] = strings.TrimSpace(rec[i])
		}
		if err := row(line, f); err != nil {
			return err
		}
	}
}

// optSeconds parses seconds; empty gives NaN (PAI leaves times of unfinished work empty).
func optSeconds(s string) (float64, error) {
	if s == "" {
		return math.NaN(), nil
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
		return 0, fmt.Errorf("expected a non-negative number of seconds or empty")
	}
	return v, nil
}

func paiGPUType(s string) string {
	switch strings.ToUpper(strings.TrimSpace(s)) {
	case "T4":
		return "t4"
	case "V100", "V100M32":
		return "v100"
	case "P100":
		return "p100"
	}
	return "p100"
}
