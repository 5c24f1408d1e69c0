package treecheck

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// fakeHighs is a stand-in for the HiGHS source tarball: a CMake project that installs a tiny
// libhighs and a highs.pc the way HiGHS does, so scripts/deps-highs.sh runs every step it runs
// on the real source (cache, unpack, configure, build, install, pkg-config) in seconds.
const fakeHighs = `cmake_minimum_required(VERSION 3.10)
project(highs C)
file(WRITE ${CMAKE_BINARY_DIR}/fake.c "int Highs_fake(void) { return 1; }\n")
add_library(highs ${CMAKE_BINARY_DIR}/fake.c)
install(TARGETS highs DESTINATION lib)
file(WRITE ${CMAKE_BINARY_DIR}/highs.pc "prefix=${CMAKE_INSTALL_PREFIX}\nlibdir=\${prefix}/lib\nincludedir=\${prefix}/include/highs\n\nName: HiGHS\nDescription: fake\nVersion: 1.10.0\nLibs: -L\${libdir} -lhighs\nCflags: -I\${includedir}\n")
install(FILES ${CMAKE_BINARY_DIR}/highs.pc DESTINATION lib/pkgconfig)
`

// TestDepsWriteOnlyIntoTheCheckout runs scripts/deps-highs.sh for two checkouts with a fresh
// HOME and TMPDIR: everything it writes is inside the checkout's .deps (nothing in HOME,
// nothing left in TMPDIR, no file in pkg-config's default folders pointing into a checkout),
// pkg-config's default path
// finds neither checkout, and removing one checkout leaves what the other builds against
// unchanged.
func TestDepsWriteOnlyIntoTheCheckout(t *testing.T) {
	root := repoRoot(t)
	for _, tool := range []string{"bash", "cmake", "cc", "g++", "pkg-config", "tar", "xz", "sha256sum"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("make deps needs %s: %v", tool, err)
		}
	}
	tmp := t.TempDir()
	home, tmpdir := filepath.Join(tmp, "home"), filepath.Join(tmp, "tmp")
	for _, d := range []string{home, tmpdir} {
		must(t, os.MkdirAll(d, 0o755))
	}
	tarball := fakeTarball(t, tmp)
	defaults := pkgConfigDefaults(t)

	deps := func(checkout string) string {
		t.Helper()
		prefix := filepath.Join(checkout, ".deps", "highs")
		src := filepath.Join(checkout, ".deps", "src")
		must(t, os.MkdirAll(src, 0o755))
		data, err := os.ReadFile(tarball)
		must(t, err)
		must(t, os.WriteFile(filepath.Join(src, "highs_1.10.0+ds.orig.tar.xz"), data, 0o644))
		out, err := exec.Command("sha256sum", tarball).Output()
		must(t, err)
		must(t, os.WriteFile(filepath.Join(src, "highs_1.10.0+ds.orig.tar.xz.sha256"), []byte(strings.Fields(string(out))[0]+"\n"), 0o644))
		cmd := exec.Command("bash", filepath.Join(root, "scripts", "deps-highs.sh"), prefix)
		cmd.Env = append(cleanEnv(), "HOME="+home, "TMPDIR="+tmpdir)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("deps-highs.sh %s: %v\n%s", prefix, err, out)
		}
		return prefix
	}
	a, b := filepath.Join(tmp, "a"), filepath.Join(tmp, "b")
	pa := deps(a)
	pb := deps(b)
	for _, p := range []string{pa, pb} {
		if _, err := os.Stat(filepath.Join(p, "lib", "pkgconfig", "highs.pc")); err != nil {
			t.Fatalf("deps-highs.sh installed no highs.pc into %s: %v", p, err)
		}
	}
	// Nothing outside the checkouts: HOME and TMPDIR are empty, the default folders unchanged.
	for _, d := range []string{home, tmpdir} {
		if left := listFiles(t, d); len(left) > 0 {
			t.Errorf("deps-highs.sh left files in %s: %v", d, left)
		}
	}
	for _, f := range mentioning(t, defaults, tmp) {
		t.Errorf("%s, in pkg-config's default folders, points into a checkout (%s): make deps must write only into the checkout", f, tmp)
	}
	// pkg-config without PKG_CONFIG_PATH does not find either checkout's HiGHS.
	if out, err := pkgConfig("", "--variable=libdir", "highs"); err == nil && strings.HasPrefix(strings.TrimSpace(out), tmp) {
		t.Errorf("pkg-config's default path finds HiGHS at %s, inside a checkout", out)
	}
	// What b builds against does not change when a is removed, and never names a.
	flags := func() string {
		out, err := pkgConfig(filepath.Join(pb, "lib", "pkgconfig"), "--cflags", "--libs", "highs")
		if err != nil {
			t.Fatalf("pkg-config for checkout b: %v %s", err, out)
		}
		return out
	}
	before2 := flags()
	must(t, os.RemoveAll(a))
	if after := flags(); after != before2 || strings.Contains(after, a+"/") || !strings.Contains(after, pb) {
		t.Errorf("checkout b's build flags %q became %q after removing checkout a; want them unchanged, naming b only", before2, after)
	}
}

