package nomadtest

import (
	"strings"

	"github.com/hashicorp/nomad/api"
)

// UpdateCase is one kind of job change and whether Nomad replaces a running allocation of the
// changed group (destructive) or updates it in place. The e2e suite applies every case to a
// running job on a real agent and the fake's tests apply them to the fake, so the two are held
// to the same answers.
type UpdateCase struct {
	Name string
	// Change rewrites the job; node and devices are where the group's allocation runs.
	Change      func(job *api.Job, node string, devices []string)
	Destructive bool
}

// UpdateCases are the changes hetgpu makes (or must avoid) on a running group, in an order
// that can be applied one after another to one job (each destructive case leaves a new
// running allocation for the next). Measured on Nomad 2.0: the ui block and constraints are
// in place, even a constraint the allocation's node no longer meets; device requests
// (their constraints included) and meta are destructive.
func UpdateCases() []UpdateCase {
	return []UpdateCase{
		{Name: "ui description", Change: func(j *api.Job, _ string, _ []string) {
			j.UI = &api.JobUIConfig{Description: "hetgpu: pinned to the node it runs on"}
		}},
		{Name: "node pin the node meets", Change: func(j *api.Job, node string, _ []string) {
			tg := j.TaskGroups[0]
			tg.Constraints = append(tg.Constraints, api.NewConstraint("${node.unique.id}", "=", node))
		}},
		{Name: "device pin of the GPUs it holds", Destructive: true, Change: func(j *api.Job, _ string, devices []string) {
			for _, t := range j.TaskGroups[0].Tasks {
				for _, d := range t.Resources.Devices {
					d.Constraints = append(d.Constraints, api.NewConstraint("${device.ids}", api.ConstraintSetContainsAny, strings.Join(devices, ",")))
				}
			}
		}},
		{Name: "group meta", Destructive: true, Change: func(j *api.Job, _ string, _ []string) {
			tg := j.TaskGroups[0]
			if tg.Meta == nil {
				tg.Meta = map[string]string{}
			}
			tg.Meta["hetgpu.note"] = "changed"
		}},
		{Name: "node pin elsewhere", Change: func(j *api.Job, _ string, _ []string) {
			// A constraint change alone never replaces a running allocation, even where its
			// node no longer meets it.
			tg := j.TaskGroups[0]
			for _, c := range tg.Constraints {
				if c.LTarget == "${node.unique.id}" {
					c.RTarget = "00000000-0000-0000-0000-000000000000"
				}
			}
		}},
		{Name: "hold constraint", Change: func(j *api.Job, _ string, _ []string) {
			tg := j.TaskGroups[0]
			tg.Constraints = append(tg.Constraints, api.NewConstraint("${meta.hetgpu.queue}", "=", "waiting-for-hetgpu"))
		}},
	}
}
