package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

// TestDriverOnRealAgent runs jobs with driver = "hetgpu" on a real Nomad agent (server and
// client in one process) with nomad-driver-hetgpu installed as an external plugin: a toy
// training job that must finish with its telemetry events, a job whose config the driver
// rejects, and one whose config the schema rejects.
//
// Needs NOMAD_BIN (a Nomad >= 1.10 binary). HETGPU_BIN may point at prebuilt binaries
// (`make e2e` sets it to bin/); missing ones are built.
func TestDriverOnRealAgent(t *testing.T) {
	nomadBin := os.Getenv("NOMAD_BIN")
	if nomadBin == "" {
		t.Skip("NOMAD_BIN is not set: set it to a Nomad (>= 1.10) binary to run the hetgpu task driver on a real agent")
	}
	if runtime.GOOS != "linux" {
		t.Skip("the hetgpu task driver runs on Linux only")
	}
	bins := driverE2EBinaries(t)
	a := driverE2EStartAgent(t, nomadBin, bins)
	c := a.client

	t.Run("toy training job completes with telemetry", func(t *testing.T) {
		job := driverE2ERegister(t, c, fmt.Sprintf(`
job "hetgpu-driver-e2e" {
  type = "batch"
  meta = {
    "hetgpu.model"      = "resnet/ResNet-50"
    "hetgpu.batch_size" = "64"
  }
  group "trainers" {
    restart {
      attempts = 0
      mode     = "fail"
    }
    reschedule {
      attempts  = 0
      unlimited = false
    }
    task "train" {
      driver = "hetgpu"
      config {
        command = %q
        args    = ["-steps", "30", "-step-time", "100ms", "-batch", "64"]
      }
      resources {
        cpu    = 100
        memory = 64
      }
    }
  }
}`, bins.toy))
		alloc := driverE2EWaitAlloc(t, c, job, "complete")
		ts := alloc.TaskStates["train"]
		if ts == nil || ts.Failed {
			t.Fatalf("task state = %+v", ts)
		}
		var msgs []string
		exitCode := -1
		for _, ev := range ts.Events {
			msgs = append(msgs, ev.Type+": "+ev.DisplayMessage)
			if ev.Type == api.TaskTerminated {
				exitCode = ev.ExitCode
			}
		}
		joined := strings.Join(msgs, "\n")
		for _, want := range []string{"started hetgpu-toy-train", "measured ", "samples/s", "finished after"} {
			if !strings.Contains(joined, want) {
				t.Errorf("task events lack %q:\n%s", want, joined)
			}
		}
		if exitCode != 0 {
			t.Errorf("exit code = %d, want 0; events:\n%s", exitCode, joined)
		}
		logs := driverE2ELogs(t, c, alloc, "train")
		if !strings.Contains(logs, "step 30/30") {
			t.Errorf("stdout through Nomad's log collector = %q", logs)
		}
	})

	t.Run("task survives an agent restart with its exit code", func(t *testing.T) {
		job := driverE2ERegister(t, c, fmt.Sprintf(`
job "hetgpu-driver-e2e-restart" {
  type = "batch"
  group "g" {
    restart {
      attempts = 0
      mode     = "fail"
    }
    reschedule {
      attempts  = 0
      unlimited = false
    }
    task "t" {
      driver = "hetgpu"
      config {
        command = %q
        args    = ["-steps", "80", "-step-time", "100ms", "-exit-code", "3"]
      }
    }
  }
}`, bins.toy))
		alloc := driverE2EWaitTaskState(t, c, job, "t", "running")
		// Stop the whole agent (client and driver plugin) mid-task, then start it again on
		// the same data dir: the client restores the alloc and calls RecoverTask.
		a.stop()
		a.start()
		alloc = driverE2EWaitAlloc(t, c, job, "failed")
		ts := alloc.TaskStates["t"]
		exitCode := -1
		for _, ev := range ts.Events {
			if ev.Type == api.TaskTerminated {
				exitCode = ev.ExitCode
			}
		}
		if exitCode != 3 {
			t.Errorf("exit code after the restart = %d, want 3; events: %s", exitCode, driverE2EEvents(alloc))
		}
		if !driverE2EHasEvent(ts, "reattached") {
			t.Errorf("no reattach event: %s", driverE2EEvents(alloc))
		}
	})

	t.Run("driver-side config error names the field", func(t *testing.T) {
		job := driverE2ERegister(t, c, fmt.Sprintf(`
job "hetgpu-driver-e2e-badregex" {
  type = "batch"
  group "g" {
    restart {
      attempts = 0
      mode     = "fail"
    }
    reschedule {
      attempts  = 0
      unlimited = false
    }
    task "t" {
      driver = "hetgpu"
      config {
        command = %q
        metrics {
          regex = "throughput ([0-9.]+)"
        }
      }
    }
  }
}`, bins.toy))
		alloc := driverE2EWaitAlloc(t, c, job, "failed")
		if !driverE2EHasEvent(alloc.TaskStates["t"], "metrics.regex") {
			t.Errorf("no task event naming metrics.regex: %+v", alloc.TaskStates["t"])
		}
	})

	t.Run("schema error is a Failed Validation naming the field", func(t *testing.T) {
		job := driverE2ERegister(t, c, `
job "hetgpu-driver-e2e-nocommand" {
  type = "batch"
  group "g" {
    restart {
      attempts = 0
      mode     = "fail"
    }
    reschedule {
      attempts  = 0
      unlimited = false
    }
    task "t" {
      driver = "hetgpu"
      config {
        args = ["x"]
      }
    }
  }
}`)
		alloc := driverE2EWaitAlloc(t, c, job, "failed")
		ts := alloc.TaskStates["t"]
		found := false
		for _, ev := range ts.Events {
			if ev.Type == api.TaskFailedValidation && strings.Contains(ev.DisplayMessage+ev.ValidationError, "command") {
				found = true
			}
		}
		if !found {
			t.Errorf("no Failed Validation event naming command: %+v", ts.Events)
		}
	})
}

