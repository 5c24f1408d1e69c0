package trace

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
)

// SyntheticSpec is Gavel's synthetic workload recipe (Narayanan et al., OSDI 2020, section 7):
//   - arrivals: Poisson with RatePerHour jobs per hour (exponential inter-arrival times);
//   - job type: uniform over the job types;
//   - GPUs: 1, 2, 4, 8 with probability 0.70, 0.10, 0.15, 0.05 (only for job types that were
//     measured on more than one GPU on the reference type; the others always get 1, as Gavel does
//     for its non-distributed models);
//   - duration: 60*10^U(1.5,3) s for 80 % of jobs and 60*10^U(3,4) s for the rest;
//   - work: duration x the job's throughput on RefGPU with its GPU count, in steps.
type SyntheticSpec struct {
	Jobs        int
	RatePerHour float64
	Seed        uint64
	// RefGPU is the reference GPU type durations are measured on ("v100" as in Gavel).
	RefGPU string
	// MultiGPU enables the 1/2/4/8 GPU-count draw; false gives single-GPU jobs only.
	MultiGPU bool
	// SeedSet says the spec named a seed (otherwise the caller's --seed applies).
	SeedSet bool
	// Tenants, when > 0, spreads the jobs uniformly over namespaces tenant-0 .. tenant-(N-1)
	// (drawn from a generator of their own, so the jobs are those of the same spec without).
	Tenants int
	// Shareable, when > 0, draws that fraction of the jobs from the job types that leave a GPU
	// partly idle (SyntheticOptions.Shareable) instead of from all types (sharing.go).
	Shareable float64
	// TMin, when > 0, gives every job a T_min of TMin x its throughput on RefGPU.
	TMin float64
}

// syntheticKeys documents the spec string's keys, in the order errors list them.
var syntheticKeys = []string{"jobs", "rate", "seed", "ref", "multigpu", "tenants", "shareable", "tmin"}

// ParseSyntheticSpec parses "jobs=1000,rate=0.2,seed=1[,ref=v100][,multigpu=true]" (the part after
// "synthetic:"). rate is in jobs per hour, Gavel's unit. jobs and rate are required.
func ParseSyntheticSpec(s string) (SyntheticSpec, error) {
	sp := SyntheticSpec{RefGPU: "v100", MultiGPU: true}
	var haveJobs, haveRate bool
	for _, kv := range strings.Split(s, ",") {
		kv = strings.TrimSpace(kv)
		if kv == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return sp, fmt.Errorf("synthetic spec %q: %q is not key=value; keys: %s", s, kv, strings.Join(syntheticKeys, ", "))
		}
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		switch k {
		case "jobs":
			n, err := strconv.Atoi(v)
			if err != nil || n <= 0 || n > 10_000_000 {
				return sp, fmt.Errorf("synthetic spec: key jobs = %q, expected an integer in 1..10000000", v)
			}
			sp.Jobs, haveJobs = n, true
		case "rate":
			r, err := strconv.ParseFloat(v, 64)
			if err != nil || !(r > 0) || math.IsInf(r, 0) {
				return sp, fmt.Errorf("synthetic spec: key rate = %q, expected a positive number of jobs per hour", v)
			}
			sp.RatePerHour, haveRate = r, true
		case "seed":
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				return sp, fmt.Errorf("synthetic spec: key seed = %q, expected a non-negative integer", v)
			}
			sp.Seed, sp.SeedSet = n, true
		case "ref":
			if v == "" {
				return sp, fmt.Errorf("synthetic spec: key ref is empty, expected a GPU type such as v100")
			}
			sp.RefGPU = strings.ToLower(v)
		case "tenants":
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 || n > 1000 {
				return sp, fmt.Errorf("synthetic spec: key tenants = %q, expected an integer in 0..1000 (namespaces tenant-0, tenant-1, ...)", v)
			}
			sp.Tenants = n
		case "multigpu":
			b, err := strconv.ParseBool(v)
			if err != nil {
				return sp, fmt.Errorf("synthetic spec: key multigpu = %q, expected true or false", v)
			}
			sp.MultiGPU = b
		case "shareable", "tmin":
			f, err := strconv.ParseFloat(v, 64)
			if err != nil || !(f >= 0 && f <= 1) {
				return sp, fmt.Errorf("synthetic spec: key %s = %q, expected a number from 0 to 1", k, v)
			}
			if k == "shareable" {
				sp.Shareable = f
			} else {
				sp.TMin = f
			}
		default:
			return sp, fmt.Errorf("synthetic spec: unknown key %q; keys: %s", k, strings.Join(syntheticKeys, ", "))
		}
	}
	if !haveJobs {
		return sp, fmt.Errorf("synthetic spec %q: key jobs is missing (e.g. jobs=1000)", s)
	}
	if !haveRate {
		return sp, fmt.Errorf("synthetic spec %q: key rate is missing (jobs per hour, e.g. rate=2)", s)
	}
	return sp, nil
}

