# Constraints and affinities written with Nomad's shorthand attributes (the operator named as
# an attribute) at every level hetgpu reads. e2e's TestJobspecParsedAsNomad checks that
# validate reads them as Nomad's own parser does.
job "shorthand" {
  type = "batch"
  constraint {
    attribute = "${meta.hetgpu.queue}"
    value     = "waiting-for-hetgpu"
  }
  constraint {
    attribute = "${attr.kernel.version}"
    version   = ">= 5.10"
  }
  constraint {
    distinct_property = "${meta.rack}"
  }

  group "train" {
    count = 2
    constraint {
      distinct_hosts = true
    }
    constraint {
      attribute = "${attr.unique.hostname}"
      regexp    = "^gpu-"
    }
    task "train" {
      driver = "exec"
      constraint {
        attribute = "${attr.os.name}"
        semver    = ">= 1.0.0"
      }
      resources {
        device "nvidia/gpu" {
          count = 4
          constraint {
            attribute    = "${device.attr.features}"
            set_contains = "nvlink"
          }
          affinity {
            attribute        = "${device.model}"
            set_contains_any = "NVIDIA A100-SXM4-40GB,NVIDIA H100"
            weight           = 50
          }
          affinity {
            attribute = "${device.attr.memory}"
            operator  = ">="
            value     = "40 GiB"
            weight    = -20
          }
        }
      }
    }
  }
}
