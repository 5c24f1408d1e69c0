package releasecheck

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/hetgpu/hetgpu/internal/doccheck"
	"github.com/hetgpu/hetgpu/internal/version"
)

// baseLibs are the libraries every Linux host has; a released binary may need nothing else.
var baseLibs = map[string]bool{
	"linux-vdso.so.1": true, "libc.so.6": true, "libm.so.6": true, "libpthread.so.0": true,
	"libdl.so.2": true, "librt.so.1": true, "libstdc++.so.6": true, "libgcc_s.so.1": true,
	"libgomp.so.1": true, "ld-linux-x86-64.so.2": true, "ld-linux-aarch64.so.1": true,
}

// TestReleaseArchiveRunsWithoutTheCheckout builds this host's release archive with
// scripts/release.sh (what `make release` runs), unpacks it into an empty folder and runs its
// binaries there with an empty PATH and LD_LIBRARY_PATH and a fresh HOME: no .deps, no
// pkg-config, no HiGHS. Each binary needs only base-system libraries (ldd and the ELF
// dynamic section agree), carries no rpath and names no folder of the checkout.
func TestReleaseArchiveRunsWithoutTheCheckout(t *testing.T) {
	if runtime.GOOS != "linux" || (runtime.GOARCH != "amd64" && runtime.GOARCH != "arm64") {
		t.Skipf("release archives are built for linux/amd64 and linux/arm64, not %s/%s", runtime.GOOS, runtime.GOARCH)
	}
	root, err := doccheck.Root(".")
	if err != nil {
		t.Fatal(err)
	}
	static := ".deps/highs-static"
	if runtime.GOARCH == "arm64" {
		static = ".deps/highs-static-arm64"
	}
	if _, err := os.Stat(filepath.Join(root, static, "lib", "libhighs.a")); err != nil {
		t.Skipf("no static HiGHS in %s (make deps builds it): %v", static, err)
	}
	for _, tool := range []string{"bash", "tar", "gzip", "sha256sum", "gcc"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("the release toolchain needs %s: %v", tool, err)
		}
	}
	dist := t.TempDir()
	cmd := exec.Command("bash", filepath.Join(root, "scripts", "release.sh"), dist, version.Version, "test", runtime.GOARCH)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("release.sh: %v\n%s", err, out)
	}
	name := fmt.Sprintf("hetgpu_%s_linux_%s", version.Version, runtime.GOARCH)
	archive := filepath.Join(dist, name+".tar.gz")
	checkSums(t, dist, name+".tar.gz")

	host := t.TempDir()
	if out, err := exec.Command("tar", "-C", host, "-xzf", archive).CombinedOutput(); err != nil {
		t.Fatalf("unpack %s: %v\n%s", archive, err, out)
	}
	top := filepath.Join(host, name)
	for _, f := range []string{"bin/hetgpu", "bin/hetgpu-toy-train", "plugins/nomad-device-hetgpu", "plugins/nomad-driver-hetgpu",
		"jobspecs/hetgpu-sidecar.nomad.hcl", "jobspecs/hetgpu-sidecar.policy.hcl", "docs/install.md", "README.md", "CHANGELOG.md"} {
		if _, err := os.Stat(filepath.Join(top, f)); err != nil {
			t.Errorf("archive %s lacks %s: %v", name, f, err)
		}
	}

	emptyPath := t.TempDir()
	env := []string{"PATH=" + emptyPath, "LD_LIBRARY_PATH=", "HOME=" + t.TempDir(), "TMPDIR=" + t.TempDir()}
	runIn := func(bin string, args ...string) string {
		t.Helper()
		c := exec.Command(filepath.Join(top, bin), args...)
		c.Dir, c.Env = host, env
		out, err := c.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %s on a host without the checkout: %v\n%s", bin, strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	out := runIn("bin/hetgpu", "version")
	for _, want := range []string{"hetgpu " + version.Version + "\n", "commit test\n", "go     go1.", "highs  1."} {
		if !strings.Contains(out, want) {
			t.Errorf("hetgpu version printed %q; want it to contain %q", out, want)
		}
	}
	out = runIn("bin/hetgpu", "sim", "--cluster", "modern-mix", "--trace", "synthetic:jobs=20,rate=30,seed=1",
		"--policies", "fifo,hetgpu", "--parallel", "1")
	if !strings.Contains(out, "20 jobs") || !strings.Contains(out, "  hetgpu    20 ") {
		t.Errorf("hetgpu sim on 20 jobs printed no row for hetgpu:\n%s", out)
	}
	for _, p := range []string{"plugins/nomad-device-hetgpu", "plugins/nomad-driver-hetgpu"} {
		if out := runIn(p, "--version"); !strings.HasPrefix(out, filepath.Base(p)+" "+version.Version+" ") {
			t.Errorf("%s --version printed %q", p, out)
		}
	}
	if out := runIn("bin/hetgpu-toy-train", "-version"); !strings.Contains(out, version.Version) {
		t.Errorf("hetgpu-toy-train -version printed %q", out)
	}

	ldd, lddErr := exec.LookPath("ldd")
	for _, bin := range []string{"bin/hetgpu", "bin/hetgpu-toy-train", "plugins/nomad-device-hetgpu", "plugins/nomad-driver-hetgpu"} {
		p := filepath.Join(top, bin)
		checkELF(t, p, root)
		if lddErr != nil {
			t.Logf("no ldd (%v): checked %s's ELF dynamic section only", lddErr, bin)
			continue
		}
		c := exec.Command(ldd, p)
		c.Env = env
		o, err := c.CombinedOutput()
		if err != nil && strings.Contains(string(o), "not a dynamic executable") {
			continue // statically linked: needs no library at all
		}
		if err != nil {
			t.Fatalf("ldd %s: %v\n%s", bin, err, o)
		}
		if bin == "bin/hetgpu" {
			t.Logf("ldd %s:\n%s", bin, o)
		}
		sc := bufio.NewScanner(bytes.NewReader(o))
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) == 0 {
				continue
			}
			lib := filepath.Base(f[0])
			if !baseLibs[lib] || strings.Contains(sc.Text(), "not found") {
				t.Errorf("ldd %s: %q is not a base-system library (allowed: libc, libm, libstdc++, libgcc_s, libpthread, libdl, librt, libgomp, the loader)", bin, sc.Text())
			}
		}
	}
}

