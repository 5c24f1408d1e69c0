package nomad

import (
	"strings"
	"testing"

	"github.com/hetgpu/hetgpu/model/cluster"
)

func TestWaitLines(t *testing.T) {
	long := strings.Repeat("needs 2 nodes with 4 GPUs of one type; at most 1 node has 4 V100; ", 20)
	tests := []struct {
		name string
		w    cluster.Wait
		// want: the line contains it; "" means no line.
		want string
	}{
		{"infeasible", cluster.Wait{JobID: "j", Group: "a", Kind: cluster.WaitInfeasible, Reason: "needs 16 GPUs of one type on one node; the largest node has 8 V100"},
			"- group `a`: cannot run on this cluster: needs 16 GPUs of one type on one node; the largest node has 8 V100. It stays held"},
		{"invalid", cluster.Wait{JobID: "j", Group: "a", Kind: cluster.WaitInvalid, Reason: "bad operator"},
			"- group `a`: **held: hetgpu cannot decide** — bad operator. Fix the job"},
		{"capacity", cluster.Wait{JobID: "j", Group: "a", Kind: cluster.WaitCapacity, Reason: "needs 8 free GPUs"}, ""},
		{"behind", cluster.Wait{JobID: "j", Group: "a", Kind: cluster.WaitBehind}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := WaitLine(&tt.w)
			if tt.want == "" && l != "" || tt.want != "" && !strings.HasPrefix(l, tt.want) {
				t.Fatalf("line %q, want %q", l, tt.want)
			}
			if l != "" && !waitLineOf(l, "a") {
				t.Fatalf("%q is not recognised as a wait line", l)
			}
		})
	}

	// A line shortened to fit Nomad's limit still counts as written (else it would be
	// registered again every round); another reason does not.
	job := readJob(t, "testdata/rewrite/multigroup.in.json")
	job.UI.Description = "The ML team's pipeline."
	SetGroupLine(job, "b", GroupLine("b", "pinned to somewhere"), UI{})
	want := WaitLine(&cluster.Wait{JobID: "pipeline", Group: "a", Kind: cluster.WaitInfeasible, Reason: long})
	SetGroupLine(job, "a", want, UI{})
	have := GroupLines(job)["a"]
	if have == want || !sameLine(have, want) {
		t.Fatalf("shortened line %q not recognised as %q", have, want)
	}
	other := WaitLine(&cluster.Wait{JobID: "pipeline", Group: "a", Kind: cluster.WaitInfeasible, Reason: "x" + long})
	if sameLine(have, other) || sameLine("", want) {
		t.Fatal("a different line counts as the same")
	}

	// Removing the line keeps the other group's line and the user's text.
	job = readJob(t, "testdata/rewrite/multigroup.in.json")
	job.UI.Description = "The ML team's pipeline."
	SetGroupLine(job, "b", GroupLine("b", "pinned to somewhere"), UI{})
	SetGroupLine(job, "a", WaitLine(&cluster.Wait{JobID: "pipeline", Group: "a", Kind: cluster.WaitInfeasible, Reason: "r"}), UI{})
	if !waitLineOf(GroupLines(job)["a"], "a") {
		t.Fatalf("no wait line written: %q", job.UI.Description)
	}
	removeGroupLine(job, "a")
	lines := GroupLines(job)
	if _, ok := lines["a"]; ok || lines["b"] == "" || !strings.HasSuffix(job.UI.Description, "The ML team's pipeline.") {
		t.Fatalf("after removing: lines %q, description %q", lines, job.UI.Description)
	}
}
