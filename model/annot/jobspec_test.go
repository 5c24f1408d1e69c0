package annot

import (
	"fmt"
	"strings"
	"testing"
)

const goodSpec = `
variable "batch" {
  default = 64
}

job "train" {
  type = "batch"
  meta = {
    "hetgpu.enable"     = "true"
    "hetgpu.model"      = "resnet/ResNet-50"
    "hetgpu.batch_size" = var.batch
  }
  constraint {
    attribute = "${meta.hetgpu.queue}"
    value     = "waiting-for-hetgpu"
  }
  group "trainer" {
    count = 2
    meta = {
      "hetgpu.max_nodes" = 2
    }
    meta {
      owner = "ml-team"
    }
    task "train" {
      driver = "hetgpu"
      resources {
        device "nvidia/gpu" {
          count = 4
          constraint {
            attribute = "${device.attr.memory}"
            operator  = ">="
            value     = "16 GiB"
          }
          affinity {
            attribute = "${device.model}"
            value     = "NVIDIA A100-SXM4-40GB"
            weight    = 50
          }
        }
      }
    }
  }
}
`

func TestParseJobspec(t *testing.T) {
	js, err := ParseJobspec("good.nomad.hcl", []byte(goodSpec))
	if err != nil {
		t.Fatal(err)
	}
	if js.ID != "train" || js.Type != "batch" {
		t.Errorf("job = %q type %q", js.ID, js.Type)
	}
	if v := js.Meta[KeyBatchSize]; v.Text != "64" || !v.Exact {
		t.Errorf("batch size from var default = %+v, want exact 64", v)
	}
	if len(js.Constraints) != 1 || js.Constraints[0].LTarget != HoldAttribute || js.Constraints[0].RTarget != HoldValue {
		t.Fatalf("runtime interpolation not kept verbatim: %+v", js.Constraints)
	}
	if len(js.Groups) != 1 {
		t.Fatalf("groups = %d", len(js.Groups))
	}
	g := js.Groups[0]
	if g.Count != 2 || g.Meta[KeyMaxNodes].Text != "2" || g.Meta["owner"].Text != "ml-team" {
		t.Errorf("group = %+v", g)
	}
	d := g.Tasks[0].Devices[0]
	if d.Name != "nvidia/gpu" || d.Count != 4 || d.Constraints[0].LTarget != "${device.attr.memory}" ||
		d.Constraints[0].RTarget != "16 GiB" || d.Affinities[0].Weight != 50 {
		t.Errorf("device = %+v", d)
	}
	if f := Check(js); len(f) != 0 {
		t.Errorf("findings on a good spec: %v", f)
	}
}

// Pieces of the jobspecs TestCheck checks: the job-level hold, a group without GPUs, and a
// group "name" whose task asks for gpus GPUs (with the hold on the group when held).
const (
	jobHold = `  constraint {
    attribute = "${meta.hetgpu.queue}"
    value = "waiting-for-hetgpu"
  }
`
	launcherGroup = `  group "launcher" {
    task "t" { driver = "exec" }
  }
`
)

func gpuGroup(name string, gpus int, held bool) string {
	hold := ""
	if held {
		hold = jobHold // HCL does not mind the indentation
	}
	return fmt.Sprintf(`  group %q {
%s    task "t" {
      resources {
        device "nvidia/gpu" { count = %d }
      }
    }
  }
`, name, hold, gpus)
}

