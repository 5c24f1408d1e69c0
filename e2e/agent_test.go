package e2e

// Shared helpers for the e2e tests: the skip when NOMAD_BIN is unset, the hetgpu binaries
// (from $HETGPU_BIN or built), Nomad agents on loopback with their own data dirs and free
// ports, a multi-client cluster, and polling for nodes and allocations.

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

// nomadBinary returns $NOMAD_BIN, or skips the test with a message saying how to run it.
// HETGPU_E2E=off skips too: make test sets it for ./... and runs the suite as make e2e does.
func nomadBinary(t *testing.T, purpose string) string {
	t.Helper()
	if os.Getenv("HETGPU_E2E") == "off" {
		t.Skipf("HETGPU_E2E=off: %s runs in make e2e (make test runs it when NOMAD_BIN is set)", purpose)
	}
	bin := os.Getenv("NOMAD_BIN")
	if bin == "" {
		t.Skipf("NOMAD_BIN is not set: set it to a Nomad (>= 1.10) binary to run %s, e.g. NOMAD_BIN=/work/tools/nomad make e2e", purpose)
	}
	return bin
}

// linuxNomadBinary is nomadBinary for a test that runs the hetgpu task driver: it also skips
// off Linux.
func linuxNomadBinary(t *testing.T, purpose string) string {
	t.Helper()
	bin := nomadBinary(t, purpose)
	skipUnlessLinux(t)
	return bin
}

// skipUnlessLinux skips tests that run the hetgpu task driver.
func skipUnlessLinux(t *testing.T) {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("the hetgpu task driver runs on Linux only")
	}
}

// binaries are the hetgpu executables e2e tests need; a field is empty when not asked for.
type binaries struct {
	Hetgpu, Device, Driver, Toy string
}

// Names of the hetgpu executables, as in bin/.
const (
	binHetgpu = "hetgpu"
	binDevice = "nomad-device-hetgpu"
	binDriver = "nomad-driver-hetgpu"
	binToy    = "hetgpu-toy-train"
)

// allBinaries is nomadBinary(t, purpose) and every hetgpu binary (buildBinaries of all four):
// what a test of the whole product on a real agent starts with.
func allBinaries(t *testing.T, purpose string) (string, binaries) {
	t.Helper()
	nomadBin := nomadBinary(t, purpose)
	return nomadBin, buildBinaries(t, binHetgpu, binDevice, binDriver, binToy)
}

// buildBinaries finds the named binaries in $HETGPU_BIN (make e2e sets it to bin/) or builds
// the missing ones into a temporary directory.
func buildBinaries(t *testing.T, names ...string) binaries {
	t.Helper()
	root, err := filepath.Abs("..")
	must(t, err)
	dir := os.Getenv("HETGPU_BIN")
	out := t.TempDir()
	var b binaries
	pkgs := map[string]struct {
		pkg string
		dst *string
	}{
		binHetgpu: {"./sidecar/cmd/hetgpu", &b.Hetgpu},
		binDevice: {"./device/cmd/nomad-device-hetgpu", &b.Device},
		binDriver: {"./driver/cmd/nomad-driver-hetgpu", &b.Driver},
		binToy:    {"./driver/cmd/hetgpu-toy-train", &b.Toy},
	}
	for _, name := range names {
		x, ok := pkgs[name]
		if !ok {
			t.Fatalf("unknown hetgpu binary %q", name)
		}
		if dir != "" {
			if p, err := filepath.Abs(filepath.Join(dir, name)); err == nil {
				if _, err := os.Stat(p); err == nil {
					*x.dst = p
					continue
				}
			}
		}
		cmd := exec.Command("go", "build", "-o", filepath.Join(out, name), x.pkg)
		cmd.Dir = root
		cmd.Env = os.Environ()
		// The sidecar links HiGHS: point cgo at the project's build of it when present.
		if highs := filepath.Join(root, ".deps", "highs"); dirExists(highs) {
			cmd.Env = append(cmd.Env, "PKG_CONFIG_PATH="+filepath.Join(highs, "lib", "pkgconfig"),
				"CGO_LDFLAGS=-Wl,-rpath,"+filepath.Join(highs, "lib"))
		}
		if o, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("build %s: %v\n%s", name, err, o)
		}
		*x.dst = filepath.Join(out, name)
	}
	return b
}

func dirExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}

// installPlugins copies plugin binaries into dir: the agent loads every executable in
// plugin_dir that a plugin block names.
func installPlugins(t *testing.T, dir string, bins ...string) {
	t.Helper()
	must(t, os.MkdirAll(dir, 0o755))
	for _, b := range bins {
		data, err := os.ReadFile(b)
		must(t, err)
		must(t, os.WriteFile(filepath.Join(dir, filepath.Base(b)), data, 0o755))
	}
}

// handedOut is every port freePort has returned in this test binary. The kernel may give a
// port just closed to the next bind of port 0, so two calls in a row could name the same port
// (seen: a sidecar handed the port its Nomad server was then configured with, and failing to
// listen); no port is handed out twice.
var handedOut = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

// freePort returns a free loopback TCP port that no other freePort call of this test binary
// returned.
func freePort(t *testing.T) int {
	t.Helper()
	handedOut.Lock()
	defer handedOut.Unlock()
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if !handedOut.ports[port] {
			handedOut.ports[port] = true
			return port
		}
	}
	t.Fatal("freePort: the kernel kept giving ports already handed out")
	return 0
}

// agentDir makes a directory for agents that is removed when the test ends. Not t.TempDir:
// Nomad clients mount tmpfs secrets dirs inside, which RemoveAll cannot delete; removeDir
// unmounts them first.
func agentDir(t *testing.T, prefix string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", prefix)
	must(t, err)
	t.Cleanup(func() { removeDir(t, dir) })
	return dir
}

// removeDir unmounts what Nomad clients left mounted under dir, then removes it.
func removeDir(t *testing.T, dir string) {
	unmountUnder(dir)
	if err := os.RemoveAll(dir); err != nil {
		t.Logf("agent dir %s not fully removed: %v", dir, err)
	}
}

// agentConfig is a Nomad agent configuration on loopback; zero fields are left out.
type agentConfig struct {
	Name      string
	DataDir   string
	PluginDir string
	LogLevel  string
	// Ports; RPC and Serf may be 0 (a client-only agent has no server ports to fix).
	HTTP, RPC, Serf int
	// Server runs a single-node server that bootstraps itself; ServerExtra is added inside
	// its server block (heartbeat_grace ...).
	Server      bool
	ServerExtra string
	// Expect is the servers' bootstrap_expect (default 1); Join their serf addresses to
	// join (server_join retry_join).
	Expect int
	Join   []string
	// Client runs a client; Servers are its servers' RPC addresses (none with -dev).
	Client  bool
	Servers []string
	// ClientExtra is added inside the client block (cgroup_parent, node_class ...).
	ClientExtra string
	// Extra is added at the end: plugin blocks.
	Extra string
}

func (c agentConfig) render() string {
	var b strings.Builder
	if c.Name != "" {
		fmt.Fprintf(&b, "name       = %q\n", c.Name)
	}
	fmt.Fprintf(&b, "data_dir   = %q\n", c.DataDir)
	b.WriteString("bind_addr  = \"127.0.0.1\"\n")
	if c.PluginDir != "" {
		fmt.Fprintf(&b, "plugin_dir = %q\n", c.PluginDir)
	}
	if c.LogLevel != "" {
		fmt.Fprintf(&b, "log_level  = %q\n", c.LogLevel)
	}
	b.WriteString("disable_update_check = true\n")
	b.WriteString("advertise {\n  http = \"127.0.0.1\"\n  rpc  = \"127.0.0.1\"\n  serf = \"127.0.0.1\"\n}\n")
	fmt.Fprintf(&b, "ports {\n  http = %d\n", c.HTTP)
	if c.RPC != 0 {
		fmt.Fprintf(&b, "  rpc  = %d\n", c.RPC)
	}
	if c.Serf != 0 {
		fmt.Fprintf(&b, "  serf = %d\n", c.Serf)
	}
	b.WriteString("}\n")
	if c.Server {
		fmt.Fprintf(&b, "server {\n  enabled          = true\n  bootstrap_expect = %d\n", max(c.Expect, 1))
		if len(c.Join) > 0 {
			fmt.Fprintf(&b, "  server_join {\n    retry_join     = [%s]\n    retry_interval = \"1s\"\n  }\n", quoteList(c.Join))
		}
		b.WriteString(c.ServerExtra + "}\n")
	} else {
		b.WriteString("server {\n  enabled = false\n}\n")
	}
	if c.Client {
		b.WriteString("client {\n  enabled = true\n")
		if len(c.Servers) > 0 {
			fmt.Fprintf(&b, "  servers = [%s]\n", quoteList(c.Servers))
		}
		b.WriteString(c.ClientExtra)
		// Cloud fingerprinters probe metadata endpoints for seconds on a machine without them.
		b.WriteString("  options {\n    \"fingerprint.denylist\" = \"env_aws,env_gce,env_azure,env_digitalocean\"\n  }\n}\n")
	}
	b.WriteString(c.Extra)
	return b.String()
}

