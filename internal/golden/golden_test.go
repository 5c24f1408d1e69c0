package golden

import (
	"os"
	"path/filepath"
	"testing"
)

// fakeT records failures instead of failing the real test.
type fakeT struct {
	testing.TB
	errors, fatals, skips int
}

func (f *fakeT) Helper()               {}
func (f *fakeT) Errorf(string, ...any) { f.errors++ }
func (f *fakeT) Fatalf(string, ...any) { f.fatals++ }
func (f *fakeT) Fatal(...any)          { f.fatals++ }
func (f *fakeT) Skipf(string, ...any)  { f.skips++ }

func TestCompare(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sub", "out.txt")
	for _, tc := range []struct {
		name      string
		got       string
		update    bool
		wantOK    bool
		wantError int
	}{
		{"update writes the file", "a\nb\n", true, true, 0},
		{"same bytes match", "a\nb\n", false, true, 0},
		{"a changed line fails", "a\nc\n", false, false, 1},
		{"a shorter output fails", "a\n", false, false, 1},
		{"update accepts the change", "a\nc\n", true, true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeT{TB: t}
			if ok := Compare(f, path, []byte(tc.got), tc.update); ok != tc.wantOK || f.errors != tc.wantError || f.fatals != 0 {
				t.Fatalf("Compare = %v with %d errors, %d fatals; want %v, %d, 0", ok, f.errors, f.fatals, tc.wantOK, tc.wantError)
			}
			if b, err := os.ReadFile(path); err != nil || (tc.update && string(b) != tc.got) {
				t.Fatalf("golden file = %q, %v", b, err)
			}
		})
	}
	f := &fakeT{TB: t}
	Compare(f, filepath.Join(dir, "missing.txt"), nil, false)
	if f.fatals != 1 {
		t.Errorf("a missing golden file: %d fatals, want 1", f.fatals)
	}
}

func TestFirstDiff(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		line int
		x, y string
	}{
		{"a\nb\nc", "a\nx\nc", 2, "b", "x"},
		{"a\nb", "a\nb\nc", 3, "", "c"},
		{"", "a", 1, "", "a"},
	} {
		if line, x, y := firstDiff([]byte(tc.a), []byte(tc.b)); line != tc.line || x != tc.x || y != tc.y {
			t.Errorf("firstDiff(%q, %q) = %d %q %q, want %d %q %q", tc.a, tc.b, line, x, y, tc.line, tc.x, tc.y)
		}
	}
}

// Only amd64 runs the bit-exact tests.
func TestSkipUnlessArch(t *testing.T) {
	for arch, skips := range map[string]int{"amd64": 0, "arm64": 1, "ppc64le": 1} {
		f := &fakeT{}
		skipUnlessArch(f, arch, "the digest")
		if f.skips != skips {
			t.Errorf("%s: %d skips, want %d", arch, f.skips, skips)
		}
	}
}
