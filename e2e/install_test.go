package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/hetgpu/hetgpu/internal/doccheck"
	"github.com/hetgpu/hetgpu/internal/version"
)

// TestInstallGuide follows docs/install.md on a real Nomad cluster with ACLs (one server,
// two clients), as a new operator would: the release archive (built by scripts/release.sh, or
// $HETGPU_RELEASE with its SHA256SUMS beside it) is checked and unpacked by the page's own
// shell block, the clients run the plugins from the archive with the page's plugin stanzas
// (the fake-GPU variant, since this machine has no GPUs), the page's shell blocks create
// the sidecar's secrets and policy and run the shipped sidecar job and the page's example job
// (saved from the page). The example job must be pinned by the sidecar and finish.
//
// The one change to the page's text: /opt, where the page unpacks the archive, is a folder
// of the test's (and the cp into /opt/nomad/data/plugins is the test's plugin_dir).
func TestInstallGuide(t *testing.T) {
	nomadBin := linuxNomadBinary(t, "the install guide (docs/install.md)")
	if runtime.GOARCH != "amd64" {
		t.Skipf("docs/install.md walks through the amd64 archive; this is %s", runtime.GOARCH)
	}
	for _, tool := range []string{"bash", "tar", "sha256sum", "openssl"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("the install guide's steps use %s: %v", tool, err)
		}
	}
	root, err := filepath.Abs("..")
	must(t, err)
	src, err := os.ReadFile(filepath.Join(root, "docs", "install.md"))
	must(t, err)
	page := doccheck.Parse("docs/install.md", src)
	var runs []string
	blocks := map[string]string{}
	for _, b := range page.Blocks {
		switch {
		case b.Marker == "e2e:run":
			runs = append(runs, b.Text)
		case b.Marker != "":
			blocks[b.Marker] = b.Text
		}
	}
	example := blocks["e2e:file example.nomad.hcl"]
	if len(runs) != 4 || blocks["e2e:client-plugins-fake"] == "" || blocks["e2e:client-plugins"] == "" || example == "" {
		t.Fatalf("docs/install.md: %d e2e:run blocks (want 4: unpack, secrets, sidecar job, example job) and blocks %v; the test follows the page's marked blocks", len(runs), keys(blocks))
	}
	archiveName := fmt.Sprintf("hetgpu_%s_linux_amd64.tar.gz", version.Version)
	if !strings.Contains(runs[0], archiveName) {
		t.Fatalf("docs/install.md unpacks another archive than this version's %s:\n%s", archiveName, runs[0])
	}

	// A short folder: the Task API socket under each allocation must fit a unix socket path.
	work := agentDir(t, "hgi-")
	opt := filepath.Join(work, "opt")
	dl := filepath.Join(work, "dl") // where the operator runs the steps from
	for _, d := range []string{opt, dl} {
		must(t, os.MkdirAll(d, 0o755))
	}
	releaseArchive(t, root, dl, archiveName)
	home := filepath.Join(opt, strings.TrimSuffix(archiveName, ".tar.gz"))
	// The certificates the page asks for, in the folder the steps run in.
	certs := hostCerts(t)
	for from, to := range map[string]string{certs.ServerCert: "sidecar.pem", certs.ServerKey: "sidecar-key.pem", certs.CA: "ca.pem"} {
		data, err := os.ReadFile(from)
		must(t, err)
		must(t, os.WriteFile(filepath.Join(dl, to), data, 0o600))
	}
	env := []string{"PATH=" + filepath.Dir(nomadBin) + ":" + os.Getenv("PATH"), "HOME=" + work, "NOMAD_CLI_NO_COLOR=1"}
	step := func(i int, block string) string {
		t.Helper()
		script := strings.ReplaceAll(block, "/opt", opt)
		cmd := exec.Command("bash", "-euo", "pipefail", "-c", script)
		cmd.Dir, cmd.Env = dl, env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("docs/install.md step block %d failed: %v\n--- script:\n%s\n--- output:\n%s", i+1, err, script, out)
		}
		t.Logf("docs/install.md block %d:\n%s", i+1, out)
		return string(out)
	}

	// Step 1: check and unpack.
	out := step(0, runs[0])
	if !strings.Contains(out, "hetgpu "+version.Version) || !strings.Contains(out, "OK") {
		t.Fatalf("step 1 printed no checksum OK and no hetgpu %s:\n%s", version.Version, out)
	}
	m := regexp.MustCompile(`export HETGPU_HOME=(\S+)`).FindStringSubmatch(runs[0])
	if m == nil || strings.ReplaceAll(m[1], "/opt", opt) != home {
		t.Fatalf("step 1 exports HETGPU_HOME=%v; want the unpacked folder %s", m, home)
	}
	env = append(env, "HETGPU_HOME="+home)

	// Steps 2 and 3: a server and two clients with the plugins from the archive and the
	// page's stanzas.
	srvDir := filepath.Join(work, "s")
	rpcPort := freePort(t)
	srv := startAgent(t, nomadBin, srvDir, "nomad-server", agentConfig{
		Name: "hgi-server", DataDir: filepath.Join(srvDir, "d"), LogLevel: "INFO",
		HTTP: freePort(t), RPC: rpcPort, Serf: freePort(t), Server: true, Extra: aclEnabled,
	})
	waitFor(t, 60*time.Second, "the Nomad server to elect itself leader", func() bool {
		l, err := srv.API.Status().Leader()
		return err == nil && l != ""
	})
	var tok *api.ACLToken
	waitFor(t, 30*time.Second, "the ACL bootstrap", func() bool {
		tok, _, err = srv.API.ACLTokens().Bootstrap(nil)
		return err == nil
	})
	srv.API.SetSecretID(tok.SecretID)
	env = append(env, "NOMAD_ADDR="+srv.HTTP, "NOMAD_TOKEN="+tok.SecretID)
	procs := []*proc{srv.proc}
	for _, name := range []string{"a", "b"} {
		cdir := filepath.Join(work, name)
		plugins := filepath.Join(cdir, "p")
		installPlugins(t, plugins, filepath.Join(home, "plugins", binDevice), filepath.Join(home, "plugins", binDriver))
		a := startAgent(t, nomadBin, cdir, "nomad-client-"+name, agentConfig{
			Name: "hgi-" + name, DataDir: filepath.Join(cdir, "d"), PluginDir: plugins, LogLevel: "INFO",
			HTTP: freePort(t), Client: true, Servers: []string{fmt.Sprintf("127.0.0.1:%d", rpcPort)},
			ClientExtra: fmt.Sprintf("  cgroup_parent = \"nomad-hgi-%s\"\n", name),
			Extra:       aclEnabled + blocks["e2e:client-plugins-fake"],
		})
		procs = append(procs, a.proc)
	}
	killTasks(t, &cluster{dir: work}, filepath.Join(home, "bin", "hetgpu-toy-train"))
	killTasks(t, &cluster{dir: work}, filepath.Join(home, "bin", "hetgpu"))
	waitNodes(t, srv.API, 120*time.Second, 2, procs, func(n *api.Node) (bool, string) {
		if ok, why := hasDevices(1)(n); !ok {
			return false, why
		}
		return driverHealthy(n)
	})

	// Steps 4 and 5: secrets, policy, the sidecar job.
	step(1, runs[1])
	step(2, runs[2])
	waitFor(t, 120*time.Second, "the sidecar job's two replicas registered as the service hetgpu-sidecar", func() bool {
		regs, _, err := srv.API.Services().Get("hetgpu-sidecar", nil)
		return err == nil && len(regs) == 2
	}, func() string {
		return jobState(srv.API, "hetgpu-sidecar") + taskLogs(srv.API, "hetgpu-sidecar", "sidecar")
	})
	waitChecksPassing(t, srv.API, "hetgpu-sidecar", 2)

	// Step 6: the example job, saved from the page, validated and run.
	must(t, os.WriteFile(filepath.Join(dl, "example.nomad.hcl"), []byte(example), 0o644))
	step(3, runs[3])
	waitFor(t, 120*time.Second, "the example job pinned by the sidecar and finished", func() bool {
		j, _, err := srv.API.Jobs().Info("example", nil)
		if err != nil || scHeld(j) {
			return false
		}
		stubs, _, err := srv.API.Jobs().Allocations("example", false, nil)
		if err != nil {
			return false
		}
		for _, s := range stubs {
			if s.ClientStatus == api.AllocClientStatusComplete {
				return true
			}
		}
		return false
	}, func() string { return jobState(srv.API, "example") + taskLogs(srv.API, "hetgpu-sidecar", "sidecar") })
	if _, pins := pinVersions(t, srv.API, "example"); pins != 1 {
		t.Fatalf("example: %d hetgpu pin tags, want 1", pins)
	}
	// Step 7: what the page says to look at.
	j, _, err := srv.API.Jobs().Info("example", nil)
	must(t, err)
	if j.UI == nil || !strings.Contains(j.UI.Description, "hetgpu") {
		t.Errorf("the example job's ui block has no hetgpu section: %+v", j.UI)
	}
	t.Logf("example job: %s", jobState(srv.API, "example"))
}

