package trace

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"strings"
)

// LoadOptions carry what loaders need beyond the file.
type LoadOptions struct {
	// Seed is the synthetic generator's seed when the spec string names none.
	Seed uint64
	// Throughput turns durations into steps (time-based traces, synthetic); required for them.
	Throughput ThroughputFunc
	// Measured tells the synthetic generator which job types are distributed (see
	// SyntheticOptions).
	Measured func(jobType, gpuType string, gpus int) bool
	// JobTypes for synthetic and hash-assigned job types (DefaultJobTypes when empty).
	JobTypes []string
	// RefGPU overrides time-based traces' GPU type (see FormatOptions).
	RefGPU string
	// Shareable tells the synthetic generator which job types leave a GPU partly idle (key
	// shareable; see SyntheticOptions).
	Shareable func(jobType string) bool
}

// Load resolves a trace reference:
//
//	bundled:NAME                  a trace embedded in this package (BundledNames)
//	synthetic:jobs=N,rate=R,...   Gavel's synthetic recipe (ParseSyntheticSpec)
//	gavel:FILE | philly:FILE | helios:FILE
//	pai:JOB_TABLE,TASK_TABLE
//	FILE                          format from the name: *.json -> Philly cluster_job_log,
//	                              *cluster_log*.csv -> Helios, *pai_job_table* -> PAI (with
//	                              pai_task_table beside it), anything else -> Gavel; a .gz suffix
//	                              is decompressed first.
//
// Time-based traces get their steps from o.Throughput (ResolveWork). The trace is validated.
func Load(ref string, o LoadOptions) (*Trace, error) {
	t, err := load(ref, o)
	if err != nil {
		return nil, err
	}
	if err := ResolveWork(t.Jobs, o.throughput()); err != nil {
		return nil, err
	}
	if err := t.Validate(); err != nil {
		return nil, err
	}
	if len(t.Jobs) == 0 {
		return nil, fmt.Errorf("trace %s holds no jobs: expected at least one job line", ref)
	}
	return t, nil
}

func (o LoadOptions) throughput() ThroughputFunc {
	if o.Throughput != nil {
		return o.Throughput
	}
	return func(string, string, int) (float64, bool) { return 0, false }
}

func (o LoadOptions) format() FormatOptions {
	return FormatOptions{JobTypes: o.JobTypes, RefGPU: o.RefGPU}
}

func load(ref string, o LoadOptions) (*Trace, error) {
	kind, arg, ok := strings.Cut(ref, ":")
	if !ok || len(kind) == 1 { // "C:\..." style paths have a one-letter "kind"
		kind, arg = "", ref
	}
	switch kind {
	case "bundled":
		return Bundled(arg)
	case "synthetic":
		sp, err := ParseSyntheticSpec(arg)
		if err != nil {
			return nil, err
		}
		if !sp.SeedSet {
			sp.Seed = o.Seed
		}
		if o.Throughput == nil {
			return nil, fmt.Errorf("synthetic trace: no throughput table given")
		}
		return Synthetic(sp, SyntheticOptions{JobTypes: o.JobTypes, Throughput: o.Throughput, Measured: o.Measured,
			Shareable: o.Shareable})
	case "gavel", "philly", "helios":
		return loadFile(kind, arg, o)
	case "pai":
		jobs, tasks, ok := strings.Cut(arg, ",")
		if !ok {
			return nil, fmt.Errorf("trace %q: expected pai:JOB_TABLE,TASK_TABLE", ref)
		}
		return loadPAI(jobs, tasks, o)
	case "":
		name := strings.ToLower(baseName(strings.TrimSuffix(arg, ".gz")))
		switch {
		case strings.HasSuffix(name, ".json"):
			return loadFile("philly", arg, o)
		case strings.Contains(name, "cluster_log"):
			return loadFile("helios", arg, o)
		case strings.Contains(name, "pai_job_table"):
			dir := arg[:len(arg)-len(baseName(arg))]
			task := dir + strings.Replace(baseName(arg), "pai_job_table", "pai_task_table", 1)
			return loadPAI(arg, task, o)
		}
		return loadFile("gavel", arg, o)
	}
	return nil, fmt.Errorf("trace %q: unknown kind %q, expected bundled:, synthetic:, gavel:, philly:, helios:, pai: or a file path", ref, kind)
}

func readMaybeGz(path string) ([]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("trace: %w", err)
	}
	if strings.HasSuffix(path, ".gz") {
		zr, err := gzip.NewReader(bytes.NewReader(data))
		if err != nil {
			return nil, fmt.Errorf("trace %s: %w", path, err)
		}
		if data, err = io.ReadAll(zr); err != nil {
			return nil, fmt.Errorf("trace %s: %w", path, err)
		}
	}
	return data, nil
}

func loadFile(kind, path string, o LoadOptions) (*Trace, error) {
	data, err := readMaybeGz(path)
	if err != nil {
		return nil, err
	}
	switch kind {
	case "philly":
		return ParsePhilly(bytes.NewReader(data), path, o.format())
	case "helios":
		return ParseHelios(bytes.NewReader(data), path, o.format())
	}
	return ParseGavel(bytes.NewReader(data), path)
}

func loadPAI(jobs, tasks string, o LoadOptions) (*Trace, error) {
	jd, err := readMaybeGz(jobs)
	if err != nil {
		return nil, err
	}
	td, err := readMaybeGz(tasks)
	if err != nil {
		return nil, err
	}
	return ParsePAI(bytes.NewReader(jd), jobs, bytes.NewReader(td), tasks, o.format())
}