type driverE2EBins struct{ driver, toy string }

// driverE2EBinaries finds the driver and toy workload in HETGPU_BIN or builds them.
func driverE2EBinaries(t *testing.T) driverE2EBins {
	t.Helper()
	dir := os.Getenv("HETGPU_BIN")
	out := t.TempDir()
	var b driverE2EBins
	for _, x := range []struct {
		name, pkg string
		dst       *string
	}{
		{"nomad-driver-hetgpu", "./driver/cmd/nomad-driver-hetgpu", &b.driver},
		{"hetgpu-toy-train", "./driver/cmd/hetgpu-toy-train", &b.toy},
	} {
		if dir != "" {
			p, err := filepath.Abs(filepath.Join(dir, x.name))
			if err == nil {
				if _, err := os.Stat(p); err == nil {
					*x.dst = p
					continue
				}
			}
		}
		cmd := exec.Command("go", "build", "-o", filepath.Join(out, x.name), x.pkg)
		cmd.Dir = ".."
		if o, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("build %s: %v\n%s", x.name, err, o)
		}
		*x.dst = filepath.Join(out, x.name)
	}
	return b
}

// driverE2ERemoveDir unmounts what the Nomad client left mounted under dir, then removes it.
func driverE2ERemoveDir(t *testing.T, dir string) {
	if mounts, err := os.ReadFile("/proc/self/mounts"); err == nil {
		var points []string
		for _, line := range strings.Split(string(mounts), "\n") {
			if f := strings.Fields(line); len(f) > 1 && strings.HasPrefix(f[1], dir+"/") {
				points = append(points, f[1])
			}
		}
		for i := len(points) - 1; i >= 0; i-- {
			_ = syscall.Unmount(points[i], syscall.MNT_DETACH)
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Logf("agent dir %s not fully removed: %v", dir, err)
	}
}

type driverE2EAgent struct {
	t        *testing.T
	nomadBin string
	dir      string
	cfgPath  string
	client   *api.Client
	cmd      *exec.Cmd
	exited   chan struct{}
	logf     *os.File
}

func driverE2EFreePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// driverE2EStartAgent starts a server+client agent with the driver installed and waits until
// the node reports the driver healthy.
func driverE2EStartAgent(t *testing.T, nomadBin string, bins driverE2EBins) *driverE2EAgent {
	t.Helper()
	// Not t.TempDir: the client mounts tmpfs secrets dirs inside, which RemoveAll cannot
	// delete; driverE2ERemoveDir unmounts them first.
	dir, err := os.MkdirTemp("", "hetgpu-driver-e2e-")
	if err != nil {
		t.Fatal(err)
	}
	pluginDir := filepath.Join(dir, "plugins")
	if err := os.MkdirAll(pluginDir, 0o755); err != nil {
		t.Fatal(err)
	}
	// The agent loads every executable in plugin_dir that a plugin block names.
	data, err := os.ReadFile(bins.driver)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(pluginDir, "nomad-driver-hetgpu"), data, 0o755); err != nil {
		t.Fatal(err)
	}
	httpPort, rpcPort, serfPort := driverE2EFreePort(t), driverE2EFreePort(t), driverE2EFreePort(t)
	cfg := fmt.Sprintf(`
data_dir   = %q
bind_addr  = "127.0.0.1"
plugin_dir = %q
log_level  = "DEBUG"
advertise {
  http = "127.0.0.1"
  rpc  = "127.0.0.1"
  serf = "127.0.0.1"
}
ports {
  http = %d
  rpc  = %d
  serf = %d
}
server {
  enabled          = true
  bootstrap_expect = 1
}
client {
  enabled = true
  servers = ["127.0.0.1:%d"]
  options {
    "fingerprint.denylist" = "env_aws,env_gce,env_azure,env_digitalocean"
  }
}
plugin "nomad-driver-hetgpu" {
  config {
    state_dir       = %q
    sample_interval = "500ms"
  }
}
`, filepath.Join(dir, "data"), pluginDir, httpPort, rpcPort, serfPort, rpcPort, filepath.Join(dir, "driver-state"))
	a := &driverE2EAgent{t: t, nomadBin: nomadBin, dir: dir, cfgPath: filepath.Join(dir, "agent.hcl")}
	if err := os.WriteFile(a.cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	a.logf, err = os.Create(filepath.Join(dir, "agent.log"))
	if err != nil {
		t.Fatal(err)
	}
	apiCfg := api.DefaultConfig()
	apiCfg.Address = fmt.Sprintf("http://127.0.0.1:%d", httpPort)
	if a.client, err = api.NewClient(apiCfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		a.stop()
		a.logf.Close()
		if t.Failed() {
			if b, err := os.ReadFile(a.logf.Name()); err == nil {
				if len(b) > 20000 {
					b = b[len(b)-20000:]
				}
				t.Logf("agent log tail:\n%s", b)
			}
		}
		driverE2ERemoveDir(t, dir)
	})
	a.start()
	return a
}