// checkELF: the binary's NEEDED entries are base libraries, it has no RPATH or RUNPATH, and
// no string in it names the checkout it was built in.
func checkELF(t *testing.T, p, root string) {
	t.Helper()
	f, err := elf.Open(p)
	if err != nil {
		t.Fatalf("%s: %v", p, err)
	}
	defer f.Close()
	libs, err := f.ImportedLibraries()
	if err != nil {
		t.Fatalf("%s: %v", p, err)
	}
	for _, l := range libs {
		if !baseLibs[l] {
			t.Errorf("%s needs %s, which a plain host does not have", filepath.Base(p), l)
		}
	}
	for _, tag := range []elf.DynTag{elf.DT_RPATH, elf.DT_RUNPATH} {
		if v, _ := f.DynString(tag); len(v) > 0 {
			t.Errorf("%s has %v %q; a released binary must not search the build machine's folders", filepath.Base(p), tag, v)
		}
	}
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(data, []byte(root+"/")) {
		t.Errorf("%s contains the checkout's path %s", filepath.Base(p), root)
	}
}

// checkSums: SHA256SUMS names the archive with its digest.
func checkSums(t *testing.T, dist, archive string) {
	t.Helper()
	sums, err := os.ReadFile(filepath.Join(dist, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(dist, archive))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	want := hex.EncodeToString(sum[:]) + "  " + archive + "\n"
	if string(sums) != want {
		t.Errorf("SHA256SUMS is %q; want %q", sums, want)
	}
	t.Logf("%s: %d bytes", archive, len(data))
}
