package nomad

import (
	"context"
	"errors"
	"fmt"

	"github.com/hashicorp/nomad/api"
)

// ErrNotHeld is returned by Release for a job without a hold constraint.
var ErrNotHeld = errors.New("the job carries no hetgpu hold constraint")

// Release hands a job back to plain Nomad scheduling: it removes the hold constraint (job,
// groups and tasks) and keeps everything else, including pins hetgpu already made. Meta is
// untouched, so nothing restarts. It retries once on a JobModifyIndex conflict. rpc, when
// set, writes a child linked to its parent through the servers' RPC (keeping the link).
func Release(ctx context.Context, c *api.Client, rpc *RPCConfig, namespace, id string) (*api.JobRegisterResponse, error) {
	rc := newRPCClient(rpc, c)
	if namespace == "" {
		namespace = "default"
	}
	for attempt := 0; ; attempt++ {
		job, _, err := c.Jobs().Info(id, (&api.QueryOptions{Namespace: namespace}).WithContext(ctx))
		if err != nil {
			return nil, fmt.Errorf("read job %s/%s: %w", namespace, id, err)
		}
		if !ReleaseJob(job, "**released** to plain Nomad scheduling by `hetgpu release`") {
			return nil, fmt.Errorf("release %s/%s: %w", namespace, id, ErrNotHeld)
		}
		resp, err := reregister(ctx, c, rc, namespace, job, deref(job.JobModifyIndex, 0), registerTag(id, "hetgpu-release", deref(job.Version, 0)+1, "released to plain Nomad scheduling"))
		if err != nil {
			if isConflict(err) && attempt == 0 {
				continue
			}
			return nil, fmt.Errorf("release %s/%s: register: %w", namespace, id, err)
		}
		v := deref(job.Version, 0) + 1
		if tagInRegister(id) {
			return resp, nil // tagged by the register
		}
		_ = tagVersion(c, id, v, fmt.Sprintf("hetgpu-release-%d", resp.JobModifyIndex), "released to plain Nomad scheduling", (&api.WriteOptions{Namespace: namespace}).WithContext(ctx))
		return resp, nil
	}
}
