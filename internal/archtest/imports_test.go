package archtest

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

const module = "github.com/hetgpu/hetgpu"

// A pattern is a module-relative package path ("sidecar/sched"), a subtree ("sidecar/...") or,
// for other modules, a full import path (with or without "/...").
type rule struct {
	from   []string
	forbid []string
	// allow are exceptions to forbid, by design (not the TODOs below).
	allow []string
	why   string
}

var (
	model     = []string{"model/..."}
	framework = []string{"sidecar/sched"}
	stages    = []string{"sidecar/stages/..."}
	backends  = []string{"sidecar/backends/..."}
	// runtime is what the live sidecar runs; offline is simulation, training and evaluation.
	runtime = join([]string{"sidecar/sched", "sidecar/runtime/service/...", "sidecar/runtime/server", "sidecar/runtime/store",
		"sidecar/runtime/dashboard", "sidecar/runtime/ha", "sidecar/runtime/explainlink", "sidecar/backends/nomad/..."}, model, stages)
	offline = []string{"sidecar/backends/sim/...", "sidecar/policies/...", "sidecar/learning/...", "sidecar/research/..."}
)

func join(groups ...[]string) []string {
	var out []string
	for _, g := range groups {
		out = append(out, g...)
	}
	return out
}

// rules are what may import what (docs/architecture.md, "Imports").
var rules = []rule{
	{from: []string{"device/...", "driver/..."}, forbid: []string{"sidecar/..."},
		why: "node-side binaries share model packages with the sidecar and import nothing of it"},
	{from: []string{"sidecar/..."}, forbid: []string{"device/...", "driver/..."},
		why: "the sidecar reaches the plugins only through Nomad"},
	{from: []string{"plugin/..."}, forbid: []string{"device/...", "driver/...", "sidecar/..."},
		why: "the plugin protocol sits below every component"},
	{from: []string{"internal/..."}, forbid: []string{"device/...", "driver/...", "sidecar/...", "plugin/..."},
		why: "internal helpers know no component"},
	{from: model, forbid: []string{"sidecar/...", "device/...", "driver/..."},
		why: "model packages describe jobs, GPUs and traces and import no component"},
	{from: framework, forbid: []string{"sidecar/..."}, allow: model,
		why: "the pipeline knows its stages and backends only through its interfaces"},
	{from: stages, forbid: []string{"sidecar/..."}, allow: join(model, framework),
		why: "a stage works on a snapshot from any backend and knows no other stage (model/constraint is the shared feasibility layer)"},
	{from: backends, forbid: []string{"sidecar/..."}, allow: join(model, framework, backends),
		why: "a backend implements cluster.Cluster and knows no stage, service or policy (its own subpackages and nomadtest, the fake agent, it may)"},
	{from: runtime, forbid: offline,
		why: "the live sidecar does not link simulation, training or evaluation"},
	{from: without(runtime, "sidecar/runtime/dashboard"), forbid: []string{"gonum.org/v1/plot/..."},
		why: "plots are offline (reports, training curves); only the dashboard draws at run time"},
	{from: []string{"..."}, forbid: []string{"github.com/hashicorp/nomad/..."}, allow: []string{"github.com/hashicorp/nomad/api/..."},
		why: "of Nomad's code only the api module is a dependency"},
}

// todo are today's violations, each to be removed when fixed (issue 16). An entry that no longer
// occurs fails the test too, so this list only shrinks.
var todo = map[string]string{}

func without(list []string, drop string) []string {
	var out []string
	for _, p := range list {
		if p != drop {
			out = append(out, p)
		}
	}
	return out
}

// match reports whether an import path (module-relative for our packages) fits a pattern.
func match(path, pattern string) bool {
	if pattern == "..." {
		return true
	}
	if tree, ok := strings.CutSuffix(pattern, "/..."); ok {
		return path == tree || strings.HasPrefix(path, tree+"/")
	}
	return path == pattern
}

func matchAny(path string, patterns []string) bool {
	for _, p := range patterns {
		if match(path, p) {
			return true
		}
	}
	return false
}

// imports lists every package of the module with its direct non-test imports, module-relative.
func imports(t *testing.T) map[string][]string {
	t.Helper()
	gomod, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	cmd := exec.Command("go", "list", "-e", "-json=ImportPath,Imports", "./...")
	cmd.Dir = filepath.Dir(strings.TrimSpace(string(gomod)))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	rel := func(p string) string {
		if p == module {
			return "."
		}
		return strings.TrimPrefix(p, module+"/")
	}
	pkgs := map[string][]string{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p struct {
			ImportPath string
			Imports    []string
		}
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("go list output: %v", err)
		}
		for _, imp := range p.Imports {
			pkgs[rel(p.ImportPath)] = append(pkgs[rel(p.ImportPath)], rel(imp))
		}
		if _, ok := pkgs[rel(p.ImportPath)]; !ok {
			pkgs[rel(p.ImportPath)] = nil
		}
	}
	return pkgs
}

// violations checks the rules against an import graph: the edges they forbid, each with why.
func violations(pkgs map[string][]string) map[string]string {
	out := map[string]string{}
	for from, imps := range pkgs {
		for _, r := range rules {
			if !matchAny(from, r.from) {
				continue
			}
			for _, imp := range imps {
				if imp != from && matchAny(imp, r.forbid) && !matchAny(imp, r.allow) {
					out[from+" -> "+imp] = r.why
				}
			}
		}
	}
	return out
}

func TestImportRules(t *testing.T) {
	pkgs := imports(t)
	if len(pkgs["sidecar/sched"]) == 0 || len(pkgs["driver"]) == 0 {
		t.Fatalf("go list found no imports for sidecar/sched or driver: %d packages", len(pkgs))
	}
	got := violations(pkgs)
	var keys []string
	for k := range got {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if _, known := todo[k]; !known {
			t.Errorf("new import %s: %s (docs/architecture.md)", k, got[k])
		}
	}
	for k := range todo {
		if _, ok := got[k]; !ok {
			t.Errorf("import %s is gone or allowed now: remove it from the todo list", k)
		}
	}
}

// The checker finds a forbidden edge, honours allow, and lets through what no rule covers.
func TestViolations(t *testing.T) {
	got := violations(map[string][]string{
		"sidecar/stages/rank":  {"sidecar/stages/place", "sidecar/sched"},
		"device/fake":          {"sidecar/gpuspec", "device/arch"},
		"sidecar/stages/place": {"sidecar/sched", "sidecar/backends/nomad", "model/constraint"},
		"sidecar/backends/sim": {"sidecar/sched", "github.com/hashicorp/nomad/nomad/structs", "github.com/hashicorp/nomad/api"},
		"sidecar/runtime/app":  {"sidecar/backends/sim", "sidecar/backends/nomad"},
	})
	want := []string{
		"device/fake -> sidecar/gpuspec",
		"sidecar/backends/sim -> github.com/hashicorp/nomad/nomad/structs",
		"sidecar/stages/place -> sidecar/backends/nomad",
		"sidecar/stages/rank -> sidecar/stages/place",
	}
	var keys []string
	for k := range got {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if strings.Join(keys, "\n") != strings.Join(want, "\n") {
		t.Fatalf("violations %q, want %q", keys, want)
	}
}
