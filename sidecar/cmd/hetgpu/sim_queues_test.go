package main

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSimQueues: --queues auto gives the hetgpu policy one queue per tenant, with guarantees
// splitting 80 % of the cluster by demand, and reports them; the queues' GPU-hours add up to
// the cluster's busy GPU-hours; other policies report none. An HCL file works too.
func TestSimQueues(t *testing.T) {
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"sim", "--cluster", "gavel-108", "--trace", "synthetic:jobs=80,rate=10,tenants=3",
		"--policies", "fifo,hetgpu-heuristic", "--queues", "auto", "--json"}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var rs []struct {
		Policy    string  `json:"policy"`
		GPUUtil   float64 `json:"gpu_util"`
		MakespanS float64 `json:"makespan_s"`
		QueueJain float64 `json:"queue_jain"`
		Queues    []struct {
			Name      string  `json:"name"`
			Guarantee int     `json:"guarantee"`
			Jobs      int     `json:"jobs"`
			GPUHours  float64 `json:"gpu_hours"`
		} `json:"queues"`
	}
	if err := json.Unmarshal(out.Bytes(), &rs); err != nil {
		t.Fatal(err)
	}
	if len(rs) != 2 || len(rs[0].Queues) != 0 || len(rs[1].Queues) != 3 {
		t.Fatalf("results %+v: want queues for hetgpu-heuristic only", rs)
	}
	h := rs[1]
	g, jobs, hours := 0, 0, 0.0
	for _, q := range h.Queues {
		if !strings.HasPrefix(q.Name, "tenant-") {
			t.Errorf("queue %q, want tenant-N", q.Name)
		}
		g += q.Guarantee
		jobs += q.Jobs
		hours += q.GPUHours
	}
	if g != 86 || jobs != 80 {
		t.Errorf("guarantees add up to %d (want %d), jobs to %d (want 80)", g, 86, jobs)
	}
	busy := h.GPUUtil * 108 * h.MakespanS / 3600
	if math.Abs(hours-busy) > 0.02*busy {
		t.Errorf("queues' GPU-hours %.1f, cluster busy %.1f", hours, busy)
	}
	if !(h.QueueJain > 0 && h.QueueJain <= 1) {
		t.Errorf("Jain's index %v", h.QueueJain)
	}

	file := filepath.Join(t.TempDir(), "q.hcl")
	if err := os.WriteFile(file, []byte("queue \"a\" {\n namespaces = [\"tenant-0\"]\n guarantee = 40\n}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	code = run(context.Background(), []string{"sim", "--cluster", "gavel-108", "--trace", "synthetic:jobs=40,rate=10,tenants=2",
		"--policies", "hetgpu-heuristic", "--queues", file}, &out, &errb)
	if code != 0 || !strings.Contains(out.String(), "queues of hetgpu-heuristic") || !strings.Contains(out.String(), "below, admitted h") {
		t.Fatalf("exit %d, stdout %s, stderr %s", code, out.String(), errb.String())
	}
	rows := map[string]bool{}
	for _, l := range strings.Split(out.String(), "\n") {
		if f := strings.Fields(l); len(f) > 2 {
			rows[f[0]+" "+f[2]] = true
		}
	}
	if !rows["a 40"] || !rows["default 0"] {
		t.Errorf("table lacks queue a with guarantee 40 or default with 0:\n%s", out.String())
	}
}
