package cluster

import "strings"

// A task group is what hetgpu decides for: its key, "namespace/job/group", names it in every
// snapshot, decision, pin, preemption, observation, store record and API path. Built here
// only, so all of them agree.

// GroupKey is the key of task group group of job id in namespace ns: "ns/id/group".
func GroupKey(ns, id, group string) string { return ns + "/" + id + "/" + group }

// SplitGroupKey reads a GroupKey back: the namespace before the first "/", the group after
// the last, and between them the job ID, which may hold a "/" of its own (a dispatched
// child's "parent/dispatch-…"). A key with one "/" is a JobKey: the rest is the ID and group
// is "". ok is false for a key without "/" (ns is then the whole key).
func SplitGroupKey(key string) (ns, id, group string, ok bool) {
	ns, rest, ok := strings.Cut(key, "/")
	if !ok {
		return key, "", "", false
	}
	if i := strings.LastIndex(rest, "/"); i >= 0 {
		return ns, rest[:i], rest[i+1:], true
	}
	return ns, rest, "", true
}

// JobKey is the key of a whole job, "ns/id": the gang of its groups, its allocations.
func JobKey(ns, id string) string { return ns + "/" + id }

// Key is the GroupKey of the allocation's task group.
func (a *Alloc) Key() string {
	if keyOf(a.key, a.Namespace, a.JobID, a.Group) {
		return a.key
	}
	return GroupKey(a.Namespace, a.JobID, a.Group)
}

// RememberKey stores key, the job's Key as the backend built it once, in the job, so that
// Key and WholeKey build no string: the stages of a round key every job many times. Key uses
// it only while it matches the job's namespace, ID and group (a copy that changes them, or a
// wrong key, computes the key again).
func (j *Job) RememberKey(key string) { j.key = key }

// RememberKey stores the allocation's Key in it (see Job.RememberKey).
func (a *Alloc) RememberKey(key string) { a.key = key }

// WholeKey is the key of the whole job, JobKey(Namespace, ID): a prefix of a remembered
// Key, so no new string then.
func (j *Job) WholeKey() string {
	if keyOf(j.key, j.Namespace, j.ID, j.Group) {
		return j.key[:len(j.Namespace)+1+len(j.ID)]
	}
	return JobKey(j.Namespace, j.ID)
}

// WholeKey is the key of the allocation's whole job, JobKey(Namespace, JobID) (see
// Job.WholeKey).
func (a *Alloc) WholeKey() string {
	if keyOf(a.key, a.Namespace, a.JobID, a.Group) {
		return a.key[:len(a.Namespace)+1+len(a.JobID)]
	}
	return JobKey(a.Namespace, a.JobID)
}

// keyOf reports whether key is GroupKey(ns, id, group), comparing in place (no new string).
func keyOf(key, ns, id, group string) bool {
	n, i := len(ns), len(id)
	return key != "" && len(key) == n+i+len(group)+2 && key[n] == '/' && key[n+1+i] == '/' &&
		key[:n] == ns && key[n+1:n+1+i] == id && key[n+2+i:] == group
}

// Key is the GroupKey of the observed run's task group.
func (o *Observation) Key() string { return GroupKey(o.Namespace, o.JobID, o.Group) }