// start runs the agent (again, on the same data dir) and waits for the driver.
func (a *driverE2EAgent) start() {
	t := a.t
	t.Helper()
	a.cmd = exec.Command(a.nomadBin, "agent", "-config", a.cfgPath)
	a.cmd.Stdout, a.cmd.Stderr = a.logf, a.logf
	a.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := a.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	a.exited = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) { _ = cmd.Wait(); close(done) }(a.cmd, a.exited)
	deadline := time.Now().Add(90 * time.Second)
	for {
		ok, why := driverE2EDriverReady(a.client)
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("hetgpu driver not healthy on the agent after 90s: %s", why)
		}
		select {
		case <-a.exited:
			t.Fatalf("nomad agent exited during start-up (%v)", a.cmd.ProcessState)
		default:
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// stop interrupts the agent like an operator would; the client leaves tasks running.
func (a *driverE2EAgent) stop() {
	if a.cmd == nil || a.cmd.Process == nil {
		return
	}
	_ = a.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-a.exited:
	case <-time.After(20 * time.Second):
		_ = syscall.Kill(-a.cmd.Process.Pid, syscall.SIGKILL)
		<-a.exited
	}
	a.cmd = nil
}

func driverE2EDriverReady(c *api.Client) (bool, string) {
	nodes, _, err := c.Nodes().List(nil)
	if err != nil {
		return false, err.Error()
	}
	if len(nodes) == 0 {
		return false, "no client node yet"
	}
	n, _, err := c.Nodes().Info(nodes[0].ID, nil)
	if err != nil {
		return false, err.Error()
	}
	d := n.Drivers["hetgpu"]
	if d == nil || !d.Detected || !d.Healthy {
		return false, fmt.Sprintf("node %s status %s, hetgpu driver %+v", n.Name, n.Status, d)
	}
	if n.Attributes["driver.hetgpu.version"] == "" {
		return false, "driver.hetgpu.version attribute missing"
	}
	return n.Status == "ready", "node status " + n.Status
}

