package driver

import (
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	goversion "github.com/hashicorp/go-version"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/hetgpu/hetgpu/device/fake"
	"github.com/hetgpu/hetgpu/model/gpuspec"
	"github.com/hetgpu/hetgpu/plugin"
	"github.com/hetgpu/hetgpu/plugin/plugintest"
	"github.com/hetgpu/hetgpu/plugin/proto/base"
	"github.com/hetgpu/hetgpu/plugin/proto/drivers"
)

// These tests run the BUILT nomad-driver-hetgpu the way the Nomad client does: go-plugin
// with Nomad's handshake over gRPC, config encoded from HCL with the schema the plugin
// itself returns.

type launched struct {
	*plugin.Launched
	stateDir string
}

// firstFingerprint is the first message of the driver's fingerprint stream.
func (l *launched) firstFingerprint(t *testing.T, ctx context.Context) *drivers.FingerprintResponse {
	t.Helper()
	fp, err := l.Driver.Fingerprint(ctx, &drivers.FingerprintRequest{})
	return plugintest.First(t, fp, err)
}

func launchBinary(t *testing.T, stateDir, extraConfig string) *launched {
	t.Helper()
	bin, _ := binaries(t)
	l, err := plugin.Launch(exec.Command(bin), hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Kill)
	ctx := context.Background()
	schema, err := l.Base.ConfigSchema(ctx, &base.ConfigSchemaRequest{})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := plugin.EncodeHCLConfig(schema.GetSpec(), []byte(fmt.Sprintf("state_dir = %q\nsample_interval = \"200ms\"\n%s", stateDir, extraConfig)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Base.SetConfig(ctx, &base.SetConfigRequest{MsgpackConfig: cfg, PluginApiVersion: plugin.APIVersion}); err != nil {
		t.Fatal(err)
	}
	return &launched{Launched: l, stateDir: stateDir}
}

// taskConfigBytes encodes a job's config block with the schema the driver serves.
func taskConfigBytes(t *testing.T, c drivers.DriverClient, src string) []byte {
	t.Helper()
	schema, err := c.TaskConfigSchema(context.Background(), &drivers.TaskConfigSchemaRequest{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := plugin.EncodeHCLConfig(schema.GetSpec(), []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func waitTask(t *testing.T, c drivers.DriverClient, id string, d time.Duration) *drivers.WaitTaskResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	resp, err := c.WaitTask(ctx, &drivers.WaitTaskRequest{TaskId: id})
	if err != nil {
		t.Fatalf("WaitTask: %v", err)
	}
	return resp
}

func TestBinaryPluginInfoAndSchemas(t *testing.T) {
	l := launchBinary(t, t.TempDir(), "")
	ctx := context.Background()
	info, err := l.Base.PluginInfo(ctx, &base.PluginInfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if info.GetName() != "hetgpu" || info.GetType() != base.PluginType_DRIVER || len(info.GetPluginApiVersions()) != 1 ||
		info.GetPluginApiVersions()[0] != "v0.1.0" {
		t.Fatalf("PluginInfo = %v", info)
	}
	if _, err := goversion.NewVersion(info.GetPluginVersion()); err != nil {
		t.Fatalf("plugin_version %q does not parse: %v", info.GetPluginVersion(), err)
	}
	for name, get := range map[string]func() (any, error){
		"ConfigSchema": func() (any, error) {
			r, err := l.Base.ConfigSchema(ctx, &base.ConfigSchemaRequest{})
			if err != nil {
				return nil, err
			}
			return plugin.HCLDecSpec(r.GetSpec())
		},
		"TaskConfigSchema": func() (any, error) {
			r, err := l.Driver.TaskConfigSchema(ctx, &drivers.TaskConfigSchemaRequest{})
			if err != nil {
				return nil, err
			}
			return plugin.HCLDecSpec(r.GetSpec())
		},
	} {
		if _, err := get(); err != nil {
			t.Errorf("%s does not convert like the agent converts it: %v", name, err)
		}
	}
	caps, err := l.Driver.Capabilities(ctx, &drivers.CapabilitiesRequest{})
	if err != nil || !caps.GetCapabilities().GetSendSignals() {
		t.Fatalf("Capabilities = %v, %v", caps, err)
	}
	first := l.firstFingerprint(t, ctx)
	if first.GetHealth() != drivers.FingerprintResponse_HEALTHY {
		t.Errorf("health = %v (%s), want HEALTHY without a GPU", first.GetHealth(), first.GetHealthDescription())
	}
	attrs := first.GetAttributes()
	if attrs["driver.hetgpu.version"].GetStringVal() == "" || attrs["driver.hetgpu.nvml"] == nil || attrs["driver.hetgpu.mps"] == nil {
		t.Errorf("attributes = %v", attrs)
	}
	// This machine has no GPU: NVML must say so rather than fail the driver.
	if attrs["driver.hetgpu.nvml"].GetBoolVal() {
		t.Log("NVML available on this machine")
	} else if !strings.Contains(first.GetHealthDescription(), "no GPU telemetry") {
		t.Errorf("health description %q does not say why there is no telemetry", first.GetHealthDescription())
	}
}

// The full lifecycle against the built binary, with Nomad's log FIFOs.
func TestBinaryLifecycle(t *testing.T) {
	_, toy := binaries(t)
	sc := newFakeSidecar(t)
	l := launchBinary(t, t.TempDir(), fmt.Sprintf("sidecar_addr = %q\n", sc.srv.URL))
	ctx := context.Background()
	events := collectEvents(t, l.Driver)

	cfg := testTask(t, "life", taskConfigBytes(t, l.Driver, fmt.Sprintf(`
command = %q
args    = ["-steps", "15", "-step-time", "60ms", "-batch", "32", "-log-every", "5"]
`, toy)))
	cfg.DeviceEnv = map[string]string{"NVIDIA_VISIBLE_DEVICES": "GPU-1111", "CUDA_VISIBLE_DEVICES": "GPU-1111"}
	// Nomad's log collector reads FIFOs; stand in for it.
	stdout := readFIFO(t, cfg.StdoutPath)
	_ = readFIFO(t, cfg.StderrPath)

	start, err := l.Driver.StartTask(ctx, &drivers.StartTaskRequest{Task: cfg})
	if err != nil {
		t.Fatal(err)
	}
	h := start.GetHandle()
	if h.GetVersion() < 1 || h.GetState() != drivers.TaskState_RUNNING || len(h.GetDriverState()) == 0 || h.GetConfig().GetId() != cfg.Id {
		t.Fatalf("handle = %v", h)
	}
	events.waitMessage(t, "started hetgpu-toy-train")

	insp, err := l.Driver.InspectTask(ctx, &drivers.InspectTaskRequest{TaskId: cfg.Id})
	if err != nil || insp.GetTask().GetState() != drivers.TaskState_RUNNING || insp.GetDriver().GetAttributes()["pid"] == "" {
		t.Fatalf("InspectTask running = %v, %v", insp, err)
	}
	stats, err := l.Driver.TaskStats(ctx, &drivers.TaskStatsRequest{TaskId: cfg.Id, CollectionInterval: durationpb.New(100 * time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		m, err := stats.Recv()
		if err != nil {
			t.Fatal(err)
		}
		s := m.GetStats()
		if s.GetTimestamp() == nil || s.GetId() != cfg.Id || len(s.GetResourceUsageByPid()) == 0 || s.GetAggResourceUsage().GetMemory().GetRss() == 0 {
			t.Fatalf("stats message %d = %v", i, s)
		}
	}

	res := waitTask(t, l.Driver, cfg.Id, 20*time.Second)
	if res.GetErr() != "" || res.GetResult().GetExitCode() != 0 || res.GetResult().GetSignal() != 0 {
		t.Fatalf("WaitTask = %v", res)
	}
	measured := events.waitMessage(t, "measured ")
	if !strings.Contains(measured.GetMessage(), "samples/s") || measured.GetTaskId() != cfg.Id || measured.GetTimestamp() == nil {
		t.Errorf("measured event = %v", measured)
	}
	events.waitMessage(t, "finished after")

	insp, err = l.Driver.InspectTask(ctx, &drivers.InspectTaskRequest{TaskId: cfg.Id})
	if err != nil || insp.GetTask().GetState() != drivers.TaskState_EXITED || insp.GetTask().GetCompletedAt() == nil {
		t.Fatalf("InspectTask exited = %v, %v", insp, err)
	}
	out := stdout()
	if !strings.Contains(out, `NVIDIA_VISIBLE_DEVICES="GPU-1111"`) || !strings.Contains(out, "step 15/15") {
		t.Errorf("task stdout (through the FIFO) = %q", out)
	}

	obs := sc.waitFor(t, 1)[0]
	if obs.JobID != "job-life" || obs.Group != "trainers" || obs.Task != "train" || obs.GPUs != 1 || obs.ExitCode != 0 ||
		obs.ModelFamily != "resnet" || obs.ModelName != "ResNet-50" || obs.BatchSize != 32 || obs.RuntimeS < 0.8 {
		t.Errorf("observation = %+v", obs)
	}
	// A run that finished on its own: keyed by its allocation, complete, all 15 steps.
	if obs.AllocID != cfg.AllocId || obs.Partial || obs.Steps != 15 {
		t.Errorf("alloc_id %q (want %q), partial %v, steps %v (want 15)", obs.AllocID, cfg.AllocId, obs.Partial, obs.Steps)
	}
	// 32 samples per ~60 ms step.
	if obs.SamplesPerSec < 300 || obs.SamplesPerSec > 700 {
		t.Errorf("throughput = %v samples/s, want about 530", obs.SamplesPerSec)
	}

	if _, err := l.Driver.DestroyTask(ctx, &drivers.DestroyTaskRequest{TaskId: cfg.Id}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(taskShimDir(l.stateDir, cfg.Id)); !os.IsNotExist(err) {
		t.Errorf("task state dir left behind: %v", err)
	}
	if _, err := l.Driver.InspectTask(ctx, &drivers.InspectTaskRequest{TaskId: cfg.Id}); status.Code(err) != codes.NotFound {
		t.Errorf("InspectTask after destroy: %v", err)
	}
}

// readFIFO makes path a FIFO and drains it in the background like Nomad's logmon; the
// returned func gives what was read so far once the writer closed.
func readFIFO(t *testing.T, path string) func() string {
	t.Helper()
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan string, 1)
	go func() {
		b, _ := os.ReadFile(path) // blocks until a writer opens, returns at its close
		done <- string(b)
	}()
	return func() string {
		select {
		case s := <-done:
			return s
		case <-time.After(10 * time.Second):
			t.Fatal("FIFO writer never closed")
			return ""
		}
	}
}

// Kill the driver process mid-task, start a new one, RecoverTask, and get the right exit
// code: for a task that is still running, and for one that ended while no driver ran.
func TestBinaryRecoverAfterDriverKilled(t *testing.T) {
	_, toy := binaries(t)
	for _, tc := range []struct {
		name         string
		steps        string
		exitCode     int32
		waitTaskDone bool
	}{
		{"task still running", "25", 7, false},
		{"task exited while the driver was down", "3", 5, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc := newFakeSidecar(t)
			stateDir := t.TempDir()
			extra := fmt.Sprintf("sidecar_addr = %q\n", sc.srv.URL)
			l1 := launchBinary(t, stateDir, extra)
			cfg := testTask(t, "recover", taskConfigBytes(t, l1.Driver, fmt.Sprintf(`
command = %q
args    = ["-steps", %q, "-step-time", "100ms", "-exit-code", "%d"]
`, toy, tc.steps, tc.exitCode)))
			cfg.DeviceEnv = map[string]string{"NVIDIA_VISIBLE_DEVICES": "GPU-2222"}
			start, err := l1.Driver.StartTask(context.Background(), &drivers.StartTaskRequest{Task: cfg})
			if err != nil {
				t.Fatal(err)
			}
			st, err := decodeDriverState(start.GetHandle().GetDriverState())
			if err != nil {
				t.Fatal(err)
			}
			// Crash the driver: SIGKILL, no shutdown.
			driverPID := l1.Client.ReattachConfig().Pid
			if err := syscall.Kill(driverPID, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			l1.Kill()
			if !pidAlive(st.Shim.TaskPID) && !tc.waitTaskDone {
				t.Fatal("task died with the driver")
			}
			if tc.waitTaskDone {
				deadline := time.Now().Add(10 * time.Second)
				for pidAlive(st.Shim.TaskPID) {
					if time.Now().After(deadline) {
						t.Fatal("task did not finish")
					}
					time.Sleep(50 * time.Millisecond)
				}
			}

			l2 := launchBinary(t, stateDir, extra)
			events := collectEvents(t, l2.Driver)
			if _, err := l2.Driver.RecoverTask(context.Background(), &drivers.RecoverTaskRequest{TaskId: cfg.Id, Handle: start.GetHandle()}); err != nil {
				t.Fatalf("RecoverTask: %v", err)
			}
			if !tc.waitTaskDone {
				insp, err := l2.Driver.InspectTask(context.Background(), &drivers.InspectTaskRequest{TaskId: cfg.Id})
				if err != nil || insp.GetTask().GetState() != drivers.TaskState_RUNNING {
					t.Fatalf("InspectTask after recovery = %v, %v", insp, err)
				}
			}
			res := waitTask(t, l2.Driver, cfg.Id, 20*time.Second)
			if res.GetResult().GetExitCode() != tc.exitCode || res.GetErr() != "" {
				t.Fatalf("WaitTask after recovery = %v, want exit code %d", res, tc.exitCode)
			}
			events.waitMessage(t, "finished after")
			obs := sc.waitFor(t, 1)
			if obs[0].ExitCode != int(tc.exitCode) || obs[0].JobID != "job-recover" {
				t.Errorf("observation = %+v", obs[0])
			}
			// Recovering again (a client restart) is a no-op, and nothing is reported twice.
			if _, err := l2.Driver.RecoverTask(context.Background(), &drivers.RecoverTaskRequest{TaskId: cfg.Id, Handle: start.GetHandle()}); err != nil {
				t.Fatalf("second RecoverTask: %v", err)
			}
			time.Sleep(200 * time.Millisecond)
			if n := len(sc.waitFor(t, 1)); n != 1 {
				t.Errorf("%d observations, want 1", n)
			}
		})
	}
}

func TestBinaryStopEscalation(t *testing.T) {
	_, toy := binaries(t)
	sc := newFakeSidecar(t)
	l := launchBinary(t, t.TempDir(), fmt.Sprintf("sidecar_addr = %q\n", sc.srv.URL))
	events := collectEvents(t, l.Driver)
	ctx := context.Background()

	t.Run("graceful", func(t *testing.T) {
		cfg := testTask(t, "graceful", taskConfigBytes(t, l.Driver, fmt.Sprintf(`
command = %q
args    = ["-steps", "1000", "-step-time", "50ms", "-batch", "32"]
`, toy)))
		cfg.DeviceEnv = map[string]string{"NVIDIA_VISIBLE_DEVICES": "GPU-1111", "CUDA_VISIBLE_DEVICES": "GPU-1111"}
		if _, err := l.Driver.StartTask(ctx, &drivers.StartTaskRequest{Task: cfg}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(700 * time.Millisecond)
		if _, err := l.Driver.StopTask(ctx, &drivers.StopTaskRequest{TaskId: cfg.Id, Timeout: durationpb.New(5 * time.Second), Signal: "SIGTERM"}); err != nil {
			t.Fatal(err)
		}
		res := waitTask(t, l.Driver, cfg.Id, 5*time.Second)
		if res.GetResult().GetExitCode() != 0 || res.GetResult().GetSignal() != 0 {
			t.Fatalf("graceful stop result = %v", res)
		}
		out, _ := os.ReadFile(cfg.StdoutPath)
		if !strings.Contains(string(out), "received terminated") {
			t.Errorf("stdout = %q", out)
		}
		// It exited 0, but Nomad stopped it: a partial run, with the steps it did.
		obs := sc.waitFor(t, 1)[0]
		if !obs.Partial || obs.ExitCode != 0 || obs.AllocID != cfg.AllocId || obs.Steps <= 0 || obs.Steps >= 1000 {
			t.Errorf("record of a stopped run: partial %v, exit %d, alloc %q, steps %v", obs.Partial, obs.ExitCode, obs.AllocID, obs.Steps)
		}
	})

	t.Run("SIGKILL after the timeout", func(t *testing.T) {
		cfg := testTask(t, "stubborn", taskConfigBytes(t, l.Driver, fmt.Sprintf(`
command = %q
args    = ["-steps", "1000", "-step-time", "50ms", "-ignore-signals"]
`, toy)))
		if _, err := l.Driver.StartTask(ctx, &drivers.StartTaskRequest{Task: cfg}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond)
		const timeout = 400 * time.Millisecond
		began := time.Now()
		if _, err := l.Driver.StopTask(ctx, &drivers.StopTaskRequest{TaskId: cfg.Id, Timeout: durationpb.New(timeout), Signal: "SIGINT"}); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(began); took < timeout {
			t.Errorf("StopTask returned after %v, before the %v timeout", took, timeout)
		}
		res := waitTask(t, l.Driver, cfg.Id, 5*time.Second)
		if res.GetResult().GetSignal() != int32(syscall.SIGKILL) || res.GetResult().GetExitCode() != 137 {
			t.Fatalf("result = %v, want SIGKILL (137)", res)
		}
		events.waitMessage(t, "sending SIGKILL")
		if _, err := l.Driver.DestroyTask(ctx, &drivers.DestroyTaskRequest{TaskId: cfg.Id}); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("destroy running needs force", func(t *testing.T) {
		cfg := testTask(t, "forced", taskConfigBytes(t, l.Driver, fmt.Sprintf(`
command = %q
args    = ["-steps", "1000", "-step-time", "50ms"]
`, toy)))
		start, err := l.Driver.StartTask(ctx, &drivers.StartTaskRequest{Task: cfg})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.Driver.DestroyTask(ctx, &drivers.DestroyTaskRequest{TaskId: cfg.Id}); status.Code(err) != codes.FailedPrecondition {
			t.Fatalf("DestroyTask without force on a running task: %v", err)
		}
		if _, err := l.Driver.SignalTask(ctx, &drivers.SignalTaskRequest{TaskId: cfg.Id, Signal: "SIGBOGUS"}); status.Code(err) != codes.InvalidArgument {
			t.Errorf("SignalTask with a bad signal: %v", err)
		}
		if _, err := l.Driver.DestroyTask(ctx, &drivers.DestroyTaskRequest{TaskId: cfg.Id, Force: true}); err != nil {
			t.Fatal(err)
		}
		st, _ := decodeDriverState(start.GetHandle().GetDriverState())
		if pidAlive(st.Shim.TaskPID) {
			t.Fatal("task alive after forced destroy")
		}
	})
}

func TestBinaryBadConfig(t *testing.T) {
	_, toy := binaries(t)
	l := launchBinary(t, t.TempDir(), "")
	ctx := context.Background()
	for _, tc := range []struct {
		name, src, want string
	}{
		{"regex without named group", `command = "/bin/true"
metrics { regex = "rate ([0-9]+)" }`, "metrics.regex"},
		{"thread pct without mps", `command = "/bin/true"
sharing { active_thread_pct = 30 }`, "sharing.active_thread_pct"},
		{"power limit without GPUs", `command = "/bin/true"
power_limit = 200`, "power_limit"},
		{"metrics file outside the task dir", `command = "/bin/true"
metrics { file = "../../../../etc/cron.d/x" }`, "metrics.file"},
		{"command not found", `command = "no-such-trainer"`, `"no-such-trainer": not found`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testTask(t, "bad", taskConfigBytes(t, l.Driver, tc.src))
			_, err := l.Driver.StartTask(ctx, &drivers.StartTaskRequest{Task: cfg})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("StartTask error = %v, want one naming %q", err, tc.want)
			}
			if rec, ok := plugin.IsRecoverable(err); !ok || rec {
				t.Errorf("error is not an unrecoverable RecoverableError status: %v", err)
			}
			if _, err := os.Stat(taskShimDir(l.stateDir, cfg.Id)); !os.IsNotExist(err) {
				t.Errorf("failed start left its state dir: %v", err)
			}
		})
	}
	// Schema-level errors never reach the driver: Nomad fails the HCL parse ("Failed
	// Validation"), and the message names the attribute.
	schema, err := l.Driver.TaskConfigSchema(ctx, &drivers.TaskConfigSchemaRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := plugin.EncodeHCLConfig(schema.GetSpec(), []byte(`args = ["x"]`)); err == nil || !strings.Contains(err.Error(), "command") {
		t.Errorf("missing command: %v", err)
	}
	if _, err := plugin.EncodeHCLConfig(schema.GetSpec(), []byte(fmt.Sprintf("command = %q\npower_limit = \"max\"", toy))); err == nil || !strings.Contains(err.Error(), "power_limit") {
		t.Errorf("string power_limit: %v", err)
	}
	// A bad plugin config is refused at SetConfig, naming the field.
	bad, err := plugin.EncodeHCLConfig(pluginConfigSpec(), []byte(`nvml = "sometimes"`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Base.SetConfig(ctx, &base.SetConfigRequest{MsgpackConfig: bad}); err == nil || !strings.Contains(err.Error(), `"nvml"`) {
		t.Errorf("SetConfig with a bad nvml: %v", err)
	}
}

// With nvml = "fake" the built driver poses as the device plugin's fake GPUs (same UUIDs for
// the same GPU list and seed), samples them and reports the modelled power.
func TestBinaryFakeGPUs(t *testing.T) {
	_, toy := binaries(t)
	gpus := []string{"2x A100-SXM4-40GB"}
	fleet, err := fake.New(fake.Spec{GPUs: gpus, Seed: "node-a"})
	if err != nil {
		t.Fatal(err)
	}
	uuids := fleet.UUIDs()
	fleet.Close()
	sc := newFakeSidecar(t)
	l := launchBinary(t, t.TempDir(), fmt.Sprintf("sidecar_addr = %q\nnvml = \"fake\"\nfake_gpus = [\"2x A100-SXM4-40GB\"]\nfake_seed = \"node-a\"\n", sc.srv.URL))
	ctx := context.Background()
	first := l.firstFingerprint(t, ctx)
	if first.GetHealth() != drivers.FingerprintResponse_HEALTHY || first.GetAttributes()["driver.hetgpu.gpus"].GetIntVal() != 2 {
		t.Fatalf("fingerprint = %v", first)
	}
	events := collectEvents(t, l.Driver)
	cfg := testTask(t, "fake", taskConfigBytes(t, l.Driver, fmt.Sprintf(`
command = %q
args    = ["-steps", "15", "-step-time", "100ms"]
metrics {
  regex = "throughput (?P<samples_per_sec>[0-9.]+) samples/s"
  file  = "local/from-stdout.jsonl"
}
`, toy)))
	cfg.DeviceEnv = map[string]string{"NVIDIA_VISIBLE_DEVICES": strings.Join(uuids, ",")}
	if _, err := l.Driver.StartTask(ctx, &drivers.StartTaskRequest{Task: cfg}); err != nil {
		t.Fatal(err)
	}
	events.waitMessage(t, "started hetgpu-toy-train on 2x A100-SXM4-40GB")
	if res := waitTask(t, l.Driver, cfg.Id, 20*time.Second); res.GetResult().GetExitCode() != 0 {
		t.Fatalf("result = %v", res)
	}
	obs := sc.waitFor(t, 1)[0]
	spec, ok := gpuspec.Default().Lookup("a100")
	if !ok {
		t.Fatal("no a100 in the datasheet table")
	}
	// Busy at 85 % utilisation under the fake's power model, on both GPUs.
	want := 2 * spec.Power(0.85, fake.DefaultPowerAlpha)
	if obs.GPUType != "a100" || obs.GPUs != 2 || math.Abs(obs.AvgPowerW-want)/want > 0.15 || obs.EnergyJ <= 0 {
		t.Errorf("observation = %+v, want avg power about %.0f W", obs, want)
	}
	// The regex mode: the toy logs "throughput N samples/s" every 10 steps.
	if obs.SamplesPerSec < 400 || obs.SamplesPerSec > 800 {
		t.Errorf("throughput from stdout = %v, want about 640", obs.SamplesPerSec)
	}
	m, err := os.ReadFile(filepath.Join(cfg.AllocDir, "train", "local", "from-stdout.jsonl"))
	if err != nil || !strings.Contains(string(m), `"samples_per_sec"`) {
		t.Errorf("metrics file from stdout = %q, %v", m, err)
	}
}
