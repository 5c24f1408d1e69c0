# Image-classification training (ResNet-50) placed by hetgpu.
#
# The hold constraint keeps the job pending until the hetgpu sidecar pins it to a node and
# exact GPUs; `nomad job status resnet50-train` shows the placement failure
# "${meta.hetgpu.queue} = waiting-for-hetgpu" until then. hetgpu-toy-train stands in for the
# real training script: it needs no GPU and reports progress the way the hetgpu task driver
# reads it ({"samples": N} lines in $HETGPU_METRICS_FILE).

variable "toy_train" {
  description = "path of hetgpu-toy-train (or your training command)"
  default     = "hetgpu-toy-train"
}

job "resnet50-train" {
  datacenters = ["*"]
  type        = "batch"

  meta = {
    "hetgpu.enable"         = "true"
    "hetgpu.model"          = "resnet/ResNet-50"
    "hetgpu.batch_size"     = "64"
    "hetgpu.framework"      = "pytorch"
    "hetgpu.params"         = "25.6M"
    "hetgpu.runtime"        = "2m"
    "hetgpu.steps"          = "400"
    "hetgpu.priority_class" = "normal"
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
        args    = ["-steps", "400", "-step-time", "100ms", "-batch", "64"]
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
