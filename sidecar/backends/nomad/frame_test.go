package nomad

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

// allocFrame is an event stream frame as Nomad sends an allocation's update (the payload
// without its job, JobVersion beside it), and an evaluation's in the same frame.
func allocFrame(t testing.TB) []byte {
	t.Helper()
	a := map[string]any{
		"ID": "alloc-1", "Namespace": "default", "JobID": "train", "TaskGroup": "train", "NodeID": "node-1",
		"DesiredStatus": "run", "ClientStatus": "running", "CreateIndex": 90071992547409930, "ModifyIndex": 12, "Job": nil,
		"JobVersion": 3,
		"AllocatedResources": &api.AllocatedResources{Tasks: map[string]*api.AllocatedTaskResources{"train": {
			Devices: []*api.AllocatedDeviceResource{{Vendor: "nvidia", Type: "gpu", Name: "Tesla T4", DeviceIDs: []string{"GPU-1", "GPU-2"}}}}}},
		"TaskStates": map[string]*api.TaskState{"train": {State: "running", StartedAt: time.Date(2026, 12, 3, 8, 0, 0, 0, time.UTC)}},
	}
	e := &api.Evaluation{ID: "eval-1", Namespace: "default", JobID: "train", Status: api.EvalStatusBlocked, ModifyIndex: 12}
	data, err := json.Marshal(api.Events{Index: 12, Events: []api.Event{
		{Topic: api.TopicAllocation, Type: "PlanResult", Key: "alloc-1", FilterKeys: []string{"train"}, Index: 12, Payload: map[string]any{"Allocation": a}},
		{Topic: api.TopicEvaluation, Type: "EvaluationUpdated", Key: "eval-1", Index: 12, Payload: map[string]any{"Evaluation": e}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	return append(data, '\n')
}

// TestDecodeFrame: a frame decodes as api.EventStream decodes it, but for the allocation's
// payload, decoded into the api type at once; the allocation is what decoding the generic
// payload gave, without the precision float64 loses.
func TestDecodeFrame(t *testing.T) {
	got, want := decodeBoth(t, allocFrame(t))
	if _, ok := got.Events[0].Payload["Allocation"].(*allocPayload); !ok {
		t.Fatalf("allocation payload is %T, want the api type", got.Events[0].Payload["Allocation"])
	}
	if !reflect.DeepEqual(got.Events[1], want.Events[1]) || got.Index != want.Index {
		t.Fatalf("evaluation event differs:\n%+v\n%+v", got.Events[1], want.Events[1])
	}
	ge, err := got.Events[1].Evaluation()
	if err != nil || ge.ID != "eval-1" || ge.Status != api.EvalStatusBlocked {
		t.Fatalf("evaluation = %+v, %v", ge, err)
	}
	a, err := decodeAlloc(&got.Events[0])
	if err != nil {
		t.Fatal(err)
	}
	b, err := decodeAlloc(&want.Events[0]) // a generic payload, as tests and older frames hold
	if err != nil {
		t.Fatal(err)
	}
	if a.CreateIndex != 90071992547409930 {
		t.Fatalf("CreateIndex = %d, want it exact", a.CreateIndex)
	}
	b.CreateIndex = a.CreateIndex // the generic payload went through float64
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("decoded allocations differ:\n%+v\n%+v", a, b)
	}
	if a.JobVersion != 3 || len(a.Devices) != 1 || a.Start.IsZero() {
		t.Fatalf("allocation = %+v", a)
	}
	// A heartbeat and a broken frame.
	hb, err := decodeFrame(json.NewDecoder(strings.NewReader("{}\n")))
	if err != nil || !hb.IsHeartbeat() {
		t.Fatalf("heartbeat = %+v, %v", hb, err)
	}
	if _, err := decodeFrame(json.NewDecoder(strings.NewReader(`{"Index": 1, "Events": [{"Payload": {"Job": {`))); err == nil {
		t.Fatal("a broken frame decoded")
	}
}

// jobFrame is a frame with a job event carrying the whole job, as Nomad sends it.
func jobFrame(t testing.TB) []byte {
	t.Helper()
	j := copyFixture(t)
	j.Status, j.ModifyIndex, j.JobModifyIndex = ptrTo("running"), ptrTo(uint64(41)), ptrTo(uint64(40))
	data, err := json.Marshal(api.Events{Index: 41, Events: []api.Event{
		{Topic: api.TopicJob, Type: "JobRegistered", Key: "copy", Index: 41, Payload: map[string]any{"Job": j}}}})
	if err != nil {
		t.Fatal(err)
	}
	return append(data, '\n')
}

func ptrTo[T any](v T) *T { return &v }

// decodeBoth decodes one frame with decodeFrame and as api.EventStream does (generic payloads).
func decodeBoth(t *testing.T, data []byte) (got *api.Events, want api.Events) {
	t.Helper()
	got, err := decodeFrame(json.NewDecoder(bytes.NewReader(data)))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &want); err != nil {
		t.Fatal(err)
	}
	return got, want
}

// TestDecodeFrameJobHint: a job event keeps, of the job, the fields the watcher reads, with
// the values the generic decode gave them; a field the job lacks stays absent.
func TestDecodeFrameJobHint(t *testing.T) {
	got, want := decodeBoth(t, jobFrame(t))
	g, w := got.Events[0].Payload["Job"].(map[string]any), want.Events[0].Payload["Job"].(map[string]any)
	for _, k := range []string{"ID", "Namespace", "Status", "ModifyIndex", "JobModifyIndex"} {
		if g[k] != w[k] || g[k] == nil {
			t.Errorf("%s = %#v, want %#v", k, g[k], w[k])
		}
	}
	if len(g) != 5 {
		t.Errorf("hint = %v, want the 5 fields", g)
	}
	if ns := payloadNamespace(&got.Events[0], "Job"); ns != "default" {
		t.Errorf("namespace = %q", ns)
	}
	none, err := decodeFrame(json.NewDecoder(strings.NewReader(`{"Index":2,"Events":[{"Topic":"Job","Key":"x","Payload":{"Job":{"ID":"x","Status":null}}}]}`)))
	if err != nil {
		t.Fatal(err)
	}
	if h := none.Events[0].Payload["Job"].(map[string]any); len(h) != 1 || h["ID"] != "x" {
		t.Errorf("hint of a sparse job = %v", h)
	}
}

// BenchmarkDecodeEvent is the watcher's decoding of an allocation event and of a job event
// (two a pin), and the same through generic payloads as api.Events decodes them, for
// comparison.
func BenchmarkDecodeEvent(b *testing.B) {
	for _, bc := range []struct {
		name           string
		frame          func(testing.TB) []byte
		generic, alloc bool
	}{
		{"alloc", allocFrame, false, true},
		{"alloc-generic", allocFrame, true, true},
		{"job", jobFrame, false, false},
		{"job-generic", jobFrame, true, false},
	} {
		b.Run(bc.name, func(b *testing.B) {
			data := bc.frame(b)
			b.ReportAllocs()
			for b.Loop() {
				evs := &api.Events{}
				var err error
				if bc.generic {
					err = json.NewDecoder(bytes.NewReader(data)).Decode(evs)
				} else {
					evs, err = decodeFrame(json.NewDecoder(bytes.NewReader(data)))
				}
				if err != nil {
					b.Fatal(err)
				}
				if bc.alloc {
					if _, err := decodeAlloc(&evs.Events[0]); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}
