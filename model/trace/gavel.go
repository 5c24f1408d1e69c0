package trace

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// Gavel's trace format is tab-separated, one job per line, in one of two layouts:
//
//	7 columns:  job_type, command, num_steps_arg, needs_data_dir, total_steps, arrival_time, scale_factor
//	10 columns: job_type, command, working_directory, num_steps_arg, needs_data_dir, total_steps,
//	            scale_factor, priority_weight, SLO, arrival_time
//
// scale_factor is the number of GPUs; total_steps the work in training steps; arrival_time
// seconds from the start of the trace. An SLO of -1 or "None" means none.
var (
	gavel7Cols  = []string{"job_type", "command", "num_steps_arg", "needs_data_dir", "total_steps", "arrival_time", "scale_factor"}
	gavel10Cols = []string{"job_type", "command", "working_directory", "num_steps_arg", "needs_data_dir", "total_steps", "scale_factor", "priority_weight", "SLO", "arrival_time"}
)

// ParseGavel reads a trace in Gavel's format. file names the source in errors and prefixes job
// IDs ("<file>-<line>").
func ParseGavel(r io.Reader, file string) (*Trace, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 4*1024*1024)
	t := &Trace{Name: file}
	idPrefix := strings.TrimSuffix(baseName(file), ".trace")
	line := 0
	for sc.Scan() {
		line++
		text := strings.TrimRight(sc.Text(), "\r")
		if strings.TrimSpace(text) == "" {
			continue
		}
		f := strings.Split(text, "\t")
		var cols []string
		switch len(f) {
		case 7:
			cols = gavel7Cols
		case 10:
			cols = gavel10Cols
		default:
			return nil, fmt.Errorf("%s:%d: %d tab-separated fields, expected 7 (%s) or 10 (%s)",
				file, line, len(f), strings.Join(gavel7Cols, ", "), strings.Join(gavel10Cols, ", "))
		}
		get := func(name string) string {
			for i, c := range cols {
				if c == name {
					return strings.TrimSpace(f[i])
				}
			}
			return ""
		}
		j := Job{
			ID:        fmt.Sprintf("%s-%05d", idPrefix, line),
			Namespace: "default",
			User:      idPrefix,
			Priority:  1,
			Source:    fmt.Sprintf("%s:%d", file, line),
		}
		if err := j.setType(get("job_type")); err != nil {
			return nil, fmt.Errorf("%s:%d: field job_type: %w", file, line, err)
		}
		var err error
		if j.TotalSteps, err = posFloat(get("total_steps")); err != nil {
			return nil, fmt.Errorf("%s:%d: field total_steps = %q: %w", file, line, get("total_steps"), err)
		}
		if j.ArrivalS, err = nonNegFloat(get("arrival_time")); err != nil {
			return nil, fmt.Errorf("%s:%d: field arrival_time = %q: %w", file, line, get("arrival_time"), err)
		}
		if j.GPUs, err = posInt(get("scale_factor")); err != nil {
			return nil, fmt.Errorf("%s:%d: field scale_factor = %q: %w", file, line, get("scale_factor"), err)
		}
		if len(f) == 10 {
			if j.Priority, err = posFloat(get("priority_weight")); err != nil {
				return nil, fmt.Errorf("%s:%d: field priority_weight = %q: %w", file, line, get("priority_weight"), err)
			}
			if s := get("SLO"); s != "None" && s != "-1" && s != "" {
				if j.SLO, err = posFloat(s); err != nil {
					return nil, fmt.Errorf("%s:%d: field SLO = %q: %w (or -1/None for none)", file, line, s, err)
				}
			}
		}
		t.Jobs = append(t.Jobs, j)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s:%d: %w", file, line+1, err)
	}
	sortByArrival(t.Jobs)
	return t, nil
}

// WriteGavel writes jobs in the 7-column Gavel format (the command columns are placeholders).
func WriteGavel(w io.Writer, t *Trace) error {
	bw := bufio.NewWriter(w)
	for _, j := range t.Jobs {
		steps := j.TotalSteps
		if _, err := fmt.Fprintf(bw, "%s\t%s\t-step\t1\t%d\t%.6f\t%d\n", j.JobType, "hetgpu-synthetic", int64(math.Ceil(steps)), j.ArrivalS, j.GPUs); err != nil {
			return err
		}
	}
	return bw.Flush()
}

func baseName(p string) string {
	if i := strings.LastIndexAny(p, `/\`); i >= 0 {
		return p[i+1:]
	}
	return p
}

func posFloat(s string) (float64, error) {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || !(v > 0) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("expected a positive number")
	}
	return v, nil
}

func nonNegFloat(s string) (float64, error) {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || !(v >= 0) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("expected a non-negative number")
	}
	return v, nil
}

func posInt(s string) (int, error) {
	v, err := strconv.Atoi(s)
	if err != nil || v <= 0 || v > 1<<20 {
		return 0, fmt.Errorf("expected a positive integer")
	}
	return v, nil
}
