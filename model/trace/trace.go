// Package trace holds the workloads the simulator replays: one Job per training job, loaded from
// published cluster traces (Gavel's trace format, Microsoft Philly, SenseTime Helios, Alibaba PAI
// 2020), generated with Gavel's synthetic recipe, or taken from the traces bundled in this
// package (see bundled.go).
//
// Work is measured in training steps of the job's type (a Gavel "job type" such as
// "ResNet-50 (batch size 64)"), so a job's runtime on any GPU type follows from the measured
// throughput table (model/throughput). Traces that only record wall time (Philly, Helios, PAI)
// keep it in DurationS together with the GPU type it was observed on; ResolveWork turns it into
// steps with the throughput table.
//
// Job-type assignment for traces without model information: the type is chosen by a hash of the
// job's ID over the job-type list (DefaultJobTypes unless the caller passes its own), so the same
// trace always gets the same mix, and the mix is close to uniform as in Gavel's own Philly-derived
// traces.
package trace

import (
	"fmt"
	"hash/fnv"
	"math"
	"sort"
	"strconv"
	"strings"
)

// Job is one training job of a trace.
type Job struct {
	// ID is unique within the trace and usable as a Nomad job ID.
	ID string
	// Namespace groups jobs (Philly virtual cluster, Helios VC, PAI user); "default" if none.
	Namespace string
	User      string
	// JobType is a Gavel job type string, e.g. "ResNet-50 (batch size 64)" or "A3C".
	JobType   string
	Model     string
	BatchSize int
	GPUs      int
	// ArrivalS is the submission time in seconds from the start of the trace.
	ArrivalS float64
	// TotalSteps is the job's work in training steps (0 until ResolveWork when only DurationS
	// is known).
	TotalSteps float64
	// DurationS is the runtime the trace recorded, on RefGPUType with GPUs GPUs, when the trace
	// gives time instead of steps.
	DurationS  float64
	RefGPUType string
	// Priority is Gavel's priority weight (1 when absent).
	Priority float64
	// SLO is Gavel's SLO factor (0 when absent).
	SLO float64
	// Source is "file:line" for jobs read from a file, for error messages.
	Source string
	// MinThroughput is the job's T_min in steps/s of the whole job (hetgpu.min_throughput);
	// 0 sets none.
	MinThroughput float64
}

// Trace is a named list of jobs sorted by arrival.
type Trace struct {
	Name string
	Jobs []Job
	// Skipped counts records a loader dropped on purpose (CPU-only jobs, jobs that never ran).
	Skipped int
}

// DefaultJobTypes returns Gavel's 26 job types, the ones the measured throughput table covers.
func DefaultJobTypes() []string {
	out := []string{"A3C", "CycleGAN"}
	for _, b := range []int{5, 10, 20, 40, 80} {
		out = append(out, fmt.Sprintf("LM (batch size %d)", b))
	}
	for _, b := range []int{512, 1024, 2048, 4096, 8192} {
		out = append(out, fmt.Sprintf("Recommendation (batch size %d)", b))
	}
	for _, b := range []int{16, 32, 64, 128, 256} {
		out = append(out, fmt.Sprintf("ResNet-18 (batch size %d)", b))
	}
	for _, b := range []int{16, 32, 64, 128} {
		out = append(out, fmt.Sprintf("ResNet-50 (batch size %d)", b))
	}
	for _, b := range []int{16, 32, 64, 128, 256} {
		out = append(out, fmt.Sprintf("Transformer (batch size %d)", b))
	}
	sort.Strings(out)
	return out
}

// SplitJobType parses "ResNet-50 (batch size 64)" into ("ResNet-50", 64); a type without a
// batch size ("A3C") gives batch 0.
func SplitJobType(s string) (model string, batch int, err error) {
	s = strings.TrimSpace(s)
	i := strings.Index(s, " (batch size ")
	if i < 0 {
		if s == "" || strings.ContainsAny(s, "()") {
			return "", 0, fmt.Errorf("job type %q: expected \"<model>\" or \"<model> (batch size <n>)\"", s)
		}
		return s, 0, nil
	}
	rest := s[i+len(" (batch size "):]
	if !strings.HasSuffix(rest, ")") {
		return "", 0, fmt.Errorf("job type %q: expected \"<model> (batch size <n>)\"", s)
	}
	b, err := strconv.Atoi(rest[:len(rest)-1])
	if err != nil || b <= 0 {
		return "", 0, fmt.Errorf("job type %q: batch size %q is not a positive integer", s, rest[:len(rest)-1])
	}
	return s[:i], b, nil
}

// pickJobType maps a job ID to a job type, deterministically (see the package comment).
func pickJobType(id string, types []string) string {
	h := fnv.New64a()
	h.Write([]byte(id))
	return types[h.Sum64()%uint64(len(types))]
}

// setType fills JobType, Model and BatchSize.
func (j *Job) setType(jobType string) error {
	m, b, err := SplitJobType(jobType)
	if err != nil {
		return err
	}
	j.JobType, j.Model, j.BatchSize = jobType, m, b
	return nil
}

