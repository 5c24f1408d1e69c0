package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Every bundled jobspec must pass `hetgpu validate` without errors or warnings.
func TestValidateJobspecs(t *testing.T) {
	files, err := filepath.Glob("../../../jobspecs/*.nomad.hcl")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 6 {
		t.Fatalf("found %d jobspecs, want at least 6", len(files))
	}
	var out, errb bytes.Buffer
	code := run(context.Background(), append([]string{"validate", "-strict"}, files...), &out, &errb)
	if code != 0 {
		t.Fatalf("validate = %d\n%s%s", code, out.String(), errb.String())
	}
	if n := strings.Count(out.String(), ": ok ("); n != len(files) {
		t.Errorf("%d of %d jobspecs ok:\n%s", n, len(files), out.String())
	}
}

// writeHeldSpec writes a held jobspec for job id with the given job meta (lines after the
// first indented by four spaces) and one task asking for a GPU; it returns its path.
func writeHeldSpec(t *testing.T, id, meta string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), id+".nomad.hcl")
	spec := fmt.Sprintf(`job %q {
  meta = {
    %s
  }
  constraint {
    attribute = "${meta.hetgpu.queue}"
    value     = "waiting-for-hetgpu"
  }
  group "g" {
    task "t" {
      driver = "hetgpu"
      resources {
        device "nvidia/gpu" { count = 1 }
      }
    }
  }
}`, id, meta)
	if err := os.WriteFile(path, []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestValidateReportsBadAnnotations(t *testing.T) {
	path := writeHeldSpec(t, "bad", `"hetgpu.enable"     = "true"
    "hetgpu.batch_size" = "sixty-four"`)
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"validate", path}, &out, &errb)
	if code != 1 || !strings.Contains(out.String(), `bad.nomad.hcl:4: error: group "g": hetgpu.batch_size = "sixty-four"`) ||
		!strings.Contains(out.String(), "expected an integer") {
		t.Errorf("validate = %d\nstdout %s\nstderr %s", code, out.String(), errb.String())
	}
	if code := run(context.Background(), []string{"validate"}, &out, &errb); code != 2 {
		t.Errorf("validate without files = %d, want 2", code)
	}
	if code := run(context.Background(), []string{"release"}, &out, &errb); code != 2 {
		t.Errorf("release without a job = %d, want 2", code)
	}
}

// Case variants and repeated hetgpu.* keys are errors naming the key: Nomad would ignore the
// first and keep only the last value of the second.
func TestValidateKeyCaseAndDuplicates(t *testing.T) {
	for _, tt := range []struct {
		name, meta string
		want       []string
	}{
		{"title case", `"hetgpu.enable" = "true"
    "Hetgpu.batch_size" = "64"`, []string{`meta key "Hetgpu.batch_size": hetgpu keys are lower case; write "hetgpu.batch_size"`}},
		{"upper case", `"hetgpu.enable" = "true"
    "HETGPU.BATCH_SIZE" = "64"`, []string{`meta key "HETGPU.BATCH_SIZE": hetgpu keys are lower case`}},
		{"duplicate", `"hetgpu.batch_size" = "64"
    "hetgpu.batch_size" = "128"`, []string{`hetgpu.batch_size is given twice in one meta (first at line 3)`}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			path := writeHeldSpec(t, "j", tt.meta)
			var out, errb bytes.Buffer
			code := run(context.Background(), []string{"validate", path}, &out, &errb)
			if code != 1 {
				t.Errorf("validate = %d, want 1\n%s%s", code, out.String(), errb.String())
			}
			for _, w := range tt.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, out.String())
				}
			}
		})
	}
}
