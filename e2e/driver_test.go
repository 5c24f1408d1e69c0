package e2e

import (
	"fmt"
	"path/filepath"
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
	nomadBin := linuxNomadBinary(t, "the hetgpu task driver on a real agent")
	bins := buildBinaries(t, binDriver, binToy)
	a := startDriverAgent(t, nomadBin, bins)
	c := a.API

	t.Run("toy training job completes with telemetry", func(t *testing.T) {
		job := registerJob(t, c, oneShotJob("hetgpu-driver-e2e", "trainers", "train", `
  meta = {
    "hetgpu.model"      = "resnet/ResNet-50"
    "hetgpu.batch_size" = "64"
  }`, toyTask(bins.Toy, `"-steps", "30", "-step-time", "100ms", "-batch", "64"`, "")))
		alloc := waitAlloc(t, c, *job.ID, "complete")
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
		job := registerJob(t, c, oneShotJob("hetgpu-driver-e2e-restart", "g", "t", "", fmt.Sprintf(`
      config {
        command = %q
        args    = ["-steps", "80", "-step-time", "100ms", "-exit-code", "3"]
      }`, bins.Toy)))
		alloc := driverE2EWaitTaskState(t, c, job, "t", "running")
		// Stop the whole agent (client and driver plugin) mid-task, then start it again on
		// the same data dir: the client restores the alloc and calls RecoverTask.
		a.Stop(syscall.SIGINT)
		a.Start()
		driverE2EWaitReady(t, a)
		alloc = waitAlloc(t, c, *job.ID, "failed")
		ts := alloc.TaskStates["t"]
		exitCode := -1
		for _, ev := range ts.Events {
			if ev.Type == api.TaskTerminated {
				exitCode = ev.ExitCode
			}
		}
		if exitCode != 3 {
			t.Errorf("exit code after the restart = %d, want 3; events: %s", exitCode, allocEvents(alloc))
		}
		if !driverE2EHasEvent(ts, "reattached") {
			t.Errorf("no reattach event: %s", allocEvents(alloc))
		}
	})

	t.Run("driver-side config error names the field", func(t *testing.T) {
		job := registerJob(t, c, oneShotJob("hetgpu-driver-e2e-badregex", "g", "t", "", fmt.Sprintf(`
      config {
        command = %q
        metrics {
          regex = "throughput ([0-9.]+)"
        }
      }`, bins.Toy)))
		alloc := waitAlloc(t, c, *job.ID, "failed")
		if !driverE2EHasEvent(alloc.TaskStates["t"], "metrics.regex") {
			t.Errorf("no task event naming metrics.regex: %+v", alloc.TaskStates["t"])
		}
	})

	t.Run("schema error is a Failed Validation naming the field", func(t *testing.T) {
		job := registerJob(t, c, oneShotJob("hetgpu-driver-e2e-nocommand", "g", "t", "", `
      config {
        args = ["x"]
      }`))
		alloc := waitAlloc(t, c, *job.ID, "failed")
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

// oneShotJob is a batch job of one hetgpu task that is neither restarted nor rescheduled:
// head is job-level HCL (meta), task the task block's body after its driver line.
func oneShotJob(id, group, task, head, body string) string {
	return fmt.Sprintf(`
job %q {
  type = "batch"%s
  group %q {
    restart {
      attempts = 0
      mode     = "fail"
    }
    reschedule {
      attempts  = 0
      unlimited = false
    }
    task %q {
      driver = "hetgpu"%s
    }
  }
}`, id, head, group, task, body)
}

// toyTask is the body of a task (after its driver line) that runs the toy trainer with args
// (HCL list items) on 100 MHz and 64 MB, with more HCL inside its resources block (devices).
func toyTask(toy, args, resources string) string {
	return fmt.Sprintf(`
      config {
        command = %q
        args    = [%s]
      }
      resources {
        cpu    = 100
        memory = 64%s
      }`, toy, args, resources)
}

// startDriverAgent starts a server+client agent with the driver installed and waits until the
// node reports the driver healthy.
func startDriverAgent(t *testing.T, nomadBin string, bins binaries) *agent {
	t.Helper()
	dir := agentDir(t, "hetgpu-driver-e2e-")
	pluginDir := filepath.Join(dir, "plugins")
	installPlugins(t, pluginDir, bins.Driver)
	rpcPort := freePort(t)
	a := startAgent(t, nomadBin, dir, "agent", agentConfig{
		DataDir: filepath.Join(dir, "data"), PluginDir: pluginDir, LogLevel: "DEBUG",
		HTTP: freePort(t), RPC: rpcPort, Serf: freePort(t), Server: true,
		Client: true, Servers: []string{fmt.Sprintf("127.0.0.1:%d", rpcPort)},
		Extra: fmt.Sprintf(`
plugin "nomad-driver-hetgpu" {
  config {
    state_dir       = %q
    sample_interval = "500ms"
  }
}
`, filepath.Join(dir, "driver-state")),
	})
	driverE2EWaitReady(t, a)
	return a
}

func driverE2EWaitReady(t *testing.T, a *agent) {
	t.Helper()
	waitNodes(t, a.API, 90*time.Second, 1, []*proc{a.proc}, driverHealthy)
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
