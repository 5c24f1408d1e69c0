package cluster

// FitsFree reports whether the job's GPUs fit, now, the free GPUs of one GPU type, given as
// the free GPUs each node offers it (most first; a node offers the free GPUs of one device
// group, as one device request is served by one group). With GPUsPerNode p it needs
// ceil(GPUs/p) nodes with p free each; otherwise the free GPUs of its MaxNodes fullest nodes
// must add up to GPUs (all of them on one node for a job that does not span nodes). It is the
// capacity rule alone: constraints, T_min and the jobs ranked ahead are the caller's.
//
// The feasibility check, the queue stage's guarantee room, the placers' first fit, the
// ranker's "can start" feature, the preemption planner and the explain page all judge a fit
// by it, so that they agree on which jobs fit.
func (j *Job) FitsFree(free []int) bool {
	need := j.GPUs
	if need <= 0 {
		return true
	}
	if p := j.GPUsPerNode; p > 0 {
		k := (need + p - 1) / p
		return len(free) >= k && free[k-1] >= p
	}
	sum := 0
	for i := 0; i < len(free) && i < j.MaxNodes(); i++ {
		sum += free[i]
	}
	return sum >= need
}
