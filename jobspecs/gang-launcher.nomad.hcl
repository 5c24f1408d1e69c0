# A launcher and its GPU workers as one gang: the job-level hold keeps both groups waiting,
# and hetgpu pins the workers and releases the launcher in one job update, so the launcher
# never starts before its workers have GPUs. Add more GPU groups and they join the gang: all
# of them are placed or none (set "hetgpu.gang" = "false" to decide them one by one).

variable "toy_train" {
  default = "hetgpu-toy-train"
}

job "gang-launcher" {
  datacenters = ["*"]
  type        = "batch"

  meta = {
    "hetgpu.enable"     = "true"
    "hetgpu.model"      = "resnet/ResNet-50"
    "hetgpu.batch_size" = "64"
    "hetgpu.runtime"    = "2m"
  }

  constraint {
    attribute = "${meta.hetgpu.queue}"
    value     = "waiting-for-hetgpu"
  }

  # No GPU: placed by Nomad as soon as the pin of the workers lifts the job-level hold.
  group "launcher" {
    restart {
      attempts = 0
      mode     = "fail"
    }

    task "launch" {
      driver = "hetgpu"

      config {
        command = var.toy_train
        args    = ["-steps", "100", "-step-time", "100ms", "-batch", "64"]
      }

      resources {
        cpu    = 100
        memory = 64
      }
    }
  }

  group "workers" {
    restart {
      attempts = 0
      mode     = "fail"
    }

    task "worker" {
      driver = "hetgpu"

      config {
        command = var.toy_train
        args    = ["-steps", "200", "-step-time", "100ms", "-batch", "64"]
        metrics {
          file = "local/metrics.jsonl"
        }
      }

      resources {
        cpu    = 200
        memory = 128

        device "nvidia/gpu" {
          count = 2
        }
      }
    }
  }
}
