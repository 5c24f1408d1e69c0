package treecheck

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hetgpu/hetgpu/internal/doccheck"
)

// maxTracked is the largest file the repository may track.
const maxTracked = 2 << 20

// largeAllowed names the generated code and bundled data allowed above maxTracked, with why.
// Today no file needs it; an entry for a file that is gone or small again fails the test.
var largeAllowed = map[string]string{}

// executable magic numbers: ELF, Mach-O (32/64 bit, both byte orders, fat), PE/COFF.
var binaryMagic = []struct {
	magic []byte
	kind  string
}{
	{[]byte("\x7fELF"), "an ELF executable or library"},
	{[]byte{0xfe, 0xed, 0xfa, 0xce}, "a Mach-O binary"}, {[]byte{0xfe, 0xed, 0xfa, 0xcf}, "a Mach-O binary"},
	{[]byte{0xce, 0xfa, 0xed, 0xfe}, "a Mach-O binary"}, {[]byte{0xcf, 0xfa, 0xed, 0xfe}, "a Mach-O binary"},
	{[]byte{0xca, 0xfe, 0xba, 0xbe}, "a Mach-O universal binary"},
	{[]byte("MZ\x90\x00"), "a Windows PE executable"},
}

// TestNoTrackedBinaries: git tracks no executable binary and no file above 2 MB (outside
// largeAllowed); build outputs belong in .gitignore'd folders.
func TestNoTrackedBinaries(t *testing.T) {
	root := repoRoot(t)
	files := trackedFiles(t, root)
	if len(files) < 100 {
		t.Fatalf("git ls-files listed %d files; want the whole repository", len(files))
	}
	for _, err := range checkFiles(root, files) {
		t.Error(err)
	}
	for name := range largeAllowed {
		st, err := os.Stat(filepath.Join(root, name))
		if err != nil || st.Size() <= maxTracked {
			t.Errorf("largeAllowed names %s, which is missing or no longer above %d bytes: remove the entry", name, maxTracked)
		}
	}
}

// checkFiles returns one error per binary or oversized file among files (relative to root).
func checkFiles(root string, files []string) []error {
	var errs []error
	for _, f := range files {
		p := filepath.Join(root, f)
		st, err := os.Lstat(p)
		if err != nil || !st.Mode().IsRegular() {
			continue // deleted in the working tree, or a symlink
		}
		if st.Size() > maxTracked {
			if _, ok := largeAllowed[f]; !ok {
				errs = append(errs, fmt.Errorf("%s is tracked and %d bytes, above the %d-byte limit: keep it out of git or name it in largeAllowed with why", f, st.Size(), maxTracked))
			}
		}
		head := make([]byte, 4)
		fh, err := os.Open(p)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		n, _ := fh.Read(head)
		fh.Close()
		for _, m := range binaryMagic {
			if n >= len(m.magic) && bytes.Equal(head[:len(m.magic)], m.magic) {
				errs = append(errs, fmt.Errorf("%s is tracked and is %s: git rm --cached it and .gitignore where the build puts it", f, m.kind))
			}
		}
	}
	return errs
}

// TestCheckFilesFinds: the check reports an ELF file and a large file, and passes text.
func TestCheckFilesFinds(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, data []byte) {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write("hetgpu", append([]byte("\x7fELF\x02\x01\x01"), make([]byte, 100)...))
	write("big.json", bytes.Repeat([]byte("x"), maxTracked+1))
	write("ok.go", []byte("package ok\n"))
	errs := checkFiles(dir, []string{"hetgpu", "big.json", "ok.go"})
	if len(errs) != 2 || !strings.Contains(errs[0].Error(), "hetgpu is tracked and is an ELF") || !strings.Contains(errs[1].Error(), "big.json is tracked and 2097153 bytes") {
		t.Fatalf("errors %v; want the ELF file and the large file", errs)
	}
}

// TestBuildOutputsIgnored: where make build, make release and a plain go build put binaries
// is ignored by git.
func TestBuildOutputsIgnored(t *testing.T) {
	root := repoRoot(t)
	for _, p := range []string{"bin/hetgpu", "dist/hetgpu_0.1.0_linux_amd64.tar.gz", "dist/SHA256SUMS", "out/report/index.html",
		"hetgpu", "nomad-device-hetgpu", "nomad-driver-hetgpu", "hetgpu-toy-train", ".deps/src/highs_1.10.0+ds.orig.tar.xz",
		"sidecar/cmd/hetgpu/hetgpu.test", "cpu.prof"} {
		cmd := exec.Command("git", "check-ignore", "-q", "--no-index", p)
		cmd.Dir = root
		if err := cmd.Run(); err != nil {
			t.Errorf("%s is not ignored by git (git check-ignore: %v): add it to .gitignore", p, err)
		}
	}
	// And nothing tracked is ignored by accident (a pattern that matches a source folder).
	cmd := exec.Command("git", "ls-files", "--cached", "--ignored", "--exclude-standard")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	if s := strings.TrimSpace(string(out)); s != "" {
		t.Errorf(".gitignore matches tracked files:\n%s", s)
	}
}

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := doccheck.Root(".")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := exec.LookPath("git"); err != nil {
		t.Skipf("git is missing: %v", err)
	}
	if _, err := os.Stat(filepath.Join(root, ".git")); err != nil {
		t.Skipf("%s is not a git checkout (an unpacked source archive?): %v", root, err)
	}
	return root
}

func trackedFiles(t *testing.T, root string) []string {
	t.Helper()
	cmd := exec.Command("git", "ls-files", "-z")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	var files []string
	for _, f := range strings.Split(string(out), "\x00") {
		if f != "" {
			files = append(files, f)
		}
	}
	return files
}
