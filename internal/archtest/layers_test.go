package archtest

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// layers are the module's scheduler folders from the bottom up (docs/architecture.md,
// "Folders"): a package imports only packages of its own layer or a lower one, so no import
// runs back up, and every package of these trees belongs to exactly one layer.
var layers = []struct {
	name  string
	paths []string
}{
	{"model", []string{"model/..."}},
	{"framework", []string{"sidecar/sched"}},
	{"stages", []string{"sidecar/stages/..."}},
	{"backends", []string{"sidecar/backends/..."}},
	{"policies", []string{"sidecar/policies/..."}},
	{"learning", []string{"sidecar/learning/..."}},
	{"runtime", []string{"sidecar/runtime/..."}},
	{"research", []string{"sidecar/research/..."}},
	{"commands", []string{"sidecar/cmd/..."}},
}

// maxSidecarFolders is how many folders may stand directly under sidecar/: one a layer.
const maxSidecarFolders = 8

// layerOf is a package's layer index, -1 when it is in none.
func layerOf(pkg string) int {
	for i, l := range layers {
		if matchAny(pkg, l.paths) {
			return i
		}
	}
	return -1
}

// upward lists the imports that run from a lower layer to a higher one, and the packages of
// sidecar/ or model/ that no layer holds.
func upward(pkgs map[string][]string) []string {
	var out []string
	for from, imps := range pkgs {
		lf := layerOf(from)
		if lf < 0 {
			if strings.HasPrefix(from, "sidecar/") || strings.HasPrefix(from, "model/") {
				out = append(out, from+" is in no layer")
			}
			continue
		}
		for _, imp := range imps {
			if li := layerOf(imp); li > lf {
				out = append(out, from+" ("+layers[lf].name+") -> "+imp+" ("+layers[li].name+")")
			}
		}
	}
	sort.Strings(out)
	return out
}

func TestNoImportRunsUp(t *testing.T) {
	pkgs := imports(t)
	if len(pkgs["sidecar/sched"]) == 0 {
		t.Fatalf("go list found no imports for sidecar/sched: %d packages", len(pkgs))
	}
	for _, v := range upward(pkgs) {
		t.Errorf("%s (docs/architecture.md, Folders)", v)
	}
}

func TestUpwardFindsWhatRunsUp(t *testing.T) {
	got := upward(map[string][]string{
		"sidecar/stages/place":     {"sidecar/sched", "model/cluster", "sidecar/stages/place"},
		"sidecar/runtime/app":      {"sidecar/research/rltrain", "sidecar/learning/ppo"},
		"sidecar/sched":            {"sidecar/stages/rank"},
		"sidecar/research/rltrain": {"sidecar/runtime/app", "sidecar/policies"},
		"sidecar/newthing":         {"model/cluster"},
	})
	want := []string{
		"sidecar/newthing is in no layer",
		"sidecar/runtime/app (runtime) -> sidecar/research/rltrain (research)",
		"sidecar/sched (framework) -> sidecar/stages/rank (stages)",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("upward = %q, want %q", got, want)
	}
}

// The folders under sidecar/ are the layers: a new one must be one of them or replace one.
func TestSidecarFolders(t *testing.T) {
	entries, err := os.ReadDir(filepath.Join("..", "..", "sidecar"))
	if err != nil {
		t.Fatal(err)
	}
	var dirs []string
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		dirs = append(dirs, e.Name())
		if layerOf("sidecar/"+e.Name()) < 0 && layerOf("sidecar/"+e.Name()+"/x") < 0 {
			t.Errorf("sidecar/%s is no layer of the layers list", e.Name())
		}
	}
	if len(dirs) > maxSidecarFolders {
		t.Errorf("%d folders under sidecar/ (%s), want at most %d", len(dirs), strings.Join(dirs, ", "), maxSidecarFolders)
	}
}
