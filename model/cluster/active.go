package cluster

// SetJobs sets Pending to the first pending jobs of jobs and Preemptible to the rest, so that
// Active returns jobs itself instead of a copy (a backend that builds both lists at once: the
// simulator, each round).
func (s *Snapshot) SetJobs(jobs []Job, pending int) {
	s.Pending = jobs[:pending:pending]
	s.Preemptible = jobs[pending:len(jobs):len(jobs)]
	s.jobs = jobs[:len(jobs):len(jobs)]
}

// Active returns the pending jobs followed by the preemptible ones: what a preemption stage
// ranks together. It is the snapshot's own array when SetJobs built both lists and a copy of
// them shares them still; else a new slice. Callers must not modify it.
func (s *Snapshot) Active() []Job {
	np := len(s.Pending)
	if len(s.jobs) == np+len(s.Preemptible) && sameSlice(s.jobs[:np], s.Pending) && sameSlice(s.jobs[np:], s.Preemptible) {
		return s.jobs
	}
	out := make([]Job, 0, np+len(s.Preemptible))
	return append(append(out, s.Pending...), s.Preemptible...)
}
