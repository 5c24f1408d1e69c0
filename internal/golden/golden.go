// Package golden compares a test's output with a golden file, or rewrites the file when the
// test runs with its package's -update flag. Each test package keeps its own flag: a flag
// defined here would clash with theirs in every test binary that imports this package.
package golden

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// SkipUnlessAMD64 skips the test on any architecture but amd64, on which what (bit-exact
// floating-point output) was recorded: Go fuses multiply-adds on some others (arm64, ppc64le,
// s390x), which changes the last bits.
func SkipUnlessAMD64(t testing.TB, what string) {
	t.Helper()
	skipUnlessArch(t, runtime.GOARCH, what)
}

func skipUnlessArch(t testing.TB, arch, what string) {
	t.Helper()
	if arch != "amd64" {
		t.Skipf("%s was recorded on amd64; %s may fuse multiply-adds", what, arch)
	}
}

// Compare fails the test (without stopping it) when got differs from the file at path, naming
// the first line that differs. With update it first writes got there, creating the folder.
// It reports whether they matched.
func Compare(t testing.TB, path string, got []byte, update bool) bool {
	t.Helper()
	if update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (rerun the test with -update to create it)", err)
	}
	if bytes.Equal(got, want) {
		return true
	}
	line, g, w := firstDiff(got, want)
	t.Errorf("output differs from %s (%d bytes, want %d); line %d is %q, want %q; if intended, rerun the test with -update and review the diff",
		path, len(got), len(want), line, g, w)
	return false
}

// firstDiff is the first line (from 1) on which a and b differ, and that line of each ("" past
// the end).
func firstDiff(a, b []byte) (int, string, string) {
	al, bl := bytes.Split(a, []byte("\n")), bytes.Split(b, []byte("\n"))
	for i := 0; ; i++ {
		var x, y []byte
		if i < len(al) {
			x = al[i]
		}
		if i < len(bl) {
			y = bl[i]
		}
		if !bytes.Equal(x, y) || i >= len(al) || i >= len(bl) {
			return i + 1, string(x), string(y)
		}
	}
}
