// Package annot reads the hetgpu.* annotations a user writes in a Nomad job's or task group's
// meta, and defines the hold constraint that keeps an annotated job pending until the sidecar
// pins it.
//
// Annotations live in job meta or group meta; a key in group meta overrides the same key in
// job meta, so a multi-group job can share defaults. Every key is optional. Keys:
//
//	hetgpu.enable          bool      "true": hetgpu decides where this job runs. Without the
//	                                 hold constraint the job is only observed (shadow mode).
//	hetgpu.model           string    "family/name" or "name": "resnet/ResNet-50", "BERT".
//	hetgpu.batch_size      int       per-step batch size, >= 1.
//	hetgpu.params          number    parameter count, >= 0; suffixes K, M, B, T ("25.6M").
//	hetgpu.framework       string    "pytorch", "tensorflow", "jax" ... (letters, digits, ._-).
//	hetgpu.runtime         duration  estimated runtime on the reference GPU (V100), e.g. "2h30m".
//	hetgpu.steps           number    total training steps the job runs, > 0; with the runtime
//	                                 of a finished run it gives the measured throughput when
//	                                 the task driver reports none.
//	hetgpu.min_throughput  number    T_min: slowest acceptable throughput of the whole job in
//	                                 training steps per second (the predictor's unit, as in
//	                                 Gavel's tables), >= 0.
//	hetgpu.max_nodes       int       D_j: how many nodes the job may span, 1..1024.
//	hetgpu.energy_weight   number    0..1000: weight of energy against speed for this job,
//	                                 overriding the placement's default.
//	hetgpu.priority_class  string    one of "high", "normal", "low", "best-effort".
//	hetgpu.allow_sharing   bool      "true": the job may share its GPUs with another sharing job.
//	hetgpu.preemptible     bool      "true": the job checkpoints; hetgpu may stop it and start it
//	                                 again later or on faster GPUs (sidecar option preempt).
//	hetgpu.gang            bool      "false": the job's groups are decided one by one; by default
//	                                 the waiting GPU groups of one job form a gang, placed and
//	                                 preempted all or nothing.
//	hetgpu.ran             duration  how long the group already ran in earlier allocations. hetgpu
//	                                 writes it into the group's meta when it preempts a
//	                                 checkpointing group, so the next decision ranks the group by
//	                                 what is left of its runtime; a user re-running the job
//	                                 without it starts the count again.
//
// Any other key under "hetgpu." is an error, so a typo never goes unnoticed.
package annot

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/hetgpu/hetgpu/model/cluster"
)

// Prefix starts every annotation key.
const Prefix = "hetgpu."

// Annotation keys.
const (
	KeyEnable        = "hetgpu.enable"
	KeyModel         = "hetgpu.model"
	KeyBatchSize     = "hetgpu.batch_size"
	KeyParams        = "hetgpu.params"
	KeyFramework     = "hetgpu.framework"
	KeyRuntime       = "hetgpu.runtime"
	KeySteps         = "hetgpu.steps"
	KeyMinThroughput = "hetgpu.min_throughput"
	KeyMaxNodes      = "hetgpu.max_nodes"
	KeyEnergyWeight  = "hetgpu.energy_weight"
	KeyPriorityClass = "hetgpu.priority_class"
	KeyAllowSharing  = "hetgpu.allow_sharing"
	KeyPreemptible   = "hetgpu.preemptible"
	KeyGang          = "hetgpu.gang"
	KeyRan           = "hetgpu.ran"
)

// Limits of the numeric keys.
const (
	MaxNodesLimit     = 1024
	MaxEnergyWeight   = 1000
	maxBatchSize      = 1 << 24
	maxRuntime        = 365 * 24 * time.Hour
	maxFrameworkBytes = 64
	maxModelBytes     = 200
)

// PriorityClasses are the accepted values of hetgpu.priority_class, highest first.
var priorityClasses = []string{"high", "normal", "low", "best-effort"}

// PriorityClasses returns the accepted hetgpu.priority_class values, highest first.
func PriorityClasses() []string { return append([]string(nil), priorityClasses...) }

// KeyDoc documents one annotation key.
type KeyDoc struct {
	Key, Type, Expected, Example string
}

