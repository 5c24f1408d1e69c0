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