// ThroughputFunc returns a job type's measured (or estimated) throughput in steps per second on
// gpus GPUs of gpuType. model/throughput's Table.Throughput, adapted, is the usual one.
type ThroughputFunc func(jobType, gpuType string, gpus int) (float64, bool)

// ResolveWork sets TotalSteps = DurationS x throughput(JobType, RefGPUType, GPUs) for every job
// that has a duration but no steps, so time-based traces replay their recorded runtime on the
// GPU type they ran on and scale on faster or slower ones.
func ResolveWork(jobs []Job, thr ThroughputFunc) error {
	for i := range jobs {
		j := &jobs[i]
		if j.TotalSteps > 0 || j.DurationS <= 0 {
			continue
		}
		v, ok := thr(j.JobType, j.RefGPUType, j.GPUs)
		if !ok || v <= 0 || math.IsNaN(v) {
			return fmt.Errorf("%s: job %s: no throughput for job type %q on %d x %s to turn its duration into steps",
				j.Source, j.ID, j.JobType, j.GPUs, j.RefGPUType)
		}
		j.TotalSteps = j.DurationS * v
	}
	return nil
}

// Validate checks what the simulator relies on: unique IDs, positive GPUs and work, finite
// non-negative arrivals.
// Bounds of a trace job: beyond them a value is a typo or corruption (1e12 steps run for
// three centuries at 100 steps/s).
const (
	MaxJobGPUs    = 100_000
	MaxTotalSteps = 1e12
	MaxArrivalS   = 100 * 365 * 24 * 3600.0
)

func (t *Trace) Validate() error {
	seen := make(map[string]bool, len(t.Jobs))
	for i := range t.Jobs {
		j := &t.Jobs[i]
		where := j.Source
		if where == "" {
			where = fmt.Sprintf("%s job %d", t.Name, i)
		}
		switch {
		case j.ID == "":
			return fmt.Errorf("%s: field id is empty", where)
		case seen[j.ID]:
			return fmt.Errorf("%s: field id = %q is duplicated", where, j.ID)
		case j.GPUs <= 0 || j.GPUs > MaxJobGPUs:
			return fmt.Errorf("%s: field gpus = %d, expected an integer from 1 to %d", where, j.GPUs, MaxJobGPUs)
		case !(j.TotalSteps > 0) || j.TotalSteps > MaxTotalSteps:
			return fmt.Errorf("%s: field total_steps = %v, expected a positive number of at most %g", where, j.TotalSteps, MaxTotalSteps)
		case !(j.ArrivalS >= 0) || j.ArrivalS > MaxArrivalS:
			return fmt.Errorf("%s: field arrival = %v, expected seconds from 0 to %g (a century)", where, j.ArrivalS, MaxArrivalS)
		case j.JobType == "":
			return fmt.Errorf("%s: field job_type is empty", where)
		}
		seen[j.ID] = true
	}
	return nil
}

// sortByArrival orders jobs by arrival, keeping file order for ties.
func sortByArrival(jobs []Job) {
	sort.SliceStable(jobs, func(a, b int) bool { return jobs[a].ArrivalS < jobs[b].ArrivalS })
}

// Window returns a copy of the trace whose first arrival is at 0, with at most n jobs (n <= 0: all)
// starting from job index from. It is how training and held-out windows are cut.
func (t *Trace) Window(name string, from, n int) (*Trace, error) {
	if from < 0 || from >= len(t.Jobs) {
		return nil, fmt.Errorf("window %s of trace %s: start index %d outside 0..%d", name, t.Name, from, len(t.Jobs)-1)
	}
	end := len(t.Jobs)
	if n > 0 && from+n < end {
		end = from + n
	}
	jobs := append([]Job(nil), t.Jobs[from:end]...)
	base := jobs[0].ArrivalS
	for i := range jobs {
		jobs[i].ArrivalS -= base
	}
	return &Trace{Name: name, Jobs: jobs}, nil
}

// Stats summarises a trace for logs and docs.
type Stats struct {
	Jobs       int
	GPUs       int
	SpanS      float64
	MultiGPU   int
	JobTypes   int
	MeanSteps  float64
	MaxGPUsJob int
}

// Stats computes summary statistics.
func (t *Trace) Stats() Stats {
	s := Stats{Jobs: len(t.Jobs)}
	types := map[string]bool{}
	for _, j := range t.Jobs {
		s.GPUs += j.GPUs
		if j.GPUs > 1 {
			s.MultiGPU++
		}
		if j.GPUs > s.MaxGPUsJob {
			s.MaxGPUsJob = j.GPUs
		}
		types[j.JobType] = true
		s.MeanSteps += j.TotalSteps
		if j.ArrivalS > s.SpanS {
			s.SpanS = j.ArrivalS
		}
	}
	s.JobTypes = len(types)
	if s.Jobs > 0 {
		s.MeanSteps /= float64(s.Jobs)
	}
	return s
}
