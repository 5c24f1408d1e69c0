# The least the hetgpu sidecar needs (Nomad ACL policy). Attach it to the sidecar job's
# workload identity (see hetgpu-sidecar.nomad.hcl) or to a token:
#
#   nomad acl policy apply -namespace default -job hetgpu-sidecar hetgpu-sidecar jobspecs/hetgpu-sidecar.policy.hcl
#
# Repeat the namespace block for every namespace whose jobs hetgpu places; the variables
# block belongs in the namespace of the ha block (default "default").

namespace "default" {
  # list-jobs, read-job: the resync and the event stream's Job, Allocation and Evaluation
  # topics, allocation stats (energy). submit-job: pins and re-holds (a job register with
  # EnforceIndex). tag-job-version: the hetgpu-pin-N and hetgpu-rehold-N version tags.
  # alloc-lifecycle: preemption stops the preempted group's allocations. read-fs: the
  # progress file (alloc/hetgpu/progress.json) of a finished run of a task not run by the
  # hetgpu task driver (docker, podman, exec, raw_exec: docs/any-driver.md).
  capabilities = ["list-jobs", "read-job", "submit-job", "tag-job-version", "alloc-lifecycle", "read-fs"]

  # The leader lock (hetgpu/leader) and the shared state (hetgpu/state/...): write takes and
  # renews the lock and writes chunks, destroy removes superseded chunks.
  variables {
    path "hetgpu/*" {
      capabilities = ["read", "write", "list", "destroy"]
    }
  }
}

# Nodes, their devices and stats (GPU topology, power); the event stream's Node topic.
node {
  policy = "read"
}
