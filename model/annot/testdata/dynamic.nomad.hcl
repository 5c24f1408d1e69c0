# Groups written with a dynamic block over a local map (built with merge), values from Nomad's
# functions (format, upper), a device constraint from a dynamic block of its own (iterator
# renamed), and the hold at the job level. model/annot's tests read it, and
# e2e's TestJobspecParsedAsNomad compares what validate reads with Nomad's own parser.
variable "gpus" {
  default = 2
}

locals {
  // models names local.batch, written below it: locals resolve in any order.
  models = merge({ resnet18 = local.batch }, { lm = "20" })
  batch  = "16"
  min_mem = ["16 GiB"]
}

job "small" {
  type = "batch"
  meta = {
    "hetgpu.enable"  = "true"
    "hetgpu.runtime" = "1m"
  }
  constraint {
    attribute = "${meta.hetgpu.queue}"
    value     = "waiting-for-hetgpu"
  }

  dynamic "group" {
    for_each = local.models
    labels   = [group.key]
    content {
      meta = {
        "hetgpu.batch_size" = group.value
        "hetgpu.model"      = format("model/%s", group.key)
        "owner"             = upper("ml")
      }
      task "train" {
        driver = "exec"
        resources {
          device "nvidia/gpu" {
            count = var.gpus
            dynamic "constraint" {
              for_each = local.min_mem
              iterator = mem
              content {
                attribute = "${device.attr.memory}"
                operator  = ">="
                value     = mem.value
              }
            }
          }
        }
      }
    }
  }

  group "static" {
    task "t" {
      driver = "exec"
    }
  }
}
