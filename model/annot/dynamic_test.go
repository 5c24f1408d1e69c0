package annot

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// dynamicSpec writes its groups with dynamic blocks (testdata/dynamic.nomad.hcl says how).
func dynamicSpec(t testing.TB) []byte {
	src, err := os.ReadFile("testdata/dynamic.nomad.hcl")
	if err != nil {
		t.Fatal(err)
	}
	return src
}

func TestParseJobspecDynamicBlocks(t *testing.T) {
	js, err := ParseJobspec("dyn.nomad.hcl", dynamicSpec(t))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]SpecGroup{}
	for _, g := range js.Groups {
		got[g.Name] = g
	}
	if len(js.Groups) != 3 || len(got) != 3 {
		t.Fatalf("groups = %+v, want lm, resnet18 (from the dynamic block) and static", js.Groups)
	}
	for name, batch := range map[string]string{"resnet18": "16", "lm": "20"} {
		g, ok := got[name]
		if !ok {
			t.Fatalf("group %q missing: %+v", name, js.Groups)
		}
		if v := g.Meta[KeyBatchSize]; v.Text != batch || !v.Exact {
			t.Errorf("group %q batch size = %+v, want exact %s (from the iterator's value)", name, v, batch)
		}
		if v := g.Meta[KeyModel]; v.Text != "model/"+name || !v.Exact {
			t.Errorf("group %q model = %+v, want exact model/%s (format of the iterator's key)", name, v, name)
		}
		if v := g.Meta["owner"]; v.Text != "ML" || !v.Exact {
			t.Errorf("group %q owner = %+v, want exact ML (upper)", name, v)
		}
		if len(g.Tasks) != 1 || len(g.Tasks[0].Devices) != 1 {
			t.Fatalf("group %q tasks = %+v", name, g.Tasks)
		}
		d := g.Tasks[0].Devices[0]
		if d.Count != 2 || len(d.Constraints) != 1 || d.Constraints[0].RTarget != "16 GiB" ||
			d.Constraints[0].LTarget != "${device.attr.memory}" || d.Constraints[0].Operand != ">=" {
			t.Errorf("group %q device = %+v, want 2 GPUs with the constraint from the nested dynamic block", name, d)
		}
	}
	// The iterators are gone after their blocks: a later value naming one is not exact.
	if len(got["static"].Tasks) != 1 {
		t.Errorf("static group = %+v", got["static"])
	}
	// Check sees the groups Nomad would register: the job-level hold covers both GPU groups.
	for _, f := range Check(js) {
		if f.Severity == "error" {
			t.Errorf("unexpected finding: %s", f)
		}
	}
}

// TestParseJobspecFunctions: Nomad's functions evaluate (cty's standard library, go-cty-funcs'
// encoding, cidr, crypto and uuid, YAML); a file function in a jobspec given as bytes (no
// directory to read from) leaves the value inexact, as a variable without a default does.
func TestParseJobspecFunctions(t *testing.T) {
	js, err := ParseJobspec("f.nomad.hcl", []byte(`
locals {
  sizes = [for s in range(1, 3) : s * 16]
}
job "f" {
  meta = {
    "hetgpu.batch_size" = join("", [for s in slice(local.sizes, 1, 2) : format("%d", s)])
    "hetgpu.model"      = trimspace(title(" resnet "))
    "hetgpu.runtime"    = file("runtime.txt")
    "hetgpu.queue"      = yamldecode(base64decode(base64encode("name: team-a"))).name
    "hetgpu.job_type"   = format("%s-%s", cidrhost("10.1.0.0/16", 5), substr(sha256("x"), 0, 8))
    "hetgpu.workload"   = uuidv5("dns", "example.com")
  }
}`))
	if err != nil {
		t.Fatal(err)
	}
	wantMeta(t, js, []metaWant{
		{KeyBatchSize, "32", true},
		{KeyModel, "Resnet", true},
		{KeyRuntime, `file("runtime.txt")`, false},
		{"hetgpu.queue", "team-a", true},
		{"hetgpu.job_type", "10.1.0.5-2d711642", true},
		{"hetgpu.workload", "cfbff0d1-9375-5685-968c-48ce8b15ae17", true},
	})
}