// Keys documents every annotation key, in the order of the README table.
func Keys() []KeyDoc {
	return []KeyDoc{
		{KeyEnable, "bool", "true or false", "true"},
		{KeyModel, "string", `"family/name" or "name", at most 200 bytes, no control characters`, "resnet/ResNet-50"},
		{KeyBatchSize, "int", "an integer from 1 to 16777216", "64"},
		{KeyParams, "number", "a non-negative number, optionally with a K, M, B or T suffix", "25.6M"},
		{KeyFramework, "string", "letters, digits, '.', '_' or '-', at most 64 bytes", "pytorch"},
		{KeyRuntime, "duration", `a positive Go duration up to 8760h, e.g. "2h30m"`, "2h"},
		{KeySteps, "number", "a positive number of training steps", "40000"},
		{KeyMinThroughput, "number", "a non-negative number of training steps per second (the whole job)", "3.5"},
		{KeyMaxNodes, "int", "an integer from 1 to 1024", "2"},
		{KeyEnergyWeight, "number", "a number from 0 to 1000", "0.5"},
		{KeyPriorityClass, "string", "one of " + strings.Join(priorityClasses, ", "), "normal"},
		{KeyAllowSharing, "bool", "true or false", "false"},
		{KeyPreemptible, "bool", "true or false", "false"},
		{KeyGang, "bool", "true or false", "false"},
		{KeyRan, "duration", `a non-negative Go duration up to 8760h, e.g. "3h20m" (hetgpu writes it when it preempts the group)`, "3h20m0s"},
	}
}

func expected(key string) string {
	for _, k := range Keys() {
		if k.Key == key {
			return k.Expected
		}
	}
	return ""
}

// Error is a malformed annotation: the key, the value as written and what was expected.
type Error struct {
	Key      string
	Value    string
	Expected string
	// Source is "job" or "group <name>": where the value came from.
	Source string
}

func (e *Error) Error() string {
	where := ""
	if e.Source != "" {
		where = " (" + e.Source + " meta)"
	}
	return fmt.Sprintf("%s = %q%s: expected %s", e.Key, e.Value, where, e.Expected)
}

// Merge combines job and group meta: group keys override job keys. It returns only hetgpu.*
// keys and, for each, where it came from.
func Merge(jobMeta, groupMeta map[string]string, group string) (values, sources map[string]string) {
	values, sources = map[string]string{}, map[string]string{}
	for k, v := range jobMeta {
		if strings.HasPrefix(k, Prefix) {
			values[k], sources[k] = v, "job"
		}
	}
	for k, v := range groupMeta {
		if strings.HasPrefix(k, Prefix) {
			values[k], sources[k] = v, "group "+strconv.Quote(group)
		}
	}
	return values, sources
}

// Has reports whether job or group meta carries any hetgpu.* key.
func Has(jobMeta, groupMeta map[string]string) bool {
	for _, m := range []map[string]string{jobMeta, groupMeta} {
		for k := range m {
			if strings.HasPrefix(k, Prefix) {
				return true
			}
		}
	}
	return false
}

// Parse reads the annotations of one task group from job and group meta. Every malformed key
// is reported (joined, in key order) as an *Error; the returned Annotations hold the keys that
// parsed.
func Parse(jobMeta, groupMeta map[string]string, group string) (cluster.Annotations, error) {
	values, sources := Merge(jobMeta, groupMeta, group)
	var a cluster.Annotations
	keys := make([]string, 0, len(values))
	for k := range values {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var errs []error
	for _, k := range keys {
		v := values[k]
		if err := parseKey(&a, k, v); err != nil {
			e := &Error{Key: k, Value: v, Expected: expected(k), Source: sources[k]}
			if e.Expected == "" {
				e.Expected = "one of the documented keys (" + knownKeys() + ")"
			} else if msg := err.Error(); msg != "" && msg != "invalid" {
				e.Expected += " (" + msg + ")"
			}
			errs = append(errs, e)
		}
	}
	return a, errors.Join(errs...)
}

// Errors unpacks the *Error values of an error returned by Parse.
func Errors(err error) []*Error {
	var out []*Error
	var walk func(error)
	walk = func(err error) {
		if err == nil {
			return
		}
		if e, ok := err.(*Error); ok {
			out = append(out, e)
			return
		}
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			for _, x := range j.Unwrap() {
				walk(x)
			}
			return
		}
		walk(errors.Unwrap(err))
	}
	walk(err)
	return out
}

func knownKeys() string {
	var ks []string
	for _, k := range Keys() {
		ks = append(ks, k.Key)
	}
	return strings.Join(ks, ", ")
}

