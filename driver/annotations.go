package driver

import (
	"strings"

	"github.com/hetgpu/hetgpu/model/annot"
)

// annotations are the hetgpu.* job/group meta keys the run record carries as features. Nomad
// hands meta to the task as NOMAD_META_<key> environment variables (also upper-cased, and
// with characters other than letters, digits and '_' possibly replaced by '_'), so keys are
// compared after normalising both sides; the values are parsed by model/annot, so the
// driver and the sidecar agree on what a well-formed annotation is.
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

// annotKey returns the annot key a normalised env key stands for, and whether it is one of the
// older spellings the driver still accepts (see README); the annot key wins when both are set.
func annotKey(n string) (key string, alias bool) {
	for _, k := range annot.Keys() {
		if normMetaKey(k.Key) == n {
			return k.Key, false
		}
	}
	switch n {
	case "hetgpu_batch":
		return annot.KeyBatchSize, true
	case "hetgpu_param_count":
		return annot.KeyParams, true
	}
	return "", false
}

// parseAnnotations reads the hetgpu annotations from a task environment.
func parseAnnotations(env map[string]string) annotations {
	meta := map[string]string{}
	aliased := map[string]string{}
	for k, v := range env {
		rest, ok := strings.CutPrefix(k, "NOMAD_META_")
		if !ok {
			continue
		}
		// Unknown hetgpu_* keys are the sidecar's business, not a problem of this task.
		key, alias := annotKey(normMetaKey(rest))
		if key == "" {
			continue
		}
		if alias {
			aliased[key] = v
			continue
		}
		// The exact lower-case spelling wins over the upper-cased copy if they differ.
		if _, seen := meta[key]; !seen || rest == strings.ToLower(rest) {
			meta[key] = v
		}
	}
	for key, v := range aliased {
		if _, ok := meta[key]; !ok {
			meta[key] = v
		}
	}
	parsed, err := annot.Parse(meta, nil, "")
	a := annotations{
		ModelFamily: parsed.ModelFamily,
		ModelName:   parsed.ModelName,
		BatchSize:   parsed.BatchSize,
		ParamCount:  parsed.ParamCount,
		Framework:   parsed.Framework,
	}
	for _, e := range annot.Errors(err) {
		a.Problems = append(a.Problems, e.Error())
	}
	return a
}
