# The hetgpu sidecar run by Nomad itself: two replicas on different nodes, one leader elected
# on a Nomad Variables lock (hetgpu sidecar -ha; README, section "High availability"). The
# standby keeps its view of the cluster warm from the event stream, answers reads and
# redirects writes (POST /v1/observations) to the leader. Nomad restarts a replica that dies;
# the other one has taken over within seconds.
#
# The API listens on the node's address, so it serves HTTPS and requires tokens (README,
# Security). Its certificate, key and tokens come from the Nomad variable
# nomad/jobs/hetgpu-sidecar, which this job's workload identity reads without any policy.
# Create it once, before the job (README, "High availability", the secrets variable):
#
#   nomad var put nomad/jobs/hetgpu-sidecar \
#     tls_cert=@sidecar.pem tls_key=@sidecar-key.pem ca=@ca.pem \
#     read_token=$(openssl rand -hex 24) write_token=$(openssl rand -hex 24)
#
# (optional keys: client_ca=@clients-ca.pem for mTLS, token=... for an admin token; with
# client_ca only GET /v1/health answers without a client certificate, for the service check).
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
# at any replica: a standby redirects them to the leader); give them the write_token as
# sidecar_token and the CA as sidecar_ca_file.

variable "hetgpu_bin" {
  description = "path of the hetgpu binary on the clients"
  default     = "/usr/local/bin/hetgpu"
}

variable "nomad_addr" {
  description = "how the sidecar reaches Nomad; empty: the Task API socket with the workload identity"
  default     = ""
}

variable "nomad_rpc_address" {
  description = "a Nomad server's RPC host:port (4647) the task can reach, for pins of periodic and dispatched children (docs/nomad-batch.md); empty: none, such children of held jobs are then reported undecidable"
  default     = ""
}
variable "insecure" {
  description = "test clusters only: serve plain HTTP without tokens on the node's address and read no variable (README, Security)"
  default     = false
}

variable "secrets_var" {
  description = "the Nomad variable holding tls_cert, tls_key, read_token, write_token (optional: ca, client_ca, token)"
  default     = "nomad/jobs/hetgpu-sidecar"
}

variable "managed_namespace" {
  description = "the namespace whose jobs hetgpu places (the policy grants the same one)"
  default     = "default"
}

locals {
  # The Task API socket is rendered by the template below, inside the task's secrets dir.
  nomad_addr = var.nomad_addr != "" ? var.nomad_addr : "unix://{{ env \"NOMAD_SECRETS_DIR\" }}/api.sock"
  scheme     = var.insecure ? "http" : "https"
  # The files rendered from the secrets variable, inside the task's secrets dir (0600 there).
  secret_files = var.insecure ? {} : {
    "tls/cert.pem"      = "tls_cert"
    "tls/key.pem"       = "tls_key"
    "tls/ca.pem"        = "ca"
    "tls/client-ca.pem" = "client_ca"
  }
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
      # /v1/health needs no token. The check cannot present a client certificate, so with
      # client_ca (mTLS) the sidecar lets GET /v1/health alone through without one
      # (tls.health_without_client_cert, set below); every other request still needs one.
      check {
        type            = "http"
        protocol        = local.scheme
        tls_skip_verify = true
        path            = "/v1/health"
        interval        = "5s"
        timeout         = "2s"
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

      # The certificate, key and CAs from the secrets variable; an absent optional key
      # renders an empty file, which the configuration below then leaves out.
      dynamic "template" {
        for_each = local.secret_files
        content {
          destination = "secrets/${template.key}"
          perms       = "0600"
          change_mode = "restart"
          data        = "{{ with nomadVar \"${var.secrets_var}\" }}{{ .${template.value}.Value }}{{ end }}"
        }
      }

      # The tokens, as HETGPU_READ_TOKEN, HETGPU_WRITE_TOKEN (and HETGPU_TOKEN) in the
      # task's environment, never in a file under local/.
      dynamic "template" {
        for_each = var.insecure ? [] : [1]
        content {
          destination = "secrets/tokens.env"
          perms       = "0600"
          env         = true
          change_mode = "restart"
          data        = <<EOT
{{ with nomadVar "${var.secrets_var}" }}HETGPU_READ_TOKEN={{ .read_token.Value | toJSON }}
HETGPU_WRITE_TOKEN={{ .write_token.Value | toJSON }}
{{ with .token.Value }}HETGPU_TOKEN={{ . | toJSON }}
{{ end }}{{ end }}
EOT
        }
      }

      template {
        destination = "local/sidecar.hcl"
        change_mode = "restart"
        data        = <<EOT
listen    = "{{ env "NOMAD_ADDR_http" }}"
insecure  = ${var.insecure}
%{ if !var.insecure ~}
tls {
  cert_file = "{{ env "NOMAD_SECRETS_DIR" }}/tls/cert.pem"
  key_file  = "{{ env "NOMAD_SECRETS_DIR" }}/tls/key.pem"
{{ with nomadVar "${var.secrets_var}" }}{{ if .client_ca.Value }}  client_ca_file = "{{ env "NOMAD_SECRETS_DIR" }}/tls/client-ca.pem"
  health_without_client_cert = true
{{ end }}{{ end }}}
%{ endif ~}
state_dir = "{{ env "NOMAD_ALLOC_DIR" }}/data/hetgpu"
reconcile = "2s"
nomad {
  address   = "${local.nomad_addr}"
  namespace = "${var.managed_namespace}"
%{ if var.nomad_rpc_address != "" ~}
  rpc_address = "${var.nomad_rpc_address}"
%{ endif ~}
}
ha {
  enabled    = true
  namespace  = "${var.managed_namespace}"
  lock_path  = "hetgpu/leader"
  state_path = "hetgpu/state"
  ttl        = "10s"
  renew      = "2s"
  advertise  = "${local.scheme}://{{ env "NOMAD_ADDR_http" }}"
%{ if !var.insecure ~}
{{ with nomadVar "${var.secrets_var}" }}{{ if .ca.Value }}  probe_ca_file = "{{ env "NOMAD_SECRETS_DIR" }}/tls/ca.pem"
{{ end }}{{ end }}%{ endif ~}
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
