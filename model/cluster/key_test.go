package cluster

import "testing"

// Every view of one task group has the same key, "namespace/job/group".
func TestKeys(t *testing.T) {
	j := Job{Namespace: "ml", ID: "train", Group: "workers"}
	a := Alloc{Namespace: "ml", JobID: "train", Group: "workers"}
	o := Observation{Namespace: "ml", JobID: "train", Group: "workers"}
	d := Decision{Namespace: "ml", JobID: "train", Group: "workers"}
	p := Preemption{Namespace: "ml", JobID: "train", Group: "workers"}
	for name, got := range map[string]string{"GroupKey": GroupKey("ml", "train", "workers"), "Job": j.Key(), "Alloc": a.Key(),
		"Observation": o.Key(), "Decision": d.JobKey(), "Preemption": p.JobKey()} {
		if got != "ml/train/workers" {
			t.Errorf("%s key %q, want ml/train/workers", name, got)
		}
	}
	if got := JobKey("ml", "train"); got != "ml/train" {
		t.Errorf("JobKey %q, want ml/train", got)
	}
}

// SplitGroupKey reads back what GroupKey and JobKey build, a child's "/" in its ID included,
// and the whole-job keys of a job and of its allocations agree, remembered or not.
func TestSplitGroupKey(t *testing.T) {
	for _, tc := range []struct {
		key, ns, id, group string
		ok                 bool
	}{
		{GroupKey("ml", "train", "workers"), "ml", "train", "workers", true},
		{GroupKey("ml", "batch/dispatch-1700000000-ab12", "g"), "ml", "batch/dispatch-1700000000-ab12", "g", true},
		{JobKey("ml", "train"), "ml", "train", "", true},
		{GroupKey("", "train", "g"), "", "train", "g", true},
		{"nokey", "nokey", "", "", false},
	} {
		ns, id, group, ok := SplitGroupKey(tc.key)
		if ns != tc.ns || id != tc.id || group != tc.group || ok != tc.ok {
			t.Errorf("SplitGroupKey(%q) = %q %q %q %v; want %q %q %q %v", tc.key, ns, id, group, ok, tc.ns, tc.id, tc.group, tc.ok)
		}
	}
	for _, remember := range []bool{false, true} {
		j := Job{Namespace: "ml", ID: "batch/dispatch-1", Group: "g"}
		a := Alloc{Namespace: "ml", JobID: "batch/dispatch-1", Group: "g"}
		if remember {
			j.RememberKey(GroupKey(j.Namespace, j.ID, j.Group))
			a.RememberKey(GroupKey(a.Namespace, a.JobID, a.Group))
		}
		if want := JobKey("ml", "batch/dispatch-1"); j.WholeKey() != want || a.WholeKey() != want {
			t.Errorf("remembered %v: job %q, alloc %q; want %q", remember, j.WholeKey(), a.WholeKey(), want)
		}
	}
}