func fakeTarball(t *testing.T, tmp string) string {
	t.Helper()
	dir := filepath.Join(tmp, "fake-src", "highs-1.10.0")
	must(t, os.MkdirAll(dir, 0o755))
	must(t, os.WriteFile(filepath.Join(dir, "CMakeLists.txt"), []byte(fakeHighs), 0o644))
	out := filepath.Join(tmp, "highs_1.10.0+ds.orig.tar.xz")
	if o, err := exec.Command("tar", "-C", filepath.Join(tmp, "fake-src"), "-cJf", out, "highs-1.10.0").CombinedOutput(); err != nil {
		t.Fatalf("tar: %v\n%s", err, o)
	}
	return out
}

// cleanEnv is the test's environment without the build's pkg-config and cgo variables.
func cleanEnv() []string {
	var env []string
	for _, e := range os.Environ() {
		k, _, _ := strings.Cut(e, "=")
		switch k {
		case "PKG_CONFIG_PATH", "CGO_LDFLAGS", "CGO_CFLAGS", "HOME", "TMPDIR":
			continue
		}
		env = append(env, e)
	}
	return env
}

func pkgConfig(path string, args ...string) (string, error) {
	cmd := exec.Command("pkg-config", args...)
	cmd.Env = cleanEnv()
	if path != "" {
		cmd.Env = append(cmd.Env, "PKG_CONFIG_PATH="+path)
	}
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// pkgConfigDefaults are the folders pkg-config searches without PKG_CONFIG_PATH.
func pkgConfigDefaults(t *testing.T) []string {
	t.Helper()
	out, err := pkgConfig("", "--variable", "pc_path", "pkg-config")
	if err != nil {
		t.Fatalf("pkg-config --variable pc_path pkg-config: %v %s", err, out)
	}
	return strings.Split(out, ":")
}

// mentioning lists the files under dirs whose content names path (other programs may change
// these shared folders meanwhile; only a file that points into the test's checkouts counts).
func mentioning(t *testing.T, dirs []string, path string) []string {
	t.Helper()
	var s []string
	for _, d := range dirs {
		_ = filepath.WalkDir(d, func(p string, e fs.DirEntry, err error) error {
			if err != nil || e.IsDir() {
				return nil
			}
			if data, err := os.ReadFile(p); err == nil && strings.Contains(string(data), path) {
				s = append(s, p)
			}
			return nil
		})
	}
	sort.Strings(s)
	return s
}

func listFiles(t *testing.T, dir string) []string {
	t.Helper()
	var files []string
	_ = filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err == nil && p != dir {
			files = append(files, p)
		}
		return nil
	})
	return files
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
