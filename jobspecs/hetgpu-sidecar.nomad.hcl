# The hetgpu sidecar run by Nomad itself: two replicas on different nodes, one leader elected
# on a Nomad Variables lock (hetgpu sidecar -ha; README, section "High availability"). The
# standby keeps its view of the cluster warm from the event stream, answers reads and
# redirects writes (POST /v1/observations) to the leader. Nomad restarts a replica that dies;
# the other one has taken over within seconds.
#
# The task reaches Nomad through the Task API socket with its workload identity; give that
# identity the sidecar's policy once (least privilege, see hetgpu-sidecar.policy.hcl):
#
#   nomad acl policy apply -namespace default -job hetgpu-sidecar \
#     -description "hetgpu sidecar" hetgpu-sidecar jobspecs/hetgpu-sidecar.policy.hcl
#
# then: nomad job run -var hetgpu_bin=/usr/local/bin/hetgpu jobspecs/hetgpu-sidecar.nomad.hcl
#
# Task drivers find the sidecar as the Nomad service "hetgpu-sidecar" (or point sidecar_addr
# at any replica: a standby redirects them to the leader).

variable "hetgpu_bin" {
  description = "path of the hetgpu binary on the clients"
  default     = "/usr/local/bin/hetgpu"
}

variable "nomad_addr" {
  description = "how the sidecar reaches Nomad; empty: the Task API socket with the workload identity"
  default     = ""
}

variable "insecure" {
  description = "serve the node-address API without TLS or tokens (test clusters only; see README, Security)"
  default     = false
}

variable "managed_namespace" {
  description = "the namespace whose jobs hetgpu places (the policy grants the same one)"
  default     = "default"
}

locals {
  # The Task API socket is rendered by the template below, inside the task's secrets dir.
  nomad_addr = var.nomad_addr != "" ? var.nomad_addr : "unix://{{ env \"NOMAD_SECRETS_DIR\" }}/api.sock"
}

job "hetgpu-sidecar" {
  type = "service"

  group "sidecar" {
    count = 2

    # One replica per node: losing a node leaves the other leading.
    constraint {
      distinct_hosts = true
    }

    network {
      port "http" {}
    }

    service {
      provider = "nomad"
      name     = "hetgpu-sidecar"
      port     = "http"
      tags     = ["hetgpu"]

      # Leader and standby both answer 200: a standby is healthy, it just does not write.
      check {
        type     = "http"
        path     = "/v1/health"
        interval = "5s"
        timeout  = "2s"
      }
    }

    restart {
      attempts = 10
      interval = "5m"
      delay    = "2s"
      mode     = "delay"
    }

    task "sidecar" {
      # raw_exec for a host binary; exec or docker work the same way with the image's path.
      driver = "raw_exec"

      config {
        command = var.hetgpu_bin
        args    = ["sidecar", "-ha", "-config", "${NOMAD_TASK_DIR}/sidecar.hcl"]
      }

      # NOMAD_TOKEN is the workload identity; the policy attached to this job applies to it.
      identity {
        env = true
      }

      template {
        destination = "local/sidecar.hcl"
        data        = <<EOT
listen    = "{{ env "NOMAD_ADDR_http" }}"
# The API listens on the node's address: give it tls { ... } and tokens (README, Security),
# e.g. rendered from a Nomad variable the workload identity reads, or set -var insecure=true.
insecure  = ${var.insecure}
state_dir = "{{ env "NOMAD_ALLOC_DIR" }}/data/hetgpu"
reconcile = "2s"
nomad {
  address   = "${local.nomad_addr}"
  namespace = "${var.managed_namespace}"
}
ha {
  enabled   = true
  namespace = "${var.managed_namespace}"
  lock_path  = "hetgpu/leader"
  state_path = "hetgpu/state"
  ttl       = "10s"
  renew     = "2s"
  advertise = "http://{{ env "NOMAD_ADDR_http" }}"
}
EOT
      }

      resources {
        cpu    = 500
        memory = 512
      }
    }
  }
}