// releaseArchive puts the release archive and SHA256SUMS into dir: $HETGPU_RELEASE (a path to
// the archive, SHA256SUMS beside it), else what scripts/release.sh builds for amd64.
func releaseArchive(t *testing.T, root, dir, name string) {
	t.Helper()
	from := os.Getenv("HETGPU_RELEASE")
	if from == "" {
		if _, err := os.Stat(filepath.Join(root, ".deps", "highs-static", "lib", "libhighs.a")); err != nil {
			t.Skipf("no release archive: set HETGPU_RELEASE=dist/%s (make release) or run make deps for the static HiGHS (%v)", name, err)
		}
		dist := t.TempDir()
		cmd := exec.Command("bash", filepath.Join(root, "scripts", "release.sh"), dist, version.Version, "e2e", "amd64")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("release.sh: %v\n%s", err, out)
		}
		from = filepath.Join(dist, name)
	}
	for _, f := range []string{from, filepath.Join(filepath.Dir(from), "SHA256SUMS")} {
		data, err := os.ReadFile(f)
		must(t, err)
		must(t, os.WriteFile(filepath.Join(dir, filepath.Base(f)), data, 0o644))
	}
}

func keys(m map[string]string) []string {
	var k []string
	for x := range m {
		k = append(k, x)
	}
	return k
}
