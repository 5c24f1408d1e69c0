package dashboard

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/hetgpu/hetgpu/sidecar/runtime/service"
)

// whyWaiting renders the queue's own reason fields when the entry has them, before what the
// page derives. The entries are written as /v1/queue's JSON, which reads into the row.
func TestWhyWaiting(t *testing.T) {
	totals := []TypeTotals{{GPUType: "t4", Free: 3}, {GPUType: "a100", Free: 1}}
	ahead := []queueRow{{QueueEntry: service.QueueEntry{JobKey: "default/done/g", Status: "decided"}},
		{QueueEntry: service.QueueEntry{JobKey: "default/first/g", Status: "waiting"}}}
	for _, tc := range []struct {
		name  string
		entry string
		ahead []queueRow
		want  []string
	}{
		{"placed", `{"gpus":1,"status":"decided"}`, nil, []string{"placed in this round; being pinned"}},
		{"capacity", `{"gpus":4,"device":"nvidia/gpu","status":"waiting"}`, ahead,
			[]string{"behind 1 waiting job(s) ranked ahead, first default/first/g", "needs 4 GPUs; at most 3 free of one type (T4)"}},
		{"typed request", `{"gpus":1,"device":"nvidia/gpu/NVIDIA H100 80GB HBM3","status":"waiting"}`, nil,
			[]string{"no free GPU of type H100 now"}},
		{"fits", `{"gpus":1,"device":"nvidia/gpu/NVIDIA A100-SXM4-40GB","status":"waiting"}`, nil,
			[]string{"1 A100 free: not placed by the last round (node fit, constraints, T_min or jobs ahead)"}},
		{"api reason", `{"gpus":2,"status":"infeasible","wait":"infeasible","infeasible":true,"reason":"no GPU type meets T_min"}`, ahead,
			[]string{"infeasible: no GPU type meets T_min"}},
		{"api flag without kind", `{"gpus":2,"status":"waiting","infeasible":true}`, nil, []string{"infeasible"}},
		{"api wait kind only", `{"gpus":2,"status":"waiting","wait":"behind"}`, ahead, []string{"behind"}},
		{"api reason only", `{"gpus":2,"status":"waiting","reason":"queue limit of namespace ml"}`, nil, []string{"queue limit of namespace ml"}},
		{"api false flag", `{"gpus":1,"status":"waiting","infeasible":false,"device":"nvidia/gpu/Tesla T4"}`, nil,
			[]string{"3 T4 free: not placed by the last round (node fit, constraints, T_min or jobs ahead)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var row queueRow
			if err := json.Unmarshal([]byte(tc.entry), &row); err != nil {
				t.Fatal(err)
			}
			if got := whyWaiting(&row, tc.ahead, totals); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("why = %q\nwant  %q", got, tc.want)
			}
		})
	}
}

// The Queue page's held line says what the job's ui description says, with the queue's
// free estimate and preferred types.
func TestQueueRowHeldText(t *testing.T) {
	for _, tc := range []struct {
		name, entry, want string
	}{
		{"estimate and types", `{"rank":3,"gpus":2,"device":"nvidia/gpu","status":"waiting","wait":"capacity","free_in_s":1230,"preferred_types":["a100","h100"]}`,
			"held by hetgpu: rank 3 of 12, waiting for 2 GPUs of one type (nvidia/gpu, A100 or H100 preferred), next free in about 20 min (estimate); the cluster has such GPUs, none free now"},
		{"no estimate", `{"rank":1,"gpus":1,"status":"waiting","wait":"behind"}`,
			"held by hetgpu: rank 1 of 12, waiting for 1 GPU; GPUs free up for jobs ranked ahead first"},
		{"infeasible", `{"rank":0,"gpus":16,"status":"infeasible","wait":"infeasible"}`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var row queueRow
			if err := json.Unmarshal([]byte(tc.entry), &row); err != nil {
				t.Fatal(err)
			}
			if got := row.heldText(12); got != tc.want {
				t.Errorf("held text = %q\nwant          %q", got, tc.want)
			}
		})
	}
}