// quoteList renders strings as the inside of an HCL list: "a", "b".
func quoteList(s []string) string {
	q := make([]string, len(s))
	for i, x := range s {
		q[i] = fmt.Sprintf("%q", x)
	}
	return strings.Join(q, ", ")
}

// proc is a process the test started (an agent or the sidecar), restartable; its output goes
// to dir/name.log, whose tail is logged if the test fails. It runs in dir, in a process group
// of its own: when the test ends (passed, failed or timed out in a waitFor) the group of every
// start is killed, with what it started there (Nomad's logmon and plugins), and so is every
// process left under dir (executors and tasks, which Nomad starts in sessions of their own).
type proc struct {
	t      *testing.T
	name   string
	dir    string
	argv   []string
	env    []string
	logf   *os.File
	cmd    *exec.Cmd
	exited chan struct{}
	// pgids are the process groups of every start (a restarted client's logmon processes
	// stay in the old group, reattached by the new agent).
	pgids []int
}

func startProc(t *testing.T, name, dir string, env []string, argv ...string) *proc {
	t.Helper()
	logf, err := os.OpenFile(filepath.Join(dir, name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	must(t, err)
	p := &proc{t: t, name: name, dir: dir, argv: argv, env: env, logf: logf}
	t.Cleanup(func() {
		p.Stop(syscall.SIGINT)
		p.endAll()
		logf.Close()
		if t.Failed() {
			if b, err := os.ReadFile(logf.Name()); err == nil {
				if len(b) > 30000 {
					b = b[len(b)-30000:]
				}
				t.Logf("%s log tail:\n%s", name, b)
			}
		}
	})
	p.Start()
	return p
}

// endAll kills the process groups of every start and whatever still runs under the process's
// directory, and waits until they are gone.
func (p *proc) endAll() {
	for _, g := range p.pgids {
		_ = syscall.Kill(-g, syscall.SIGKILL)
	}
	if left := endUnder([]string{p.dir}, 15*time.Second); len(left) > 0 {
		p.t.Errorf("%s: processes under %s survive SIGKILL: %v", p.name, p.dir, left)
	}
}

// Start runs the process (again).
func (p *proc) Start() {
	p.t.Helper()
	p.cmd = exec.Command(p.argv[0], p.argv[1:]...)
	p.cmd.Dir = p.dir
	p.cmd.Stdout, p.cmd.Stderr = p.logf, p.logf
	p.cmd.Env = append(os.Environ(), p.env...)
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	fmt.Fprintf(p.logf, "\n=== start %s at %s\n", strings.Join(p.argv, " "), time.Now().Format(time.RFC3339))
	if err := p.cmd.Start(); err != nil {
		p.t.Fatalf("start %s: %v", p.name, err)
	}
	p.pgids = append(p.pgids, p.cmd.Process.Pid)
	p.exited = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) { _ = cmd.Wait(); close(done) }(p.cmd, p.exited)
}

// Stop signals the process (SIGINT like an operator, which leaves a client's tasks running;
// SIGKILL kills at once) and waits, killing its process group after 20 s.
func (p *proc) Stop(sig syscall.Signal) {
	if p.cmd == nil || p.cmd.Process == nil {
		return
	}
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.exited:
	case <-time.After(20 * time.Second):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.exited
	}
	p.cmd = nil
}

