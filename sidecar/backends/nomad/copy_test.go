package nomad

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/hetgpu/hetgpu/sidecar/backends/nomad/nomadtest"
)

// copyFixture is a held job with every default Canonicalize fills in, a task config, a
// service and a ui block, in the shape the API decodes (JSON numbers in interfaces).
func copyFixture(t testing.TB) *api.Job {
	t.Helper()
	j := nomadtest.HeldJob("copy", 2, 1, nil)
	j.TaskGroups[0].Tasks[0].Config = map[string]any{"command": "train", "args": []any{"--epochs", 3}}
	j.TaskGroups[0].Services = []*api.Service{{Name: "metrics", PortLabel: "http", Tags: []string{"a"}}}
	j.UI = &api.JobUIConfig{Description: "d", Links: []*api.JobUILink{{Label: "l", URL: "http://x"}}}
	j.Canonicalize()
	data, err := json.Marshal(j)
	if err != nil {
		t.Fatal(err)
	}
	var out api.Job
	if err := json.Unmarshal(data, &out); err != nil {
		t.Fatal(err)
	}
	return &out
}

// TestCopyJobAsJSONRoundTrip: copyJob gives what the JSON round trip it replaced gave, and
// shares nothing a rewrite could change with the tracked job.
func TestCopyJobAsJSONRoundTrip(t *testing.T) {
	j := copyFixture(t)
	before, _ := json.Marshal(j)
	c, err := copyJob(j)
	if err != nil {
		t.Fatal(err)
	}
	var viaJSON api.Job
	if err := json.Unmarshal(before, &viaJSON); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(c, &viaJSON) {
		t.Fatalf("copy differs from the JSON round trip:\n%+v\n%+v", c, &viaJSON)
	}
	if p := shared(reflect.ValueOf(j), reflect.ValueOf(c)); p != "" {
		t.Fatalf("the copy shares %s with the job", p)
	}
	if err := PinJob(c, []GroupPin{{Group: "train", NodeIDs: []string{"n1"}, DeviceIDs: []string{"GPU-1", "GPU-2"}, Line: "pinned"}}, UI{ExplainURL: "http://e"}); err != nil {
		t.Fatal(err)
	}
	c.TaskGroups[0].Tasks[0].Config["args"].([]any)[0] = "changed"
	if after, _ := json.Marshal(j); string(after) != string(before) {
		t.Fatalf("pinning the copy changed the job:\n%s\n%s", before, after)
	}
	if deepCopy[api.Job](nil) != nil {
		t.Fatal("a nil job copies to a non-nil one")
	}
	ts := &struct{ T time.Time }{time.Now()}
	if deepCopy(ts).T != ts.T {
		t.Fatal("a time.Time was not copied by value")
	}
}

// shared names the first pointer, map or slice reachable from both a and b (same address), or "".
func shared(a, b reflect.Value) string {
	switch a.Kind() {
	case reflect.Pointer, reflect.Map:
		if a.IsNil() || b.IsNil() {
			return ""
		}
		if a.Pointer() == b.Pointer() {
			return a.Type().String()
		}
		if a.Kind() == reflect.Map {
			for _, k := range a.MapKeys() {
				if p := shared(a.MapIndex(k), b.MapIndex(k)); p != "" {
					return p
				}
			}
			return ""
		}
		return shared(a.Elem(), b.Elem())
	case reflect.Slice:
		if a.Len() == 0 || b.Len() == 0 {
			return ""
		}
		if a.Pointer() == b.Pointer() {
			return a.Type().String()
		}
		for i := 0; i < a.Len(); i++ {
			if p := shared(a.Index(i), b.Index(i)); p != "" {
				return p
			}
		}
	case reflect.Interface:
		if !a.IsNil() && !b.IsNil() {
			return shared(a.Elem(), b.Elem())
		}
	case reflect.Struct:
		for i := 0; i < a.NumField(); i++ {
			if a.Type().Field(i).IsExported() {
				if p := shared(a.Field(i), b.Field(i)); p != "" {
					return a.Type().Field(i).Name + "." + p
				}
			}
		}
	}
	return ""
}

// BenchmarkCopyJob is the copy every pin makes of the job it rewrites.
func BenchmarkCopyJob(b *testing.B) {
	j := copyFixture(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := copyJob(j); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCopyJobJSON is the JSON round trip copyJob was, for comparison.
func BenchmarkCopyJobJSON(b *testing.B) {
	j := copyFixture(b)
	b.ReportAllocs()
	for b.Loop() {
		data, _ := json.Marshal(j)
		var out api.Job
		if err := json.Unmarshal(data, &out); err != nil {
			b.Fatal(err)
		}
	}
}
