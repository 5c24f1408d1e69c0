package trace

import "fmt"

// shareableTypes lists the job types a synthetic spec with the shareable key draws from: the
// types opt.Shareable accepts (sim.TraceOptions: on the reference GPU, a job type whose
// Gavel-measured pairs with every other type sum to at least ShareableGain of one job's
// throughput on average, i.e. one that leaves the GPU partly idle).
func shareableTypes(sp SyntheticSpec, types []string, shareable func(string) bool) ([]string, error) {
	if sp.Shareable <= 0 {
		return nil, nil
	}
	if shareable == nil {
		return nil, fmt.Errorf("synthetic spec: key shareable = %g needs co-location measurements (none given)", sp.Shareable)
	}
	var out []string
	for _, jt := range types {
		if shareable(jt) {
			out = append(out, jt)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("synthetic spec: key shareable = %g, but no job type leaves a %s GPU partly idle", sp.Shareable, sp.RefGPU)
	}
	return out, nil
}