// Exited reports whether the process ended.
func (p *proc) Exited() bool {
	if p.cmd == nil {
		return true
	}
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}

// agent is a running Nomad agent.
type agent struct {
	*proc
	// HTTP is the agent's API address; API a client for it.
	HTTP string
	API  *api.Client
}

// startAgent writes cfg to dir/agent.hcl and runs `nomad agent` on it (with args such as
// -dev before -config); the log is dir/<name>.log.
func startAgent(t *testing.T, nomadBin, dir, name string, cfg agentConfig, args ...string) *agent {
	t.Helper()
	must(t, os.MkdirAll(dir, 0o755))
	cfgPath := filepath.Join(dir, "agent.hcl")
	must(t, os.WriteFile(cfgPath, []byte(cfg.render()), 0o644))
	a := &agent{HTTP: fmt.Sprintf("http://127.0.0.1:%d", cfg.HTTP)}
	apiCfg := api.DefaultConfig()
	apiCfg.Address = a.HTTP
	var err error
	a.API, err = api.NewClient(apiCfg)
	must(t, err)
	argv := append([]string{nomadBin, "agent"}, args...)
	a.proc = startProc(t, name, dir, nil, append(argv, "-config", cfgPath)...)
	return a
}

// waitNodes waits until the cluster has exactly n nodes, each ready and accepted by ok (which
// says what it misses), and returns them in full. It fails at once if one of procs exits.
func waitNodes(t *testing.T, c *api.Client, d time.Duration, n int, procs []*proc, ok func(*api.Node) (bool, string)) []*api.Node {
	t.Helper()
	var nodes []*api.Node
	why := "no node yet"
	waitFor(t, d, fmt.Sprintf("%d ready client node(s)", n), func() bool {
		for _, p := range procs {
			if p.Exited() {
				t.Fatalf("%s exited during start-up; see its log below", p.name)
			}
		}
		stubs, _, err := c.Nodes().List(nil)
		if err != nil {
			why = err.Error()
			return false
		}
		if len(stubs) != n {
			why = fmt.Sprintf("%d nodes", len(stubs))
			return false
		}
		nodes = nodes[:0]
		for _, s := range stubs {
			if s.Status != "ready" {
				why = fmt.Sprintf("node %s status %s", s.Name, s.Status)
				return false
			}
			info, _, err := c.Nodes().Info(s.ID, nil)
			if err != nil {
				why = err.Error()
				return false
			}
			var good bool
			if good, why = ok(info); !good {
				return false
			}
			nodes = append(nodes, info)
		}
		return true
	}, func() string { return why })
	return nodes
}

// hasDevices accepts a node that reports at least n device groups.
func hasDevices(n int) func(*api.Node) (bool, string) {
	return func(node *api.Node) (bool, string) {
		if node.NodeResources == nil || len(node.NodeResources.Devices) < n {
			return false, fmt.Sprintf("node %s reports fewer than %d device groups", node.Name, n)
		}
		return true, ""
	}
}

// driverHealthy accepts a node whose hetgpu task driver is detected and healthy.
func driverHealthy(node *api.Node) (bool, string) {
	d := node.Drivers["hetgpu"]
	if d == nil || !d.Detected || !d.Healthy {
		return false, fmt.Sprintf("node %s status %s, hetgpu driver %+v", node.Name, node.Status, d)
	}
	if node.Attributes["driver.hetgpu.version"] == "" {
		return false, "driver.hetgpu.version attribute missing"
	}
	return true, ""
}

// registerJob parses HCL through the agent, registers the job and deregisters it at the end.
func registerJob(t *testing.T, c *api.Client, hcl string) *api.Job {
	t.Helper()
	job, err := c.Jobs().ParseHCL(hcl, true)
	if err != nil {
		t.Fatalf("parse job: %v", err)
	}
	if _, _, err := c.Jobs().Register(job, nil); err != nil {
		t.Fatalf("register job: %v", err)
	}
	t.Cleanup(func() { _, _, _ = c.Jobs().Deregister(*job.ID, true, nil) })
	return job
}

