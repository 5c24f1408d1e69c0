package nomad

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/hashicorp/nomad/api"

	"github.com/hetgpu/hetgpu/internal/golden"
	"github.com/hetgpu/hetgpu/model/cluster"
)

var update = flag.Bool("update", false, "rewrite golden files")

func readJob(t *testing.T, path string) *api.Job {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var j api.Job
	if err := json.Unmarshal(data, &j); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return &j
}

func goldenJob(t *testing.T, path string, job *api.Job) {
	t.Helper()
	got, err := json.MarshalIndent(job, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	got = append(got, '\n')
	golden.Compare(t, path, got, *update)
}

func TestPinGolden(t *testing.T) {
	const explain = "http://127.0.0.1:4656/v1/jobs/x/explain?format=html"
	tests := []struct {
		name string
		pins []GroupPin
	}{
		{"single", []GroupPin{{Group: "train", NodeIDs: []string{"node-a"}, DeviceIDs: []string{"GPU-2", "GPU-1"}, Line: "pinned to node-a"}}},
		{"multigroup", []GroupPin{{Group: "a", NodeIDs: []string{"n1"}, DeviceIDs: []string{"GPU-x"}, Line: "pinned to n1"}}},
		{"multinode", []GroupPin{{Group: "workers", NodeIDs: []string{"n2", "n1"}, DeviceIDs: []string{"n2-0", "n2-1", "n2-2", "n2-3", "n1-0", "n1-1", "n1-2", "n1-3"}, Line: "pinned to n1+n2"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := filepath.Join("testdata", "rewrite", tt.name+".in.json")
			job := readJob(t, in)
			before := readJob(t, in)
			if err := PinJob(job, tt.pins, UI{ExplainURL: explain}); err != nil {
				t.Fatal(err)
			}
			goldenJob(t, filepath.Join("testdata", "rewrite", tt.name+".pin.golden.json"), job)
			// Invariants independent of the golden file.
			if !reflect.DeepEqual(job.Meta, before.Meta) {
				t.Errorf("job meta changed: %v -> %v", before.Meta, job.Meta)
			}
			for i, tg := range job.TaskGroups {
				if !reflect.DeepEqual(tg.Meta, before.TaskGroups[i].Meta) {
					t.Errorf("group %s meta changed", *tg.Name)
				}
			}
			for _, p := range tt.pins {
				tg := findGroup(job, p.Group)
				if groupHeld(job, tg) {
					t.Errorf("group %s still held after the pin", p.Group)
				}
				nodes, devs, ok := PinOf(tg)
				if !ok || len(nodes) != len(p.NodeIDs) || len(devs) != len(p.DeviceIDs) {
					t.Errorf("PinOf(%s) = %v %v %v, want the pinned %v %v", p.Group, nodes, devs, ok, p.NodeIDs, p.DeviceIDs)
				}
			}
			if job.UI == nil || !strings.Contains(job.UI.Description, "pinned to") {
				t.Errorf("ui description does not show the decision: %+v", job.UI)
			}
			// Pinning again must fail: the group is no longer held.
			if err := PinJob(job, tt.pins, UI{}); err == nil {
				t.Error("second pin of the same group succeeded")
			}
		})
	}
}

func TestMultigroupHoldMovesDown(t *testing.T) {
	job := readJob(t, "testdata/rewrite/multigroup.in.json")
	if err := PinJob(job, []GroupPin{{Group: "a", NodeIDs: []string{"n1"}, DeviceIDs: []string{"GPU-x"}}}, UI{}); err != nil {
		t.Fatal(err)
	}
	if hasHold(job.Constraints) {
		t.Error("job-level hold kept")
	}
	if !groupHeld(job, findGroup(job, "b")) {
		t.Error("GPU group b lost its hold although not decided yet")
	}
	if groupHeld(job, findGroup(job, "coordinator")) {
		t.Error("non-GPU group coordinator still held; it should go to plain Nomad")
	}
	if !strings.Contains(job.UI.Description, "Nightly training pipeline") || len(job.UI.Links) != 1 {
		t.Errorf("user's description or links lost: %+v", job.UI)
	}
	// Pin b next: the description keeps a's line.
	if err := PinJob(job, []GroupPin{{Group: "b", NodeIDs: []string{"n2"}, DeviceIDs: []string{"g1", "g2", "g3", "g4"}, Line: "pinned b"}}, UI{ExplainURL: "http://x/e"}); err != nil {
		t.Fatal(err)
	}
	lines := GroupLines(job)
	if lines["b"] != "- group `b`: pinned b" {
		t.Errorf("group lines = %q", lines)
	}
	if len(job.UI.Links) != 2 || job.UI.Links[1].Label != LinkLabel {
		t.Errorf("links = %+v", job.UI.Links)
	}
}

func TestReholdGolden(t *testing.T) {
	job := readJob(t, "testdata/rewrite/single.pin.golden.json")
	if err := ReholdJob(job, "train", GroupLine("train", "**re-held**: pinned node node-a is down"), UI{}); err != nil {
		t.Fatal(err)
	}
	goldenJob(t, "testdata/rewrite/single.rehold.golden.json", job)
	if !groupHeld(job, findGroup(job, "train")) {
		t.Error("not held after re-hold")
	}
	if _, _, ok := PinOf(findGroup(job, "train")); ok {
		t.Error("pin constraints kept after re-hold")
	}
	// The user's own device constraint stays.
	d := gpuDevices(findGroup(job, "train"))[0]
	if len(d.Constraints) != 1 || d.Constraints[0].LTarget != "${device.attr.memory}" {
		t.Errorf("device constraints = %+v", d.Constraints)
	}
	if err := ReholdJob(job, "train", "again", UI{}); err == nil {
		t.Error("re-holding a held group succeeded")
	}
}

func TestReleaseGolden(t *testing.T) {
	job := readJob(t, "testdata/rewrite/multigroup.in.json")
	if !ReleaseJob(job, "**released** to plain Nomad scheduling") {
		t.Fatal("release reported no hold")
	}
	goldenJob(t, "testdata/rewrite/multigroup.release.golden.json", job)
	if ReleaseJob(job, "x") {
		t.Error("second release found a hold")
	}
}

func TestPinErrors(t *testing.T) {
	for _, tt := range []struct {
		name string
		pin  GroupPin
		want string
	}{
		{"no group", GroupPin{Group: "nope", NodeIDs: []string{"n"}, DeviceIDs: []string{"d"}}, "no such group"},
		{"no gpu", GroupPin{Group: "coordinator", NodeIDs: []string{"n"}, DeviceIDs: []string{"d"}}, "requests no GPU"},
		{"empty", GroupPin{Group: "a"}, "at least one node"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			job := readJob(t, "testdata/rewrite/multigroup.in.json")
			err := PinJob(job, []GroupPin{tt.pin}, UI{})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want %q", err, tt.want)
			}
		})
	}
}

