package nomad

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"

	"github.com/hashicorp/nomad/api"
)

// ProgressPath is where a task of any driver reports how far its run got, relative to its
// allocation's directory as Nomad's file-system API names it: the task writes
// ${NOMAD_ALLOC_DIR}/hetgpu/progress.json. The sidecar reads it through
// /v1/client/fs/readat once the allocation has ended (ACL capability read-fs), so tasks not
// run by the hetgpu task driver get a measured throughput too (docs/any-driver.md).
const ProgressPath = "alloc/hetgpu/progress.json"

// errNoProgress: the task wrote no progress file.
var errNoProgress = errors.New("no progress file")

// maxProgressBytes bounds the read: the file is a few dozen bytes.
const maxProgressBytes = 64 << 10

// Progress is the progress file's content: {"steps": N, "samples_per_s": X}.
type Progress struct {
	// Steps is how many training steps the whole job completed (hetgpu's unit: per-GPU
	// batches summed over the job's GPUs, as hetgpu.steps counts them); > 0.
	Steps float64 `json:"steps"`
	// SamplesPerSec, when the task measured it, is its average samples per second.
	SamplesPerSec float64 `json:"samples_per_s,omitempty"`
}

// ParseProgress reads a progress file. Unknown keys are refused, so a misspelt one is not
// silently ignored; the error names the field, the value and what is expected.
func ParseProgress(b []byte) (Progress, error) {
	var p Progress
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return Progress{}, fmt.Errorf("progress file %s: field %s: a JSON %s where a number is expected", ProgressPath, te.Field, te.Value)
		}
		return Progress{}, fmt.Errorf("progress file %s: %w (expected one JSON object such as {\"steps\": 1200, \"samples_per_s\": 850.5})", ProgressPath, err)
	}
	if dec.More() {
		return Progress{}, fmt.Errorf("progress file %s: more than one JSON value; expected one object (write the file anew, not appended)", ProgressPath)
	}
	for _, f := range []struct {
		name     string
		v        float64
		positive bool
	}{{"steps", p.Steps, true}, {"samples_per_s", p.SamplesPerSec, false}} {
		if math.IsNaN(f.v) || math.IsInf(f.v, 0) || f.v < 0 || (f.positive && f.v == 0) {
			exp := "a finite number >= 0"
			if f.positive {
				exp = "a finite number > 0 (training steps completed)"
			}
			return Progress{}, fmt.Errorf("progress file %s: field %s = %v: expected %s", ProgressPath, f.name, f.v, exp)
		}
	}
	return p, nil
}

// readProgress reads an ended allocation's progress file through Nomad's file-system API
// (forwarded by the servers to the allocation's client, as long as the client has not
// garbage-collected the allocation's directory). The real agent (2.0) answers a failed read
// with status 200 and the error as the body ("stat ...: no such file or directory",
// "Permission denied", "Unknown allocation ...", "state for allocation ... not found on
// client"), so anything that is not a JSON object is read as the agent's error.
func (b *Backend) readProgress(ctx context.Context, allocID, nodeID string) (Progress, error) {
	q := (&api.QueryOptions{}).WithContext(ctx)
	r, err := b.c.AllocFS().ReadAt(&api.Allocation{ID: allocID, NodeID: nodeID}, ProgressPath, 0, maxProgressBytes+1, q)
	if err != nil {
		return Progress{}, fmt.Errorf("reading %s of allocation %s: %w", ProgressPath, allocID, err)
	}
	defer r.Close()
	data, err := io.ReadAll(io.LimitReader(r, maxProgressBytes+1))
	if err != nil {
		return Progress{}, fmt.Errorf("reading %s of allocation %s: %w", ProgressPath, allocID, err)
	}
	if len(data) > maxProgressBytes {
		return Progress{}, fmt.Errorf("allocation %s: %s is larger than %d bytes", allocID, ProgressPath, maxProgressBytes)
	}
	if t := bytes.TrimSpace(data); len(t) > 0 && t[0] != '{' {
		msg := string(t[:min(len(t), 200)])
		switch {
		case strings.Contains(msg, "no such file or directory"):
			return Progress{}, fmt.Errorf("allocation %s has no %s: %w", allocID, ProgressPath, errNoProgress)
		case strings.Contains(msg, "Permission denied"):
			return Progress{}, fmt.Errorf("reading %s of allocation %s: Nomad says %q: the sidecar's token needs the read-fs capability in the job's namespace (jobspecs/hetgpu-sidecar.policy.hcl)", ProgressPath, allocID, msg)
		}
		return Progress{}, fmt.Errorf("reading %s of allocation %s: Nomad says %q", ProgressPath, allocID, msg)
	}
	return ParseProgress(data)
}
