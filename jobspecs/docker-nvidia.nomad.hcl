# BERT fine-tuning in a container (Nomad's docker driver with the NVIDIA container runtime),
# placed by hetgpu like a hetgpu-driver task: ranked, pinned to a node and exact GPUs,
# explained, preempted. The device plugin's reservation sets NVIDIA_VISIBLE_DEVICES to the
# UUIDs of the GPUs hetgpu pinned; the NVIDIA runtime exposes exactly those to the container.
# The client's docker plugin must allow the runtime (plugin "docker" { config {
# allow_runtimes = ["runc", "nvidia"] } }, and nvidia_runtime, default "nvidia", names it).
#
# Without the hetgpu task driver the sidecar measures the run itself (docs/any-driver.md):
# runtime from the allocation, energy from the GPUs' energy counters in the device stats,
# throughput from the progress file the training script writes into the shared allocation
# directory (/alloc in the container):
#
#   ${NOMAD_ALLOC_DIR}/hetgpu/progress.json   {"steps": 1200, "samples_per_s": 850.5}
#
# (written anew every few steps; the task gets its path in HETGPU_PROGRESS_FILE).

variable "image" {
  description = "a CUDA image with the training script"
  default     = "nvcr.io/nvidia/pytorch:24.05-py3"
}

variable "args" {
  description = "the training command and its arguments"
  type        = list(string)
  default     = ["python", "/workspace/train.py", "--model", "bert-base-uncased", "--steps", "3000"]
}

job "bert-docker" {
  datacenters = ["*"]
  type        = "batch"

  meta = {
    "hetgpu.enable"     = "true"
    "hetgpu.model"      = "transformer/BERT-base"
    "hetgpu.batch_size" = "32"
    "hetgpu.framework"  = "pytorch"
    "hetgpu.params"     = "110M"
    "hetgpu.runtime"    = "30m"
    "hetgpu.steps"      = "3000"
  }

  # The hold: the job waits until the hetgpu sidecar pins it.
  constraint {
    attribute = "${meta.hetgpu.queue}"
    value     = "waiting-for-hetgpu"
  }

  group "finetune" {
    restart {
      attempts = 0
      mode     = "fail"
    }

    task "finetune" {
      driver = "docker"

      config {
        image   = var.image
        runtime = "nvidia"
        command = var.args[0]
        args    = slice(var.args, 1, length(var.args))
      }

      env {
        HETGPU_PROGRESS_FILE = "${NOMAD_ALLOC_DIR}/hetgpu/progress.json"
      }

      resources {
        cpu    = 2000
        memory = 8192

        device "nvidia/gpu" {
          count = 1

          constraint {
            attribute = "${device.attr.memory}"
            operator  = ">="
            value     = "16 GiB"
          }
        }
      }
    }
  }
}
