# BERT fine-tuning on one GPU with at least 16 GiB, placed by hetgpu. The device constraint
# is an ordinary Nomad constraint: hetgpu only considers GPUs that satisfy it.

variable "toy_train" {
  default = "hetgpu-toy-train"
}

job "bert-finetune" {
  datacenters = ["*"]
  type        = "batch"

  constraint {
    attribute = "${meta.hetgpu.queue}"
    value     = "waiting-for-hetgpu"
  }

  group "finetune" {
    meta = {
      "hetgpu.enable"     = "true"
      "hetgpu.model"      = "transformer/BERT-base"
      "hetgpu.batch_size" = "32"
      "hetgpu.params"     = "110M"
      "hetgpu.framework"  = "pytorch"
      "hetgpu.runtime"    = "90s"
      "hetgpu.steps"      = "300"
    }

    restart {
      attempts = 0
      mode     = "fail"
    }

    task "finetune" {
      driver = "hetgpu"

      config {
        command = var.toy_train
        args    = ["-steps", "300", "-step-time", "100ms", "-batch", "32"]
        metrics {
          file = "local/metrics.jsonl"
        }
      }

      resources {
        cpu    = 200
        memory = 128

        device "nvidia/gpu" {
          count = 1

          constraint {
            attribute = "${device.attr.memory}"
            operator  = ">="
            value     = "15 GiB"
          }
        }
      }
    }
  }
}