var errInvalid = errors.New("invalid")

func parseKey(a *cluster.Annotations, key, raw string) error {
	v := strings.TrimSpace(raw)
	switch key {
	case KeyEnable, KeyAllowSharing, KeyPreemptible, KeyGang:
		b, err := parseBool(v)
		if err != nil {
			return err
		}
		switch key {
		case KeyEnable:
			a.Enabled = b
		case KeyAllowSharing:
			a.AllowSharing = b
		case KeyGang:
			a.NoGang = !b
		default:
			a.Preemptible = b
		}
	case KeyModel:
		if v == "" || len(v) > maxModelBytes || hasControl(v) {
			return errInvalid
		}
		fam, name, ok := strings.Cut(v, "/")
		if !ok {
			a.ModelName = v
			return nil
		}
		fam, name = strings.TrimSpace(fam), strings.TrimSpace(name)
		if fam == "" || name == "" || strings.Contains(name, "/") {
			return errInvalid
		}
		a.ModelFamily, a.ModelName = fam, name
	case KeyBatchSize:
		n, err := intWithin(v, 1, maxBatchSize)
		if err != nil {
			return err
		}
		a.BatchSize = n
	case KeyParams:
		f, err := parseSuffixed(v)
		if err != nil || f < 0 {
			return errInvalid
		}
		a.ParamCount = f
	case KeyFramework:
		if v == "" || len(v) > maxFrameworkBytes || !isIdent(v) {
			return errInvalid
		}
		a.Framework = strings.ToLower(v)
	case KeyRuntime:
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 || d > maxRuntime {
			return errInvalid
		}
		a.EstRuntime = d
	case KeyRan:
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 || d > maxRuntime {
			return errInvalid
		}
		a.Ran = d
	case KeySteps:
		f, err := parseSuffixed(v)
		if err != nil || f <= 0 {
			return errInvalid
		}
		// Steps is not part of cluster.Annotations; Steps() reads it for the learner.
	case KeyMinThroughput:
		f, err := parseFloat(v)
		if err != nil || f < 0 {
			return errInvalid
		}
		a.MinThroughput = f
	case KeyMaxNodes:
		n, err := intWithin(v, 1, MaxNodesLimit)
		if err != nil {
			return err
		}
		a.MaxNodes = n
	case KeyEnergyWeight:
		f, err := parseFloat(v)
		if err != nil || f < 0 || f > MaxEnergyWeight {
			return errInvalid
		}
		a.EnergyWeight = f
	case KeyPriorityClass:
		c := strings.ToLower(v)
		for _, p := range priorityClasses {
			if c == p {
				a.PriorityClass = p
				return nil
			}
		}
		return errInvalid
	default:
		return errors.New("unknown key")
	}
	return nil
}

// intWithin parses an integer in [lo, hi]; errInvalid otherwise.
func intWithin(v string, lo, hi int) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		return 0, errInvalid
	}
	return n, nil
}

// Steps returns hetgpu.steps (total work) of a group, 0 when absent or malformed.
func Steps(jobMeta, groupMeta map[string]string, group string) float64 {
	values, _ := Merge(jobMeta, groupMeta, group)
	f, err := parseSuffixed(strings.TrimSpace(values[KeySteps]))
	if err != nil || f <= 0 {
		return 0
	}
	return f
}

func parseBool(v string) (bool, error) {
	switch strings.ToLower(v) {
	case "true", "1", "yes", "on":
		return true, nil
	case "false", "0", "no", "off":
		return false, nil
	}
	return false, errInvalid
}

// parseFloat accepts finite decimal numbers only (no NaN, Inf or hex floats).
func parseFloat(v string) (float64, error) {
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) || strings.ContainsAny(v, "xXpPnN_") {
		return 0, errInvalid
	}
	return f, nil
}

func parseSuffixed(v string) (float64, error) {
	mult := 1.0
	if n := len(v); n > 0 {
		switch v[n-1] {
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
			v = strings.TrimSpace(v[:n-1])
		}
	}
	f, err := parseFloat(v)
	if err != nil {
		return 0, err
	}
	f *= mult
	if math.IsInf(f, 0) {
		return 0, errInvalid
	}
	return f, nil
}

func isIdent(s string) bool {
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return false
		}
	}
	return true
}

func hasControl(s string) bool {
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return true
		}
	}
	return false
}
