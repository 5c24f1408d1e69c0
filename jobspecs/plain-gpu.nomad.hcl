# A job with plain Nomad GPU constraints only: no hetgpu annotations and no hold, so Nomad
# places it itself. hetgpu still sees the GPUs it occupies and never hands them to another
# job. It works unchanged with hashicorp's nvidia device plugin (same nvidia/gpu device).

variable "toy_train" {
  default = "hetgpu-toy-train"
}

job "plain-gpu" {
  datacenters = ["*"]
  type        = "batch"

  group "infer" {
    restart {
      attempts = 0
      mode     = "fail"
    }

    task "infer" {
      driver = "hetgpu"

      config {
        command = var.toy_train
        args    = ["-steps", "200", "-step-time", "100ms", "-batch", "8"]
      }

      resources {
        cpu    = 100
        memory = 64

        device "nvidia/gpu" {
          count = 1

          constraint {
            attribute = "${device.attr.memory}"
            operator  = ">="
            value     = "8 GiB"
          }

          affinity {
            attribute = "${device.model}"
            operator  = "regexp"
            value     = "T4"
            weight    = 50
          }
        }
      }
    }
  }
}