func TestDescriptionFitsNomadsLimit(t *testing.T) {
	nodes := map[string]cluster.Node{}
	job := readJob(t, "testdata/rewrite/multigroup.in.json")
	job.UI.Description = strings.Repeat("The ML team's nightly pipeline. ", 40)
	var pins []GroupPin
	for _, g := range []string{"a", "b"} {
		d := cluster.Decision{Namespace: "ml", JobID: "pipeline", Group: g, GPUType: "a100", PredThroughput: 6.8, PredPowerW: 400, Score: 1, Rank: 1}
		a := cluster.Assignment{NodeID: "3ecf2a51-a4f0-051c-c591-3f386fca19cc", DeviceGroup: "nvidia/gpu/NVIDIA A100-SXM4-40GB"}
		for i := 0; i < 8; i++ {
			a.InstanceIDs = append(a.InstanceIDs, fmt.Sprintf("GPU-%08d-aaaa-bbbb-cccc-dddddddddddd", i))
		}
		d.Assign = []cluster.Assignment{a}
		pins = append(pins, GroupPin{Group: g, NodeIDs: []string{a.NodeID}, DeviceIDs: a.InstanceIDs,
			Line: DecisionLine(&d, nodes, "http://sidecar:4656/v1/jobs/ml/pipeline/explain?format=html")})
	}
	if err := PinJob(job, pins, UI{ExplainURL: "http://sidecar:4656/x"}); err != nil {
		t.Fatal(err)
	}
	d := job.UI.Description
	if len(d) > MaxDescription || !utf8.ValidString(d) {
		t.Fatalf("description of %d bytes (valid UTF-8: %v):\n%s", len(d), utf8.ValidString(d), d)
	}
	lines := GroupLines(job)
	if len(lines) != 2 || !strings.Contains(lines["a"], "pinned to") || !strings.Contains(lines["b"], "predicted 6.8") {
		t.Errorf("group lines after fitting = %q", lines)
	}
	if !strings.Contains(d, "The ML team's nightly pipeline.") {
		t.Errorf("the user's description was dropped entirely:\n%s", d)
	}
	// Short descriptions keep everything.
	short := fitDescription("- group `g`: pinned to x {GPU-1} · [why](http://x)", "mine")
	if !strings.Contains(short, "{GPU-1}") || !strings.Contains(short, "[why]") || !strings.HasSuffix(short, "mine") {
		t.Errorf("short description changed: %q", short)
	}
}

// The ui line shows the ranker's score as the queue, the log and the decision record do
// (issue 14: 6.02 in the ui, 36.02 elsewhere), with enough digits to read as the same number.
func TestDecisionLineShowsTheRankScore(t *testing.T) {
	for _, tt := range []struct {
		score float64
		want  string
	}{
		{36.0213, "score 36.02, rank 3"},
		{-5.25, "score -5.25, rank 3"},
		{0.731, "score 0.731, rank 3"},
	} {
		d := cluster.Decision{Group: "g", GPUType: "a100", Score: tt.score, Rank: 3,
			Assign: []cluster.Assignment{{NodeID: "n1", DeviceGroup: "nvidia/gpu/A100", InstanceIDs: []string{"GPU-1"}}}}
		if l := DecisionLine(&d, map[string]cluster.Node{}, ""); !strings.Contains(l, tt.want) {
			t.Errorf("score %v: line %q lacks %q", tt.score, l, tt.want)
		}
	}
}