func TestParseJobspecDynamicErrors(t *testing.T) {
	wrap := func(dyn string) string {
		return "variable \"nodefault\" {}\njob \"j\" {\n" + dyn + "\n}\n"
	}
	for _, tc := range []struct {
		name, spec string
		want       []string
	}{
		{"no for_each", wrap(`dynamic "group" {
  labels = ["a"]
  content {}
}`), []string{`dynamic "group"`, "expected a for_each attribute"}},
		{"for_each not evaluable", wrap(`dynamic "group" {
  for_each = var.nodefault
  labels   = [group.key]
  content {}
}`), []string{`dynamic "group"`, "for_each = var.nodefault", "variables' defaults and locals"}},
		{"no content", wrap(`dynamic "group" {
  for_each = ["a"]
  labels   = [group.value]
}`), []string{`dynamic "group"`, "expected a content block"}},
		{"iterator not a name", wrap(`dynamic "group" {
  for_each = ["a"]
  iterator = "g"
  labels   = [group.value]
  content {}
}`), []string{`iterator = "g"`, "expected a bare name"}},
		{"labels not strings", wrap(`dynamic "group" {
  for_each = ["a"]
  labels   = [[group.value]]
  content {}
}`), []string{"labels = [[group.value]]", "expected a list of strings"}},
		{"bad count inside", wrap(`dynamic "group" {
  for_each = ["a"]
  labels   = [group.value]
  content {
    count = "two"
  }
}`), []string{`group "a" count = "two"`, "non-negative integer"}},
		{"function fails on its argument", wrap(`meta = { "hetgpu.model" = cidrhost("not-a-cidr", 1) }`),
			[]string{`cidrhost("not-a-cidr", 1)`, `Call to function "cidrhost" failed`, "Nomad refuses the jobspec too"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseJobspec("bad.nomad.hcl", []byte(tc.spec))
			if err == nil {
				t.Fatalf("no error for\n%s", tc.spec)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

// TestParseJobspecShorthands: an operator named as an attribute sets the operand as Nomad's
// parser does; the hold written with the default operator stays the hold.
func TestParseJobspecShorthands(t *testing.T) {
	js, err := ReadJobspec("testdata/shorthand.nomad.hcl")
	if err != nil {
		t.Fatal(err)
	}
	type c struct{ l, op, r string }
	get := func(cs []SpecConstraint) []c {
		var out []c
		for _, x := range cs {
			out = append(out, c{x.LTarget, x.Operand, x.RTarget})
		}
		return out
	}
	g := js.Groups[0]
	d := g.Tasks[0].Devices[0]
	for _, tc := range []struct {
		what      string
		got, want []c
	}{
		{"job", get(js.Constraints), []c{{HoldAttribute, "=", HoldValue}, {"${attr.kernel.version}", "version", ">= 5.10"}, {"${meta.rack}", "distinct_property", ""}}},
		{"group", get(g.Constraints), []c{{"", "distinct_hosts", "true"}, {"${attr.unique.hostname}", "regexp", "^gpu-"}}},
		{"task", get(g.Tasks[0].Constraints), []c{{"${attr.os.name}", "semver", ">= 1.0.0"}}},
		{"device", get(d.Constraints), []c{{"${device.attr.features}", "set_contains", "nvlink"}}},
		{"affinity", get(d.Affinities), []c{{"${device.model}", "set_contains_any", "NVIDIA A100-SXM4-40GB,NVIDIA H100"}, {"${device.attr.memory}", ">=", "40 GiB"}}},
	} {
		if fmt.Sprint(tc.got) != fmt.Sprint(tc.want) {
			t.Errorf("%s constraints = %v, want %v", tc.what, tc.got, tc.want)
		}
	}
	if d.Affinities[0].Weight != 50 || d.Affinities[1].Weight != -20 {
		t.Errorf("affinity weights = %d, %d", d.Affinities[0].Weight, d.Affinities[1].Weight)
	}
	for _, f := range Check(js) {
		if f.Severity == "error" {
			t.Errorf("unexpected finding: %s", f)
		}
	}
}

// TestReadJobspecFileFunctions: read from a file, the jobspec's file functions read from the
// working directory, as nomad job run does (not from the jobspec's directory); a file that is
// not there is an error naming it, as it is for Nomad.
func TestReadJobspecFileFunctions(t *testing.T) {
	dir, elsewhere := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "runtime.txt"), []byte("2h30m\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The jobspec's own directory has another runtime.txt, which must not be read.
	if err := os.WriteFile(filepath.Join(elsewhere, "runtime.txt"), []byte("9h\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	path := filepath.Join(elsewhere, "f.nomad.hcl")
	spec := `job "f" {
  meta = {
    "hetgpu.runtime" = trimspace(file("runtime.txt"))
    "hetgpu.model"   = fileexists("model.txt") ? file("model.txt") : basename("/models/bert")
  }
}`
	if err := os.WriteFile(path, []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	js, err := ReadJobspec(path)
	if err != nil {
		t.Fatal(err)
	}
	wantMeta(t, js, []metaWant{
		{KeyRuntime, "2h30m", true},
		{KeyModel, "bert", true},
	})
	missing := filepath.Join(elsewhere, "missing.nomad.hcl")
	if err := os.WriteFile(missing, []byte(`job "m" {
  meta = { "hetgpu.queue" = file("missing.txt") }
}`), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = ReadJobspec(missing)
	for _, want := range []string{`file("missing.txt")`, "no file exists at missing.txt", "Nomad refuses the jobspec too"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("missing file: err = %v, want one containing %q", err, want)
		}
	}
}

// metaWant is a job meta value a parse should give: its text and whether validate evaluated it.
type metaWant struct {
	key, want string
	exact     bool
}

func wantMeta(t *testing.T, js *Jobspec, wants []metaWant) {
	t.Helper()
	for _, w := range wants {
		if v := js.Meta[w.key]; v.Text != w.want || v.Exact != w.exact {
			t.Errorf("%s = %+v, want %q exact %v", w.key, v, w.want, w.exact)
		}
	}
}