// waitAlloc waits for the job's allocation to reach clientStatus; it fails at once when the
// allocation ends otherwise, and logs the job's evaluations if none appears in time.
func waitAlloc(t *testing.T, c *api.Client, jobID, clientStatus string) *api.Allocation {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var last string
	for ctx.Err() == nil {
		stubs, _, err := c.Jobs().Allocations(jobID, false, nil)
		if err == nil && len(stubs) > 0 {
			a, _, err := c.Allocations().Info(stubs[0].ID, nil)
			if err == nil {
				last = a.ClientStatus
				if a.ClientStatus == clientStatus {
					return a
				}
				if a.ClientStatus == "complete" || a.ClientStatus == "failed" || a.ClientStatus == "lost" {
					t.Fatalf("allocation %s ended %s, want %s; task states: %s", a.ID, a.ClientStatus, clientStatus, allocEvents(a))
				}
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
	evals, _, _ := c.Jobs().Evaluations(jobID, nil)
	for _, e := range evals {
		t.Logf("eval %s %s %s failed=%v", e.ID, e.Status, e.StatusDescription, e.FailedTGAllocs)
	}
	t.Fatalf("job %s: allocation not %s after 90s (last status %q)", jobID, clientStatus, last)
	return nil
}

// allocEvents lists an allocation's task events for a failure message.
func allocEvents(a *api.Allocation) string {
	var b strings.Builder
	for name, ts := range a.TaskStates {
		for _, ev := range ts.Events {
			fmt.Fprintf(&b, "\n  %s: %s: %s", name, ev.Type, ev.DisplayMessage)
		}
	}
	return b.String()
}

// waitFor polls ok every 500 ms until it holds or d passes; detail, if given, explains the
// last miss in the failure.
func waitFor(t *testing.T, d time.Duration, what string, ok func() bool, detail ...func() string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			msg := fmt.Sprintf("timed out after %s waiting for %s", d, what)
			for _, f := range detail {
				msg += ": " + f()
			}
			t.Fatal(msg)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// clusterClient describes one Nomad client of a test cluster.
type clusterClient struct {
	Name string
	// Fake is the device plugin's fake GPU mix, e.g. ["4x T4"].
	Fake []string
	// Extra is added to the client's agent configuration (e.g. a raw_exec plugin block).
	Extra string
	// FakeExtra goes inside the device plugin's fake block (mig blocks), DeviceExtra inside
	// its config (a sharing block), DriverExtra inside the task driver's config (fake_mig).
	FakeExtra, DeviceExtra, DriverExtra string
}

// clusterOpts are a test cluster's options besides its clients: driverExtra goes into the
// hetgpu driver's plugin config, serverExtra inside the server block; ACL enables Nomad's
// ACL system on every agent and bootstraps it (the cluster's API client then carries the
// management token, ManagementToken).
type clusterOpts struct {
	DriverExtra, ServerExtra string
	ACL                      bool
}

const aclEnabled = "acl {\n  enabled = true\n}\n"

// cluster is one Nomad server and its clients.
type cluster struct {
	*agent  // the server
	clients []*agent
	// dir holds the agents' directories (data dirs, allocations, logs).
	dir string
	// ManagementToken is the bootstrap token of a cluster with ACLs.
	ManagementToken string
}

// startCluster starts a server and the clients with the hetgpu device plugin (fake backend)
// and task driver; driverExtra is added to the driver's plugin config (e.g. sidecar_addr). It
// waits until every client is ready with its GPUs and a healthy driver.
func startCluster(t *testing.T, nomadBin string, bins binaries, clients []clusterClient, driverExtra string) *cluster {
	t.Helper()
	return startClusterWith(t, nomadBin, bins, clients, driverExtra, "")
}

// startClusterWith is startCluster with serverExtra inside the server block.
func startClusterWith(t *testing.T, nomadBin string, bins binaries, clients []clusterClient, driverExtra, serverExtra string) *cluster {
	t.Helper()
	return startClusterOpts(t, nomadBin, bins, clients, clusterOpts{DriverExtra: driverExtra, ServerExtra: serverExtra})
}

// startClusterOpts is startCluster with options.
func startClusterOpts(t *testing.T, nomadBin string, bins binaries, clients []clusterClient, o clusterOpts) *cluster {
	t.Helper()
	skipUnlessLinux(t)
	driverExtra, serverExtra, agentExtra := o.DriverExtra, o.ServerExtra, ""
	if o.ACL {
		agentExtra = aclEnabled
	}
	dir := agentDir(t, "hetgpu-cluster-e2e-")
	srvDir := filepath.Join(dir, "server")
	rpcPort := freePort(t)
	c := &cluster{dir: dir, agent: startAgent(t, nomadBin, srvDir, "nomad-server", agentConfig{
		Name: "hetgpu-e2e-server", DataDir: filepath.Join(srvDir, "data"), LogLevel: "INFO",
		HTTP: freePort(t), RPC: rpcPort, Serf: freePort(t), Server: true, ServerExtra: serverExtra, Extra: agentExtra,
	})}
	waitFor(t, 60*time.Second, "the Nomad server to elect itself leader", func() bool {
		l, err := c.API.Status().Leader()
		return err == nil && l != ""
	})
	if o.ACL {
		var tok *api.ACLToken
		waitFor(t, 30*time.Second, "the ACL bootstrap", func() bool {
			var err error
			tok, _, err = c.API.ACLTokens().Bootstrap(nil)
			return err == nil
		})
		c.ManagementToken = tok.SecretID
		c.API.SetSecretID(tok.SecretID)
	}
	procs := []*proc{c.proc}
	for _, cl := range clients {
		a := startClient(t, nomadBin, bins, dir, cl, []string{fmt.Sprintf("127.0.0.1:%d", rpcPort)}, driverExtra, agentExtra)
		c.clients = append(c.clients, a)
		procs = append(procs, a.proc)
	}
	waitNodes(t, c.API, 120*time.Second, len(clients), procs, func(n *api.Node) (bool, string) {
		if ok, why := hasDevices(1)(n); !ok {
			return false, why
		}
		return driverHealthy(n)
	})
	return c
}

// startClient starts a Nomad client in dir/<name> with the hetgpu device plugin (fake GPUs)
// and task driver, joined to the servers' RPC addresses.
func startClient(t *testing.T, nomadBin string, bins binaries, dir string, cl clusterClient, servers []string, driverExtra, agentExtra string) *agent {
	t.Helper()
	cdir := filepath.Join(dir, cl.Name)
	plugins := filepath.Join(cdir, "plugins")
	installPlugins(t, plugins, bins.Device, bins.Driver)
	fake := quoteList(cl.Fake)
	return startAgent(t, nomadBin, cdir, "nomad-client-"+cl.Name, agentConfig{
		Name: "hetgpu-e2e-" + cl.Name, DataDir: filepath.Join(cdir, "data"), PluginDir: plugins, LogLevel: "INFO",
		HTTP: freePort(t), Client: true, Servers: servers,
		ClientExtra: fmt.Sprintf("  cgroup_parent = \"nomad-e2e-%[1]s\"\n  node_class    = %[1]q\n", cl.Name),
		Extra: agentExtra + cl.Extra + fmt.Sprintf(`
plugin "nomad-device-hetgpu" {
  config {
    fingerprint_period = "5s"
    fake {
      gpus = [%[2]s]
      seed = "e2e-%[1]s"
%[5]s
    }
%[6]s
  }
}
plugin "nomad-driver-hetgpu" {
  config {
    nvml            = "fake"
    fake_gpus       = [%[2]s]
    fake_seed       = "e2e-%[1]s"
    state_dir       = %[3]q
    cgroup_parent   = "hetgpu-e2e-%[1]s.slice"
    sample_interval = "500ms"
    mps_pipe_dir    = %[7]q
    mps_log_dir     = %[8]q
%[4]s
%[9]s
  }
}
`, cl.Name, fake, filepath.Join(cdir, "driver"), driverExtra, cl.FakeExtra, cl.DeviceExtra,
			filepath.Join(cdir, "mps"), filepath.Join(cdir, "mps-log"), cl.DriverExtra),
	})
}
