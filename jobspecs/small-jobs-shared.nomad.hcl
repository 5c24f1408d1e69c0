# A batch of small jobs that may share GPUs: four one-GPU groups held by one job-level hold.
# hetgpu decides each group on its own; when it pins the first, the job-level hold moves down
# to the groups still waiting. hetgpu.allow_sharing lets the placer co-locate two sharing
# jobs on one GPU when that is predicted to pay off.

variable "toy_train" {
  default = "hetgpu-toy-train"
}

job "small-jobs" {
  datacenters = ["*"]
  type        = "batch"

  meta = {
    "hetgpu.enable"         = "true"
    "hetgpu.allow_sharing"  = "true"
    "hetgpu.priority_class" = "low"
    "hetgpu.runtime"        = "1m"
  }

  constraint {
    attribute = "${meta.hetgpu.queue}"
    value     = "waiting-for-hetgpu"
  }

  group "resnet18" {
    meta = {
      "hetgpu.model"      = "resnet/ResNet-18"
      "hetgpu.batch_size" = "16"
    }
    restart {
      attempts = 0
      mode     = "fail"
    }
    task "train" {
      driver = "hetgpu"
      config {
        command = var.toy_train
        args    = ["-steps", "200", "-step-time", "100ms", "-batch", "16"]
        metrics {
          file = "local/metrics.jsonl"
        }
      }
      resources {
        cpu    = 100
        memory = 64
        device "nvidia/gpu" {
          count = 1
        }
      }
    }
  }

  group "lm" {
    meta = {
      "hetgpu.model"      = "lstm/LM"
      "hetgpu.batch_size" = "20"
    }
    restart {
      attempts = 0
      mode     = "fail"
    }
    task "train" {
      driver = "hetgpu"
      config {
        command = var.toy_train
        args    = ["-steps", "200", "-step-time", "100ms", "-batch", "20"]
        metrics {
          file = "local/metrics.jsonl"
        }
      }
      resources {
        cpu    = 100
        memory = 64
        device "nvidia/gpu" {
          count = 1
        }
      }
    }
  }

  group "recommendation" {
    meta = {
      "hetgpu.model"      = "Recommendation"
      "hetgpu.batch_size" = "512"
    }
    restart {
      attempts = 0
      mode     = "fail"
    }
    task "train" {
      driver = "hetgpu"
      config {
        command = var.toy_train
        args    = ["-steps", "200", "-step-time", "100ms", "-batch", "512"]
        metrics {
          file = "local/metrics.jsonl"
        }
      }
      resources {
        cpu    = 100
        memory = 64
        device "nvidia/gpu" {
          count = 1
        }
      }
    }
  }

  group "a3c" {
    meta = {
      "hetgpu.model"      = "A3C"
      "hetgpu.batch_size" = "4"
    }
    restart {
      attempts = 0
      mode     = "fail"
    }
    task "train" {
      driver = "hetgpu"
      config {
        command = var.toy_train
        args    = ["-steps", "200", "-step-time", "100ms", "-batch", "4"]
        metrics {
          file = "local/metrics.jsonl"
        }
      }
      resources {
        cpu    = 100
        memory = 64
        device "nvidia/gpu" {
          count = 1
        }
      }
    }
  }
}
