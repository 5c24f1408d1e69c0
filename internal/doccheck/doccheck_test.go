package doccheck

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// TestDocsLinksResolve: every relative link and anchor in README.md and docs/ resolves.
func TestDocsLinksResolve(t *testing.T) {
	root, pages, docs := LoadRepo(t, ".")
	links := 0
	for _, d := range docs {
		links += len(d.Links)
	}
	if len(pages) < 10 || links < 20 {
		t.Fatalf("read %d pages with %d links; want the README and the docs folder (>= 10 pages)", len(pages), links)
	}
	for _, err := range CheckLinks(root, docs) {
		t.Error(err)
	}
}

// TestCheckLinksFinds: broken files and anchors are reported, good ones are not.
func TestCheckLinksFinds(t *testing.T) {
	root := t.TempDir()
	write := func(p, s string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, p), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("README.md", "# Top\n\n## Install on `your` cluster!\n\n[a](docs/a.md#the-page) [b](docs/a.md#nope) [c](#install-on-your-cluster) [d](#gone) [e](docs/missing.md) [f](https://example.com/x#y) [g](docs/)\n")
	write("docs/a.md", "# The page\n\n[up](../README.md#top) ![img](pic.png)\n")
	docs, err := Load(root, []string{"README.md", "docs/a.md"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range CheckLinks(root, docs) {
		got = append(got, e.Error())
	}
	want := []string{
		`README.md:5: link "docs/a.md#nope": docs/a.md has no heading with the anchor #nope`,
		`README.md:5: link "#gone": README.md has no heading with the anchor #gone`,
		`README.md:5: link "docs/missing.md": docs/missing.md does not exist`,
		`docs/a.md:3: link "pic.png": docs/pic.png does not exist`,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("errors:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestCommands(t *testing.T) {
	src := "# T\n\nRun `hetgpu sim --seed 2` or `hetgpu-heuristic`.\n\n" +
		"```\nbin/hetgpu sim --cluster modern-mix \\\n  --trace bundled:default   # a comment\n" +
		"NOMAD_ADDR=http://n:4646 hetgpu sidecar -config 'my file.hcl' | tee log\n" +
		"hetgpu train eval [--json]\n             [--seeds 1,2]\n```\n\n" +
		"```hcl\ncommand = \"hetgpu sim --nope\"\n```\n\n" +
		"```\n$ hetgpu version\nhetgpu 0.1.0\n```\n"
	d := Parse("x.md", []byte(src))
	var got []string
	for _, c := range d.Commands {
		got = append(got, strings.Join(c.Args, " ")+"|"+map[bool]string{true: "synopsis", false: "run"}[c.Synopsis])
	}
	want := []string{"sim --seed 2|run", "sim --cluster modern-mix --trace bundled:default|run",
		"sidecar -config my file.hcl|run", "train eval [--json] [--seeds 1,2]|synopsis", "version|run"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("commands %q, want %q", got, want)
	}
	if d.Commands[1].Line != 6 {
		t.Errorf("second command on line %d, want 6", d.Commands[1].Line)
	}
}

func TestBlocksAndMarkers(t *testing.T) {
	src := "# T\n\n<!-- e2e:run -->\n```sh\necho one\n```\n\ntext\n\n```hcl\nx = 1\n```\n"
	d := Parse("x.md", []byte(src))
	if len(d.Blocks) != 2 || d.Blocks[0].Marker != "e2e:run" || d.Blocks[0].Text != "echo one\n" || d.Blocks[1].Marker != "" || d.Blocks[1].Info != "hcl" {
		t.Fatalf("blocks %+v", d.Blocks)
	}
}

func TestSlug(t *testing.T) {
	for in, want := range map[string]string{
		"Install on your Nomad cluster": "install-on-your-nomad-cluster",
		"`make run`":                    "make-run",
		"GPU sharing (slots)":           "gpu-sharing-slots",
		"Results: the prioritiser":      "results-the-prioritiser",
	} {
		if got := Slug(in); got != want {
			t.Errorf("Slug(%q) = %q, want %q", in, got, want)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add("# a\n\n[x](y#z) `hetgpu sim --a b`\n```\nhetgpu x \\\n --y\n```\n")
	f.Fuzz(func(t *testing.T, s string) {
		_ = Parse("f.md", []byte(s))
		_ = Split(s)
	})
}
