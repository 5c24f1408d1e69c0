package e2e

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/hashicorp/nomad/api"

	"github.com/hetgpu/hetgpu/model/annot"
)

// TestJobspecParsedAsNomad checks that `hetgpu validate` reads every example jobspec (and the
// parser's own testdata: locals, dynamic blocks, functions) as Nomad's own parser does: the same groups,
// counts, meta, constraints, drivers and device requests. Nomad parses with `job run -output`,
// which needs no agent.
func TestJobspecParsedAsNomad(t *testing.T) {
	nomadBin := nomadBinary(t, "the jobspec parser comparison")
	if strings.ContainsRune(nomadBin, filepath.Separator) {
		// The subtests change directory; a relative NOMAD_BIN must still be found.
		abs, err := filepath.Abs(nomadBin)
		if err != nil {
			t.Fatal(err)
		}
		nomadBin = abs
	}
	files, err := filepath.Glob("../jobspecs/*.nomad.hcl")
	if err != nil || len(files) < 6 {
		t.Fatalf("jobspecs: %v (%d)", err, len(files))
	}
	more, _ := filepath.Glob("../model/annot/testdata/*.nomad.hcl")
	if len(more) == 0 {
		t.Fatal("no testdata jobspecs under model/annot/testdata")
	}
	for _, f := range append(files, more...) {
		t.Run(filepath.Base(f), func(t *testing.T) {
			// Both parsers read file("x") from the working directory: the jobspec's own, so
			// that a testdata jobspec finds the files beside it.
			abs, err := filepath.Abs(f)
			if err != nil {
				t.Fatal(err)
			}
			t.Chdir(filepath.Dir(abs))
			f = filepath.Base(abs)
			out, err := exec.Command(nomadBin, "job", "run", "-output", f).Output()
			if err != nil {
				t.Fatalf("nomad job run -output %s: %v", f, err)
			}
			var reg struct{ Job *api.Job }
			if err := json.Unmarshal(out, &reg); err != nil || reg.Job == nil {
				t.Fatalf("decode Nomad's output: %v", err)
			}
			js, err := annot.ReadJobspec(f)
			if err != nil {
				t.Fatalf("hetgpu's parser: %v", err)
			}
			want, got := fromNomad(reg.Job), fromValidate(js)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("hetgpu validate reads\n%s\nNomad reads\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
			t.Logf("%d lines agree", len(want))
		})
	}
}

// The two parsers' results as sorted lines, one per fact hetgpu reads.
func fromNomad(j *api.Job) []string {
	var out []string
	add := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	ns := ""
	if j.Namespace != nil {
		ns = *j.Namespace
	}
	add("job %s namespace %q type %q", deref(j.ID), ns, deref(j.Type))
	for k, v := range j.Meta {
		add("job meta %s = %q", k, v)
	}
	for _, c := range j.Constraints {
		add("job constraint %s", constraintLine(c.LTarget, c.Operand, c.RTarget, 0))
	}
	for _, g := range j.TaskGroups {
		n := 1
		if g.Count != nil {
			n = *g.Count
		}
		add("group %s count %d", deref(g.Name), n)
		for k, v := range g.Meta {
			add("group %s meta %s = %q", deref(g.Name), k, v)
		}
		for _, c := range g.Constraints {
			add("group %s constraint %s", deref(g.Name), constraintLine(c.LTarget, c.Operand, c.RTarget, 0))
		}
		for _, tk := range g.Tasks {
			at := fmt.Sprintf("group %s task %s", deref(g.Name), tk.Name)
			add("%s driver %q", at, tk.Driver)
			for _, c := range tk.Constraints {
				add("%s constraint %s", at, constraintLine(c.LTarget, c.Operand, c.RTarget, 0))
			}
			if tk.Resources == nil {
				continue
			}
			for _, d := range tk.Resources.Devices {
				n := 1
				if d.Count != nil {
					n = int(*d.Count)
				}
				add("%s device %s count %d", at, d.Name, n)
				for _, c := range d.Constraints {
					add("%s device %s constraint %s", at, d.Name, constraintLine(c.LTarget, c.Operand, c.RTarget, 0))
				}
				for _, a := range d.Affinities {
					w := 0
					if a.Weight != nil {
						w = int(*a.Weight)
					}
					add("%s device %s affinity %s", at, d.Name, constraintLine(a.LTarget, a.Operand, a.RTarget, w))
				}
			}
		}
	}
	sort.Strings(out)
	return out
}

func fromValidate(js *annot.Jobspec) []string {
	var out []string
	add := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	add("job %s namespace %q type %q", js.ID, js.Namespace, js.Type)
	for k, v := range js.Meta {
		add("job meta %s = %q", k, v.Text)
	}
	for _, c := range js.Constraints {
		add("job constraint %s", constraintLine(c.LTarget, c.Operand, c.RTarget, 0))
	}
	for _, g := range js.Groups {
		add("group %s count %d", g.Name, g.Count)
		for k, v := range g.Meta {
			add("group %s meta %s = %q", g.Name, k, v.Text)
		}
		for _, c := range g.Constraints {
			add("group %s constraint %s", g.Name, constraintLine(c.LTarget, c.Operand, c.RTarget, 0))
		}
		for _, tk := range g.Tasks {
			at := fmt.Sprintf("group %s task %s", g.Name, tk.Name)
			add("%s driver %q", at, tk.Driver)
			for _, c := range tk.Constraints {
				add("%s constraint %s", at, constraintLine(c.LTarget, c.Operand, c.RTarget, 0))
			}
			for _, d := range tk.Devices {
				add("%s device %s count %d", at, d.Name, d.Count)
				for _, c := range d.Constraints {
					add("%s device %s constraint %s", at, d.Name, constraintLine(c.LTarget, c.Operand, c.RTarget, 0))
				}
				for _, a := range d.Affinities {
					add("%s device %s affinity %s", at, d.Name, constraintLine(a.LTarget, a.Operand, a.RTarget, a.Weight))
				}
			}
		}
	}
	sort.Strings(out)
	return out
}

// constraintLine writes a constraint; an operand left out is Nomad's default, "=".
func constraintLine(l, op, r string, weight int) string {
	if op == "" {
		op = "="
	}
	return fmt.Sprintf("%q %s %q weight %d", l, op, r, weight)
}
