package trace

import (
	"strings"
	"testing"
)

func TestBundled(t *testing.T) {
	for _, name := range BundledNames() {
		tr, err := Bundled(name)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(tr.Jobs) == 0 || tr.Jobs[0].ArrivalS != 0 && !strings.HasPrefix(name, "msr-") {
			t.Fatalf("%s: %d jobs, first arrival %v", name, len(tr.Jobs), tr.Jobs[0].ArrivalS)
		}
		if BundledDoc(name) == "" {
			t.Errorf("%s has no description", name)
		}
		for i := range tr.Jobs {
			tr.Jobs[i].TotalSteps = max(tr.Jobs[i].TotalSteps, 1)
		}
		if err := tr.Validate(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	all, err := Bundled("philly-15k")
	if err != nil || len(all.Jobs) != 15264 {
		t.Fatalf("philly-15k: %v, %d jobs, want 15264", err, len(all.Jobs))
	}
	if _, err := Bundled("nope"); err == nil || !strings.Contains(err.Error(), "default") {
		t.Fatalf("unknown bundled trace error %v should list names", err)
	}
}

// Training and held-out windows never share a virtual cluster (the user population), and the
// default trace is held out.
func TestTrainHeldOutDisjoint(t *testing.T) {
	vcOf := map[string]string{}
	for _, w := range windows() {
		vcOf[w.name] = w.vc
	}
	train := map[string]bool{}
	for _, n := range TrainWindows() {
		train[vcOf[n]] = true
	}
	held := map[string]bool{}
	for _, n := range append(HeldOutWindows(), "default") {
		if train[vcOf[n]] {
			t.Fatalf("%s uses VC %s, which is also in the training windows", n, vcOf[n])
		}
		held[vcOf[n]] = true
	}
	for _, n := range ValidateWindows() {
		if vcOf[n] == "" || train[vcOf[n]] || held[vcOf[n]] {
			t.Fatalf("validation window %s uses VC %q, which is unknown or also in the training or held-out windows", n, vcOf[n])
		}
	}
	want := 0
	for _, n := range TrainWindows() {
		w, err := Bundled(n)
		if err != nil {
			t.Fatal(err)
		}
		want += len(w.Jobs)
	}
	tr, err := Bundled("train")
	if err != nil || len(tr.Jobs) != want || want < 2500 {
		t.Fatalf("train: %v, %d jobs", err, len(tr.Jobs))
	}
}

func TestLoadDispatch(t *testing.T) {
	o := LoadOptions{Seed: 3, Throughput: ref}
	tr, err := Load("synthetic:jobs=20,rate=2", o)
	if err != nil || len(tr.Jobs) != 20 || !strings.Contains(tr.Name, "seed=3") {
		t.Fatalf("synthetic: %v %v", err, tr)
	}
	if _, err := Load("bundled:default", o); err != nil {
		t.Fatal(err)
	}
	if _, err := Load("weird:thing", o); err == nil || !strings.Contains(err.Error(), "unknown kind") {
		t.Fatalf("bad kind: %v", err)
	}
	if _, err := Load("/no/such/file.trace", o); err == nil {
		t.Fatal("missing file loaded")
	}
	if _, err := Load("synthetic:jobs=2", o); err == nil || !strings.Contains(err.Error(), "rate") {
		t.Fatalf("synthetic without rate: %v", err)
	}
}
