# Data-parallel ResNet-50 training on two GPUs in a podman container (the nomad-driver-podman
# plugin), placed by hetgpu like a hetgpu-driver task: ranked, pinned to a node and exact
# GPUs, explained, preempted. The device plugin's reservation sets NVIDIA_VISIBLE_DEVICES and
# CUDA_VISIBLE_DEVICES to the UUIDs of the GPUs hetgpu pinned and lists their device nodes;
# with the NVIDIA Container Toolkit's hook installed for podman, the container sees exactly
# those GPUs.
#
# Without the hetgpu task driver the sidecar measures the run itself (docs/any-driver.md):
# runtime from the allocation, energy from the GPUs' energy counters in the device stats,
# throughput from the progress file the training script writes into the shared allocation
# directory:
#
#   ${NOMAD_ALLOC_DIR}/hetgpu/progress.json   {"steps": 1200, "samples_per_s": 850.5}
#
# (written anew every few steps; the task gets its path in HETGPU_PROGRESS_FILE).

variable "image" {
  description = "a CUDA image with the training script"
  default     = "docker.io/pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime"
}

variable "args" {
  description = "the training command and its arguments"
  type        = list(string)
  default     = ["torchrun", "--nproc-per-node", "2", "/workspace/train.py", "--steps", "4000"]
}

job "resnet50-podman" {
  datacenters = ["*"]
  type        = "batch"

  meta = {
    "hetgpu.enable"      = "true"
    "hetgpu.model"       = "resnet/ResNet-50"
    "hetgpu.batch_size"  = "64"
    "hetgpu.framework"   = "pytorch"
    "hetgpu.params"      = "25.6M"
    "hetgpu.runtime"     = "40m"
    "hetgpu.steps"       = "4000"
    "hetgpu.preemptible" = "true"
  }

  # The hold: the job waits until the hetgpu sidecar pins it.
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
      driver = "podman"

      config {
        image   = var.image
        command = var.args[0]
        args    = slice(var.args, 1, length(var.args))
      }

      env {
        HETGPU_PROGRESS_FILE = "${NOMAD_ALLOC_DIR}/hetgpu/progress.json"
      }

      resources {
        cpu    = 4000
        memory = 16384

        device "nvidia/gpu" {
          count = 2
        }
      }
    }
  }
}
