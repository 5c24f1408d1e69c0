# An energy-capped job: it must run at least 3 training steps/s (T_min, GOGH's minimum
# throughput; ResNet-50 at batch 64 does about 1.5 on a T4, 4.4 on a V100 and 6.8 on an A100)
# and, above that, hetgpu weighs energy heavily (hetgpu.energy_weight), so it lands on the
# most energy-efficient GPU type that still meets T_min rather than the fastest one. On real
# GPUs, add `power_limit = 200` to the task config to also cap each GPU's power through the
# hetgpu driver (NVML; the fake GPUs used without hardware refuse power limits).

variable "toy_train" {
  default = "hetgpu-toy-train"
}

job "energy-capped" {
  datacenters = ["*"]
  type        = "batch"

  meta = {
    "hetgpu.enable"         = "true"
    "hetgpu.model"          = "resnet/ResNet-50"
    "hetgpu.batch_size"     = "64"
    "hetgpu.min_throughput" = "3"
    "hetgpu.energy_weight"  = "5"
    "hetgpu.runtime"        = "2m"
    "hetgpu.steps"          = "300"
  }

  constraint {
    attribute = "${meta.hetgpu.queue}"
    value     = "waiting-for-hetgpu"
  }

  group "train" {
    restart {
      attempts = 0
      mode     = "fail"
    }

    task "train" {
      driver = "hetgpu"

      config {
        command = var.toy_train
        args    = ["-steps", "300", "-step-time", "100ms", "-batch", "64"]
        metrics {
          file = "local/metrics.jsonl"
        }
      }

      resources {
        cpu    = 200
        memory = 128

        device "nvidia/gpu" {
          count = 1
        }
      }
    }
  }
}
