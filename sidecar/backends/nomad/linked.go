package nomad

import (
	"context"
	"fmt"
	"reflect"
	"time"

	"github.com/hashicorp/nomad/api"
)

// The fields hetgpu's rewrites change (PinJob, ReholdJob, ReholdGang, ReleaseJob,
// SetGroupLine, the link refresh): constraints at every level and the ui block, plus the
// version tag a write carries. A write to a linked child copies exactly these from the
// rewritten job onto the job as stored (TestRewritesTouchOnlyWrittenFields keeps the list
// complete).

// registerLinked writes a rewritten linked child (job, read at modifyIndex) through Nomad's
// RPC: the stored job is read, the written fields replaced, and the result registered back.
func (r *rpcClient) registerLinked(ctx context.Context, ns string, job *api.Job, modifyIndex uint64) (*api.JobRegisterResponse, error) {
	id, region := deref(job.ID, ""), jobRegion(job)
	stored, err := r.getJob(ctx, region, ns, id)
	if err != nil {
		return nil, fmt.Errorf("read linked child %s/%s over RPC: %w", ns, id, err)
	}
	if got := uintOf(stored["JobModifyIndex"]); got != modifyIndex {
		// The words isConflict knows, as the HTTP path's EnforceIndex answer says them.
		return nil, fmt.Errorf("register linked child %s/%s: job exists with conflicting job modify index: %d (read at %d)", ns, id, got, modifyIndex)
	}
	// Nomad's servers refuse any register that carries a payload; a dispatched child's empty
	// one (a snappy header only) goes, which changes nothing the task sees.
	if p, ok := stored["Payload"].(string); ok && p != "" {
		if !emptyPayload([]byte(p)) {
			return nil, fmt.Errorf("register linked child %s/%s: %w", ns, id, errDispatchedPayload)
		}
		stored["Payload"] = nil
	}
	if err := transplant(stored, job, time.Now()); err != nil {
		return nil, fmt.Errorf("register linked child %s/%s: %w", ns, id, err)
	}
	resp, err := r.register(ctx, region, ns, stored, modifyIndex)
	if err != nil {
		return nil, fmt.Errorf("register linked child %s/%s over RPC: %w", ns, id, err)
	}
	return resp, nil
}

// transplant copies the written fields of job onto stored, the same job as Nomad's servers
// keep it (a generic msgpack map). Groups, tasks and device requests are matched by name and
// must all be there: a job whose shape changed is not the one rewritten.
func transplant(stored map[string]any, job *api.Job, now time.Time) error {
	stored["Constraints"] = constraintsWire(job.Constraints)
	stored["UI"] = uiWire(job.UI)
	if job.VersionTag != nil {
		stored["VersionTag"] = map[string]any{"Name": job.VersionTag.Name, "Description": job.VersionTag.Description, "TaggedTime": now.UnixNano()}
	} else {
		stored["VersionTag"] = nil
	}
	groups, _ := stored["TaskGroups"].([]any)
	for _, tg := range job.TaskGroups {
		if tg == nil {
			continue
		}
		name := deref(tg.Name, "")
		sg := byName(groups, name)
		if sg == nil {
			return fmt.Errorf("the stored job has no group %q", name)
		}
		sg["Constraints"] = constraintsWire(tg.Constraints)
		tasks, _ := sg["Tasks"].([]any)
		for _, t := range tg.Tasks {
			if t == nil {
				continue
			}
			st := byName(tasks, t.Name)
			if st == nil {
				return fmt.Errorf("the stored group %q has no task %q", name, t.Name)
			}
			st["Constraints"] = constraintsWire(t.Constraints)
			if t.Resources == nil || len(t.Resources.Devices) == 0 {
				continue
			}
			res, _ := st["Resources"].(map[string]any)
			devs, _ := res["Devices"].([]any)
			if len(devs) != len(t.Resources.Devices) {
				return fmt.Errorf("task %q of group %q: the stored job requests %d devices, the rewritten one %d", t.Name, name, len(devs), len(t.Resources.Devices))
			}
			for i, d := range t.Resources.Devices {
				sd, _ := devs[i].(map[string]any)
				if sd == nil || sd["Name"] != d.Name {
					return fmt.Errorf("task %q of group %q: device request %d is %v in the stored job, %q in the rewritten one", t.Name, name, i, sd["Name"], d.Name)
				}
				sd["Constraints"] = constraintsWire(d.Constraints)
			}
		}
	}
	return nil
}

// byName finds the element of a stored list (groups, tasks) whose Name is name.
func byName(list []any, name string) map[string]any {
	for _, e := range list {
		if m, ok := e.(map[string]any); ok && m["Name"] == name {
			return m
		}
	}
	return nil
}

// constraintsWire is a constraint list as Nomad's structs.Constraint encodes.
func constraintsWire(cs []*api.Constraint) []any {
	if len(cs) == 0 {
		return nil
	}
	out := make([]any, 0, len(cs))
	for _, c := range cs {
		if c == nil {
			continue
		}
		out = append(out, map[string]any{"LTarget": c.LTarget, "RTarget": c.RTarget, "Operand": c.Operand})
	}
	return out
}

// uiWire is the ui block as Nomad's structs.JobUIConfig encodes (its link's URL field is Url).
func uiWire(ui *api.JobUIConfig) any {
	if ui == nil {
		return nil
	}
	var links []any
	for _, l := range ui.Links {
		if l != nil {
			links = append(links, map[string]any{"Label": l.Label, "Url": l.URL})
		}
	}
	return map[string]any{"Description": ui.Description, "Links": links}
}

// uintOf reads a non-negative integer msgpack decoded into any width.
func uintOf(v any) uint64 {
	rv := reflect.ValueOf(v)
	switch {
	case rv.CanUint():
		return rv.Uint()
	case rv.CanInt() && rv.Int() >= 0:
		return uint64(rv.Int())
	}
	return 0
}
