package sim

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/hetgpu/hetgpu/model/throughput"
)

// GPU sharing in the simulator mirrors the device plugin's slots: with Spec.Slots = 2 every GPU
// is two slots, and single-GPU jobs allow sharing (hetgpu.allow_sharing), so the placer may
// put a second job on a GPU one runs on (a co-location option, priced with the predictor's
// pair prediction). Each job of a pair runs at Gavel's measured pair throughput (else half
// speed, time-slicing); the GPU draws the power of the sum of their utilisations, and each job
// is charged half of it. More than two slots are not modelled (Gavel measured pairs only).
// MIG slices: mig.go.

// ShareableGain is the mean pair throughput (sum of both jobs' shares of their speed alone)
// from which a job type counts as leaving a GPU partly idle.
const ShareableGain = 1.2

// ShareableJobType reports whether a job type's Gavel-measured pairs with every other type on
// gpu sum to at least ShareableGain on average.
func ShareableJobType(tab *throughput.Table, jobType, gpu string) bool {
	ia, ok := tab.Measured(jobType, gpu, 1)
	if !ok || ia <= 0 {
		return false
	}
	sum, n := 0.0, 0
	for _, other := range tab.JobTypes() {
		ib, ok := tab.Measured(other, gpu, 1)
		if !ok || ib <= 0 {
			continue
		}
		ta, tb, ok := tab.Colocated(gpu, jobType, 1, other, 1)
		if !ok {
			continue
		}
		sum += ta/ia + tb/ib
		n++
	}
	return n > 0 && sum/float64(n) >= ShareableGain
}

// cutSlots splits ":slots=N" off a cluster reference.
func cutSlots(ref string) (string, int, error) {
	i := strings.Index(ref, ":slots=")
	if i < 0 {
		return ref, 0, nil
	}
	rest := ref[i+len(":slots="):]
	val, tail, _ := strings.Cut(rest, ":")
	n, err := strconv.Atoi(val)
	if err != nil || n < 0 || n > 2 {
		return "", 0, fmt.Errorf("cluster %q: slots = %q, expected 0, 1 or 2 jobs per GPU", ref, val)
	}
	out := ref[:i]
	if tail != "" {
		out += ":" + tail
	}
	return out, n, nil
}

// withSlots returns the spec with GPU sharing set.
func (s *Spec) withSlots(n int) (*Spec, error) {
	if n == 0 {
		return s, nil
	}
	c := *s
	c.Slots = n
	c.Name = fmt.Sprintf("%s:slots=%d", s.Name, n)
	return &c, nil
}

// tminMet reports whether a finished job's average rate while running met its T_min.
func tminMet(j *JobState) bool {
	if j.runTime <= 0 {
		return false
	}
	return j.TotalSteps/j.runTime >= j.MinThroughput*(1-1e-9)
}

// allowsSharing reports whether a job may share its GPU: single-GPU jobs on a cluster with
// slots.
func (e *Engine) allowsSharing(j *JobState) bool { return e.cfg.Spec.Slots >= 2 && j.GPUs == 1 }

// pairOOM reports whether the throughput table measured a pair as running out of memory
// together (a throughput of 0 for either job).
func (e *Engine) pairOOM(a, b *JobState, gpuType string) bool {
	ra, rb, ok := e.cfg.Throughput.Colocated(gpuType, a.JobType, a.GPUs, b.JobType, b.GPUs)
	return ok && (ra <= 0 || rb <= 0)
}
