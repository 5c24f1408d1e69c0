package nomadtest

import "github.com/hashicorp/nomad/api"

// HeldJob is a one-group batch job held for hetgpu (the queue constraint no node meets until
// the sidecar pins it): the fixture the sidecar's tests submit to the fake. A nil meta asks
// for a ResNet-50 training job.
func HeldJob(id string, gpus uint64, count int, meta map[string]string) *api.Job {
	if meta == nil {
		meta = map[string]string{"hetgpu.enable": "true", "hetgpu.model": "resnet/ResNet-50", "hetgpu.batch_size": "64"}
	}
	return &api.Job{
		ID: &id, Name: &id, Namespace: pointer("default"), Type: pointer("batch"),
		Constraints: []*api.Constraint{api.NewConstraint("${meta.hetgpu.queue}", "=", "waiting-for-hetgpu")},
		Meta:        meta,
		TaskGroups: []*api.TaskGroup{{
			Name: pointer("train"), Count: &count,
			Tasks: []*api.Task{{Name: "train", Driver: "hetgpu", Resources: &api.Resources{
				Devices: []*api.RequestedDevice{{Name: "nvidia/gpu", Count: &gpus}},
			}}},
		}},
	}
}

func pointer[T any](v T) *T { return &v }