// String renders the spec in the form ParseSyntheticSpec reads.
func (sp SyntheticSpec) String() string {
	out := fmt.Sprintf("jobs=%d,rate=%g,seed=%d,ref=%s,multigpu=%t", sp.Jobs, sp.RatePerHour, sp.Seed, sp.RefGPU, sp.MultiGPU)
	if sp.Tenants > 0 {
		out += fmt.Sprintf(",tenants=%d", sp.Tenants)
	}
	if sp.Shareable > 0 {
		out += fmt.Sprintf(",shareable=%g", sp.Shareable)
	}
	if sp.TMin > 0 {
		out += fmt.Sprintf(",tmin=%g", sp.TMin)
	}
	return out
}

// SyntheticOptions supply what the recipe needs from the throughput table.
type SyntheticOptions struct {
	// JobTypes to draw from (DefaultJobTypes when empty).
	JobTypes []string
	// Throughput on the reference type; required.
	Throughput ThroughputFunc
	// Measured reports whether (job type, reference type, gpus) was measured; a job type counts as
	// distributed when it was measured at 2 GPUs. nil treats every type as distributed.
	Measured func(jobType, gpuType string, gpus int) bool
	// Shareable reports whether a job type leaves a GPU partly idle (needed for the
	// shareable key).
	Shareable func(jobType string) bool
}

// Synthetic generates a trace with Gavel's recipe. The same spec gives the same trace.
func Synthetic(sp SyntheticSpec, o SyntheticOptions) (*Trace, error) {
	if o.Throughput == nil {
		return nil, fmt.Errorf("synthetic trace: no throughput function to turn durations into steps")
	}
	types := o.JobTypes
	if len(types) == 0 {
		types = DefaultJobTypes()
	}
	types = append([]string(nil), types...)
	sort.Strings(types)
	distributed := make(map[string]bool, len(types))
	for _, jt := range types {
		distributed[jt] = o.Measured == nil || o.Measured(jt, sp.RefGPU, 2)
	}
	shareTypes, err := shareableTypes(sp, types, o.Shareable)
	if err != nil {
		return nil, err
	}
	rng := rand.New(rand.NewPCG(sp.Seed, 0x9e3779b97f4a7c15))
	tenants := rand.New(rand.NewPCG(sp.Seed, 0x7e4a475))
	t := &Trace{Name: "synthetic:" + sp.String(), Jobs: make([]Job, 0, sp.Jobs)}
	meanGap := 3600 / sp.RatePerHour
	now := 0.0
	for i := 0; i < sp.Jobs; i++ {
		if i > 0 {
			now += rng.ExpFloat64() * meanGap
		}
		jt := types[rng.IntN(len(types))]
		if len(shareTypes) > 0 && rng.Float64() < sp.Shareable {
			jt = shareTypes[rng.IntN(len(shareTypes))]
		}
		gpus := 1
		// Draw the count even for single-GPU types so one type's presence does not shift every
		// later draw.
		r := rng.Float64()
		if sp.MultiGPU && distributed[jt] {
			switch {
			case r >= 0.95:
				gpus = 8
			case r >= 0.80:
				gpus = 4
			case r >= 0.70:
				gpus = 2
			}
		}
		var minutes float64
		if rng.Float64() < 0.8 {
			minutes = math.Pow(10, 1.5+1.5*rng.Float64())
		} else {
			minutes = math.Pow(10, 3+rng.Float64())
		}
		dur := 60 * minutes
		thr, ok := o.Throughput(jt, sp.RefGPU, gpus)
		if !ok || !(thr > 0) {
			return nil, fmt.Errorf("synthetic trace: no throughput for %q on %d x %s (key ref)", jt, gpus, sp.RefGPU)
		}
		j := Job{
			ID:         fmt.Sprintf("syn-%06d", i),
			Namespace:  "default",
			User:       "synthetic",
			GPUs:       gpus,
			ArrivalS:   now,
			TotalSteps: dur * thr,
			DurationS:  dur,
			RefGPUType: sp.RefGPU,
			Priority:   1,
			Source:     fmt.Sprintf("synthetic job %d", i),
		}
		if sp.TMin > 0 {
			j.MinThroughput = sp.TMin * thr
		}
		if err := j.setType(jt); err != nil {
			return nil, fmt.Errorf("synthetic trace: %w", err)
		}
		if sp.Tenants > 0 {
			j.Namespace = fmt.Sprintf("tenant-%d", tenants.IntN(sp.Tenants))
		}
		t.Jobs = append(t.Jobs, j)
	}
	return t, nil
}
