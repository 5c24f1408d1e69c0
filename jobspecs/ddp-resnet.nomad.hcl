# Multi-node data-parallel training: two workers with 4 GPUs each. hetgpu places one
# allocation per node (count = 2 -> two nodes of one GPU type) and pins both nodes with a
# ${node.unique.id} set_contains_any constraint and the eight GPUs with ${device.ids}.

variable "toy_train" {
  default = "hetgpu-toy-train"
}

job "ddp-resnet" {
  datacenters = ["*"]
  type        = "batch"

  meta = {
    "hetgpu.enable"         = "true"
    "hetgpu.model"          = "resnet/ResNet-50"
    "hetgpu.batch_size"     = "128"
    "hetgpu.max_nodes"      = "2"
    "hetgpu.runtime"        = "3m"
    "hetgpu.priority_class" = "high"
  }

  group "workers" {
    count = 2

    constraint {
      attribute = "${meta.hetgpu.queue}"
      value     = "waiting-for-hetgpu"
    }

    restart {
      attempts = 0
      mode     = "fail"
    }

    task "worker" {
      driver = "hetgpu"

      config {
        command = var.toy_train
        args    = ["-steps", "300", "-step-time", "100ms", "-batch", "128"]
        metrics {
          file = "local/metrics.jsonl"
        }
      }

      resources {
        cpu    = 200
        memory = 128

        device "nvidia/gpu" {
          count = 4
        }
      }
    }
  }
}
