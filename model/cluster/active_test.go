package cluster

import (
	"slices"
	"testing"
)

// A remembered key serves only while it names the job: a copy whose namespace, ID or group
// changed (or a wrong key) gets its key computed afresh.
func TestRememberedKey(t *testing.T) {
	base := Job{Namespace: "ml", ID: "train", Group: "workers"}
	base.RememberKey("ml/train/workers")
	cases := []struct {
		name      string
		edit      func(*Job)
		key, gang string
	}{
		{"as remembered", func(*Job) {}, "ml/train/workers", "ml/train"},
		{"namespace changed", func(j *Job) { j.Namespace = "ops" }, "ops/train/workers", "ops/train"},
		{"id changed", func(j *Job) { j.ID = "tune" }, "ml/tune/workers", "ml/tune"},
		{"group changed", func(j *Job) { j.Group = "ps" }, "ml/train/ps", "ml/train"},
		{"slash moved", func(j *Job) { j.Namespace, j.ID = "ml/train", "" }, "ml/train//workers", "ml/train/"},
		{"wrong key remembered", func(j *Job) { j.RememberKey("ml/other/workers") }, "ml/train/workers", "ml/train"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			j := base
			c.edit(&j)
			if got := j.Key(); got != c.key {
				t.Errorf("Key() = %q, want %q", got, c.key)
			}
			if got := j.WholeKey(); got != c.gang {
				t.Errorf("WholeKey() = %q, want %q", got, c.gang)
			}
		})
	}
	a := Alloc{Namespace: "ml", JobID: "train", Group: "workers"}
	a.RememberKey("ml/train/workers")
	a.JobID = "eval"
	if got := a.Key(); got != "ml/eval/workers" {
		t.Errorf("Alloc.Key() after an ID change = %q, want ml/eval/workers", got)
	}
}

// Active is the pending jobs then the preemptible ones: SetJobs's array itself while the
// snapshot keeps both lists, a copy otherwise.
func TestActive(t *testing.T) {
	ids := func(js []Job) []string {
		var out []string
		for _, j := range js {
			out = append(out, j.ID)
		}
		return out
	}
	all := []Job{{ID: "p1"}, {ID: "p2"}, {ID: "r1"}}
	var set Snapshot
	set.SetJobs(all, 2)
	replaced := set
	replaced.Pending = []Job{{ID: "p3"}}
	plain := Snapshot{Pending: []Job{{ID: "p1"}}, Preemptible: []Job{{ID: "r1"}, {ID: "r2"}}}
	cases := []struct {
		name   string
		snap   *Snapshot
		want   []string
		shared bool
	}{
		{"set", &set, []string{"p1", "p2", "r1"}, true},
		{"pending replaced", &replaced, []string{"p3", "r1"}, false},
		{"never set", &plain, []string{"p1", "r1", "r2"}, false},
		{"empty", &Snapshot{}, nil, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := c.snap.Active()
			if !slices.Equal(ids(got), c.want) {
				t.Fatalf("Active() = %v, want %v", ids(got), c.want)
			}
			if shared := len(got) > 0 && &got[0] == &all[0]; shared != c.shared {
				t.Errorf("Active() shares SetJobs's array: %v, want %v", shared, c.shared)
			}
		})
	}
	if len(set.Pending) != 2 || cap(set.Pending) != 2 || len(set.Preemptible) != 1 {
		t.Errorf("SetJobs: Pending len %d cap %d, Preemptible len %d; want 2, 2 (an append must not overwrite Preemptible), 1",
			len(set.Pending), cap(set.Pending), len(set.Preemptible))
	}
}