func TestCheck(t *testing.T) {
	tests := []struct {
		name string
		spec string
		want []string // substrings of findings, in order; nil: no findings at all
		not  []string // substrings no finding may contain
	}{
		{
			// The hold wins over hetgpu.enable = false: a warning, not an error.
			name: "held with hetgpu.enable false",
			spec: `job "j" {
  meta = { "hetgpu.enable" = "false" }
` + jobHold + gpuGroup("g", 2, false) + "}",
			want: []string{"warning", "the hold wins and hetgpu decides for it"},
		},
		{
			// The README: the hold alone hands a group to hetgpu; no warning about the missing
			// hetgpu.enable.
			name: "held without hetgpu.enable is fine",
			spec: `job "j" {
  meta = { "hetgpu.model" = "resnet/ResNet-50" }
` + jobHold + gpuGroup("g", 2, false) + "}",
		},
		{
			name: "bad annotation names key value and line",
			spec: `job "j" {
  meta = {
    "hetgpu.batch_size" = "sixty"
  }
  constraint {
    attribute = "${meta.hetgpu.queue}"
    value = "waiting-for-hetgpu"
  }
  group "g" {
    task "t" {
      resources {
        device "gpu" {}
      }
    }
  }
}`,
			want: []string{`x.hcl:3: error: group "g": hetgpu.batch_size = "sixty"`},
		},
		{
			name: "held without gpu",
			spec: `job "j" {
  group "g" {
    meta = { "hetgpu.enable" = "true" }
    constraint {
      attribute = "${meta.hetgpu.queue}"
      operator = "=="
      value = "waiting-for-hetgpu"
    }
    task "t" {
      driver = "exec"
    }
  }
}`,
			want: []string{"requests no GPU"},
		},
		{
			name: "launcher beside gpu groups under the job hold",
			spec: "job \"j\" {\n" + jobHold + launcherGroup + gpuGroup("workers", 2, false) + "}",
			want: nil,
		},
		{
			name: "job hold without any gpu group",
			spec: "job \"j\" {\n" + jobHold + launcherGroup + "}",
			want: []string{"requests no GPU"},
		},
		{
			name: "enabled without hold is shadow only",
			spec: `job "j" {
  meta = { "hetgpu.enable" = "true" }
` + gpuGroup("g", 1, false) + "}",
			want: []string{"warning", "shadow"},
		},
		{
			name: "hold disabled waits forever; hold in task; misspelt hold",
			spec: `job "j" {
  meta = { "hetgpu.enable" = "false" }
  constraint {
    attribute = "${meta.hetgpu.queue}"
    value = "waiting"
  }
  group "g" {
    constraint {
      attribute = "${meta.hetgpu.queue}"
      value = "waiting-for-hetgpu"
    }
    task "t" {
      constraint {
        attribute = "${meta.hetgpu.queue}"
        value = "waiting-for-hetgpu"
      }
      resources {
        device "nvidia/gpu" { count = 1 }
      }
    }
  }
}`,
			want: []string{"error", "not the hold constraint", "not a task"},
		},
		{
			name: "max nodes without count",
			spec: `job "j" {
  meta = { "hetgpu.enable" = "true", "hetgpu.max_nodes" = "4" }
` + gpuGroup("g", 2, true) + "}",
			want: []string{"has no effect"},
		},
		{
			name: "non-literal value",
			spec: `job "j" {
  meta = { "hetgpu.enable" = "true", "hetgpu.model" = file("model.txt") }
` + gpuGroup("g", 2, true) + "}",
			want: []string{"not a literal"},
		},
		{
			// Warned as unchecked, so not also checked as the expression's source text.
			name: "non-literal value of a checked key",
			spec: `job "j" {
  meta = { "hetgpu.enable" = "true", "hetgpu.runtime" = file("runtime.txt") }
` + gpuGroup("g", 2, true) + "}",
			want: []string{"warning", `hetgpu.runtime = file("runtime.txt") is not a literal`},
			not:  []string{"error", "expected a positive Go duration"},
		},
		{
			// A pin is a register, and Nomad refuses any register that carries a payload.
			name: "held parameterized job, payload required",
			spec: `job "j" {
  parameterized { payload = "required" }
` + jobHold + gpuGroup("g", 2, false) + "}",
			want: []string{"error", `payload = "required"`, "can never pin a child"},
		},
		{
			name: "held parameterized job, payload optional by default",
			spec: `job "j" {
  parameterized { meta_optional = ["run"] }
` + jobHold + gpuGroup("g", 2, false) + "}",
			want: []string{"warning", "a child dispatched with a payload can never be pinned"},
		},
		{
			name: "held parameterized job, payload forbidden",
			spec: `job "j" {
  parameterized { payload = "forbidden" }
` + jobHold + gpuGroup("g", 2, false) + "}",
		},
		{
			name: "parameterized job without the hold",
			spec: `job "j" {
  parameterized { payload = "required" }
` + gpuGroup("g", 2, false) + "}",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			js, err := ParseJobspec("x.hcl", []byte(tt.spec))
			if err != nil {
				t.Fatal(err)
			}
			var all []string
			for _, f := range Check(js) {
				all = append(all, f.String())
			}
			joined := strings.Join(all, "\n")
			if tt.want == nil && len(all) > 0 {
				t.Errorf("findings on a valid spec:\n%s", joined)
			}
			for _, w := range tt.want {
				if !strings.Contains(joined, w) {
					t.Errorf("findings do not mention %q:\n%s", w, joined)
				}
			}
			for _, w := range tt.not {
				if strings.Contains(joined, w) {
					t.Errorf("findings mention %q:\n%s", w, joined)
				}
			}
		})
	}
}

func TestParseJobspecErrors(t *testing.T) {
	for _, tt := range []struct{ name, spec, want string }{
		{"syntax", `job "j" {`, "parse"},
		{"two jobs", `job "a" {}
job "b" {}`, "exactly one job"},
		{"bad count", `job "a" {
  group "g" { count = "many" }
}`, `count = "many"`},
		{"meta not a map", `job "a" {
  meta = "x"
}`, "meta must be"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseJobspec("x.hcl", []byte(tt.spec))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want %q", err, tt.want)
			}
		})
	}
}

func TestIsGPU(t *testing.T) {
	for name, want := range map[string]bool{"gpu": true, "nvidia/gpu": true, "nvidia/gpu/Tesla T4": true, "fpga": false, "xilinx/fpga": false,
		"gpu-slot": true, "nvidia/gpu-slot": true, "nvidia/gpu-slot/Tesla T4 shared 0": true, "nvidia/gpus": false} {
		if IsGPU(name) != want {
			t.Errorf("IsGPU(%q) = %v", name, !want)
		}
	}
}

func FuzzParseJobspec(f *testing.F) {
	f.Add(goodSpec)
	f.Add(string(dynamicSpec(f)))
	f.Add(`job "x" { meta = { "hetgpu.batch_size" = "${meta.x}" } }`)
	f.Add(`job "x" { group "g" { count = 3 task "t" { resources { device "gpu" { count = 2 } } } } }`)
	f.Fuzz(func(t *testing.T, src string) {
		js, err := ParseJobspec("f.hcl", []byte(src))
		if err != nil {
			return
		}
		for _, fd := range Check(js) {
			if fd.Severity != "error" && fd.Severity != "warning" {
				t.Fatalf("bad severity %q", fd.Severity)
			}
		}
	})
}
