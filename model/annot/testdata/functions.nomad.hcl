# Values from the functions Nomad adds beyond cty's standard library: a file read beside the
# jobspec, YAML, base64, cidr, sha256 and uuidv5 (deterministic ones only, so that two parses
# agree). model/annot's tests read it, and e2e's TestJobspecParsedAsNomad compares what
# validate reads with Nomad's own parser.
locals {
  framework = yamldecode(base64decode(base64encode("framework: pytorch\nreplicas: 2"))).framework
}

job "functions" {
  meta = {
    "hetgpu.runtime"   = trimspace(file("functions.runtime.txt"))
    "hetgpu.framework" = local.framework
  }

  constraint {
    attribute = "${meta.hetgpu.queue}"
    value     = "waiting-for-hetgpu"
  }

  group "train" {
    count = yamldecode("replicas: 2").replicas

    meta = {
      "hetgpu.model"      = basename("/models/resnet50")
      "hetgpu.batch_size" = parseint(substr(sha256(cidrhost("10.2.0.0/16", 7)), 0, 2), 16) + 1
      "hetgpu.params"     = "${strlen(uuidv5("dns", "resnet50.example.com"))}M"
    }

    task "train" {
      driver = "exec"
      config {
        command = "/bin/true"
      }
      resources {
        device "nvidia/gpu" {
          count = fileexists("functions.runtime.txt") ? 2 : 1
        }
      }
    }
  }
}
