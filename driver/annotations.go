package driver

import (
	"strconv"
	"strings"
)

// annotations are the hetgpu.* job/group meta keys the run record carries as features. Nomad
// hands meta to the task as NOMAD_META_<key> environment variables (also upper-cased, and
// with characters other than letters, digits and '_' possibly replaced by '_'), so keys are
// compared after normalising both sides.
type annotations struct {
	ModelFamily string
	ModelName   string
	BatchSize   int
	ParamCount  float64
	Framework   string
	// Problems lists values that could not be parsed; they are left out of the record.
	Problems []string
}

// normMetaKey maps "hetgpu.batch_size", "HETGPU_BATCH_SIZE" and "hetgpu-batch-size" alike.
func normMetaKey(k string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(k) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	return b.String()
}

// parseAnnotations reads the hetgpu annotations from a task environment.
func parseAnnotations(env map[string]string) annotations {
	meta := map[string]string{}
	for k, v := range env {
		rest, ok := strings.CutPrefix(k, "NOMAD_META_")
		if !ok {
			continue
		}
		n := normMetaKey(rest)
		if !strings.HasPrefix(n, "hetgpu_") {
			continue
		}
		// The exact lower-case spelling wins over the upper-cased copy if they differ.
		if _, seen := meta[n]; !seen || rest == strings.ToLower(rest) {
			meta[n] = strings.TrimSpace(v)
		}
	}
	var a annotations
	if m := meta["hetgpu_model"]; m != "" {
		if fam, name, ok := strings.Cut(m, "/"); ok {
			a.ModelFamily, a.ModelName = strings.TrimSpace(fam), strings.TrimSpace(name)
		} else {
			a.ModelName = m
		}
	}
	a.Framework = meta["hetgpu_framework"]
	for _, key := range []string{"hetgpu_batch_size", "hetgpu_batch"} {
		if v := meta[key]; v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n <= 0 {
				a.Problems = append(a.Problems, "hetgpu."+strings.TrimPrefix(key, "hetgpu_")+" = "+strconv.Quote(v)+": want a positive whole number")
				continue
			}
			a.BatchSize = n
			break
		}
	}
	for _, key := range []string{"hetgpu_param_count", "hetgpu_params"} {
		if v := meta[key]; v != "" {
			f, err := parseCount(v)
			if err != nil || f <= 0 {
				a.Problems = append(a.Problems, "hetgpu."+strings.TrimPrefix(key, "hetgpu_")+" = "+strconv.Quote(v)+`: want a positive number such as 25.6e6 or "25.6M"`)
				continue
			}
			a.ParamCount = f
			break
		}
	}
	return a
}

// parseCount accepts plain numbers and K/M/B/G/T suffixes ("340M", "1.5B").
func parseCount(s string) (float64, error) {
	s = strings.TrimSpace(s)
	mult := 1.0
	if n := len(s); n > 0 {
		switch s[n-1] {
		case 'k', 'K':
			mult = 1e3
		case 'm', 'M':
			mult = 1e6
		case 'b', 'B', 'g', 'G':
			mult = 1e9
		case 't', 'T':
			mult = 1e12
		}
		if mult != 1 {
			s = s[:n-1]
		}
	}
	f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	return f * mult, err
}
