package cluster

// A task group is what hetgpu decides for: its key, "namespace/job/group", names it in every
// snapshot, decision, pin, preemption, observation, store record and API path. Built here
// only, so all of them agree.

// GroupKey is the key of task group group of job id in namespace ns: "ns/id/group".
func GroupKey(ns, id, group string) string { return ns + "/" + id + "/" + group }

// JobKey is the key of a whole job, "ns/id": the gang of its groups, its allocations.
func JobKey(ns, id string) string { return ns + "/" + id }

// Key is the GroupKey of the allocation's task group.
func (a *Alloc) Key() string { return GroupKey(a.Namespace, a.JobID, a.Group) }

// Key is the GroupKey of the observed run's task group.
func (o *Observation) Key() string { return GroupKey(o.Namespace, o.JobID, o.Group) }
