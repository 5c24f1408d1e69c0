# ResNet-50 training under Nomad's exec driver (the task runs in a chroot of the host's
# /bin, /usr, /lib, ...), placed by hetgpu like a hetgpu-driver task: ranked, pinned to a node
# and exact GPUs, explained, preempted. The GPUs hetgpu pinned reach the task through the
# device plugin's reservation: CUDA_VISIBLE_DEVICES and NVIDIA_VISIBLE_DEVICES hold their
# UUIDs, and their device nodes are bound into the chroot.
#
# Without the hetgpu task driver the sidecar measures the run itself (docs/any-driver.md):
# runtime from the allocation, energy from the GPUs' energy counters in the device stats,
# throughput from the progress file the training script writes:
#
#   ${NOMAD_ALLOC_DIR}/hetgpu/progress.json   {"steps": 1200, "samples_per_s": 850.5}
#
# (written anew, e.g. to a temporary file renamed over it, every few steps; the task gets its
# path in HETGPU_PROGRESS_FILE). `hetgpu validate jobspecs/exec-train.nomad.hcl` checks it.

variable "command" {
  description = "the training command, inside the task's chroot"
  default     = "/usr/bin/python3"
}

variable "args" {
  description = "its arguments"
  type        = list(string)
  default     = ["local/train.py", "--steps", "2000", "--batch-size", "64"]
}

job "resnet50-exec" {
  datacenters = ["*"]
  type        = "batch"

  meta = {
    "hetgpu.enable"     = "true"
    "hetgpu.model"      = "resnet/ResNet-50"
    "hetgpu.batch_size" = "64"
    "hetgpu.framework"  = "pytorch"
    "hetgpu.params"     = "25.6M"
    "hetgpu.runtime"    = "20m"
    "hetgpu.steps"      = "2000"
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
      driver = "exec"

      config {
        command = var.command
        args    = var.args
      }

      env {
        HETGPU_PROGRESS_FILE = "${NOMAD_ALLOC_DIR}/hetgpu/progress.json"
      }

      resources {
        cpu    = 500
        memory = 1024

        device "nvidia/gpu" {
          count = 1
        }
      }
    }
  }
}