func driverE2ERegister(t *testing.T, c *api.Client, hcl string) *api.Job {
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

// driverE2EWaitAlloc waits for the job's allocation to reach clientStatus.
func driverE2EWaitAlloc(t *testing.T, c *api.Client, job *api.Job, clientStatus string) *api.Allocation {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var last string
	for ctx.Err() == nil {
		stubs, _, err := c.Jobs().Allocations(*job.ID, false, nil)
		if err == nil && len(stubs) > 0 {
			a, _, err := c.Allocations().Info(stubs[0].ID, nil)
			if err == nil {
				last = a.ClientStatus
				if a.ClientStatus == clientStatus {
					return a
				}
				if a.ClientStatus == "complete" || a.ClientStatus == "failed" || a.ClientStatus == "lost" {
					t.Fatalf("allocation %s ended %s, want %s; task states: %s", a.ID, a.ClientStatus, clientStatus, driverE2EEvents(a))
				}
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Fatalf("job %s: allocation not %s after 90s (last status %q)", *job.ID, clientStatus, last)
	return nil
}

// driverE2EWaitTaskState waits until the job's task is in state ("running", "dead").
func driverE2EWaitTaskState(t *testing.T, c *api.Client, job *api.Job, task, state string) *api.Allocation {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		stubs, _, err := c.Jobs().Allocations(*job.ID, false, nil)
		if err == nil && len(stubs) > 0 {
			if a, _, err := c.Allocations().Info(stubs[0].ID, nil); err == nil {
				if ts := a.TaskStates[task]; ts != nil && ts.State == state {
					return a
				}
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("task %s of %s not %s after 60s", task, *job.ID, state)
	return nil
}

func driverE2EEvents(a *api.Allocation) string {
	var b strings.Builder
	for name, ts := range a.TaskStates {
		for _, ev := range ts.Events {
			fmt.Fprintf(&b, "\n  %s: %s: %s", name, ev.Type, ev.DisplayMessage)
		}
	}
	return b.String()
}

func driverE2EHasEvent(ts *api.TaskState, sub string) bool {
	if ts == nil {
		return false
	}
	for _, ev := range ts.Events {
		if strings.Contains(ev.DisplayMessage+ev.DriverError+ev.ValidationError, sub) {
			return true
		}
	}
	return false
}

// driverE2ELogs reads the task's stdout through the agent (what logmon collected).
func driverE2ELogs(t *testing.T, c *api.Client, a *api.Allocation, task string) string {
	t.Helper()
	cancel := make(chan struct{})
	defer close(cancel)
	frames, errs := c.AllocFS().Logs(a, false, task, "stdout", "start", 0, cancel, nil)
	var b strings.Builder
	timeout := time.After(10 * time.Second)
	for {
		select {
		case f, ok := <-frames:
			if !ok {
				return b.String()
			}
			b.Write(f.Data)
		case err := <-errs:
			if err != nil {
				t.Logf("logs: %v", err)
			}
			return b.String()
		case <-timeout:
			return b.String()
		}
	}
}
