package driver

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/hetgpu/hetgpu/driver/shim"
	"github.com/hetgpu/hetgpu/driver/telemetry"
	"github.com/hetgpu/hetgpu/plugin"
	"github.com/hetgpu/hetgpu/plugin/proto/drivers"
)

// StartTask starts a task in named steps (after nomad-driver-podman): parse and validate the
// config, prepare the task's state directory, resolve its environment and GPUs, set up GPU
// sharing and power limits, its metrics file and cgroup, launch the shim and build the
// handle. A failed step undoes what the earlier steps set up, newest first.
func (d *Driver) StartTask(ctx context.Context, req *drivers.StartTaskRequest) (*drivers.StartTaskResponse, error) {
	s, err := d.parseStart(req)
	if err != nil {
		return nil, err
	}
	defer s.undoUnlessLaunched()
	for _, step := range []func() error{s.resolveUser, s.prepareDir, s.resolveEnvAndGPUs, s.setupSharing, s.applyPowerLimit, s.prepareMetricsFile, s.setupCgroup} {
		if err := step(); err != nil {
			return nil, err
		}
	}
	sh, err := s.launch(ctx)
	if err != nil {
		return nil, err
	}
	return d.startHandle(s, sh)
}

// taskStart is what StartTask's steps learn and set up, and how to undo it.
type taskStart struct {
	d      *Driver
	cfg    *drivers.TaskConfig
	pcfg   PluginConfig
	g      *gpuBackend
	tc     *TaskConfig
	logger hclog.Logger

	cred        *shim.Credential
	dir         string // the task's shim state directory
	workDir     string
	metricsFile string
	env         map[string]string
	gpus        []telemetry.GPU
	gpuIDs      []string
	mpsGPU      string
	cgDir       string
	events      []string // sent once the handle exists

	undo     []func()
	launched bool // the shim runs: nothing is undone any more
}

// parseStart validates the request and decodes the task config (errors here are not retried).
func (d *Driver) parseStart(req *drivers.StartTaskRequest) (*taskStart, error) {
	cfg := req.GetTask()
	if cfg == nil || cfg.GetId() == "" {
		return nil, status.Error(codes.InvalidArgument, "StartTask: task config or task ID missing")
	}
	d.mu.Lock()
	_, dup := d.tasks[cfg.GetId()]
	d.mu.Unlock()
	if dup {
		return nil, status.Errorf(codes.AlreadyExists, "task %q is already started", cfg.GetId())
	}
	pcfg, g, err := d.config()
	if err != nil {
		return nil, plugin.RecoverableError(err, true)
	}
	tc, err := decodeTaskConfig(cfg.GetMsgpackDriverConfig())
	if err != nil {
		return nil, unrecoverable(err)
	}
	logger := d.logger.With("task_id", cfg.GetId(), "task", cfg.GetName(), "alloc_id", cfg.GetAllocId())
	return &taskStart{d: d, cfg: cfg, pcfg: pcfg, g: g, tc: tc, logger: logger}, nil
}

// undoUnlessLaunched rolls back a start that failed before the shim ran.
func (s *taskStart) undoUnlessLaunched() {
	if s.launched {
		return
	}
	for i := len(s.undo) - 1; i >= 0; i-- {
		s.undo[i]()
	}
}

// resolveUser maps the task's user to credentials.
func (s *taskStart) resolveUser() error {
	cred, err := resolveUser(s.cfg.GetUser())
	if err != nil {
		return unrecoverable(err)
	}
	s.cred = cred
	return nil
}

// prepareDir creates a clean shim state directory and picks the working directory and the
// metrics file (in the task's directory of the allocation when Nomad gave one).
func (s *taskStart) prepareDir() error {
	dir := taskShimDir(s.pcfg.StateDir, s.cfg.GetId())
	if err := os.RemoveAll(dir); err != nil {
		return plugin.RecoverableError(fmt.Errorf("clean task state dir: %w", err), true)
	}
	if err := ensurePrivateDir(dir); err != nil {
		return plugin.RecoverableError(err, true)
	}
	s.dir = dir
	s.undo = append(s.undo, func() { _ = os.RemoveAll(dir) })

	taskDir, workDir := dir, "/"
	if ad := s.cfg.GetAllocDir(); ad != "" {
		taskDir, workDir = filepath.Join(ad, s.cfg.GetName()), ad
		if fi, err := os.Stat(taskDir); err == nil && fi.IsDir() {
			workDir = taskDir
		}
	}
	s.workDir = workDir
	s.metricsFile = s.tc.metricsPath(taskDir)
	return nil
}

// resolveEnvAndGPUs builds the task's environment and finds its GPUs in NVML. Nomad merges
// the device plugin's env into env and also passes it as device_env; the latter wins.
func (s *taskStart) resolveEnvAndGPUs() error {
	env := map[string]string{}
	for k, v := range s.cfg.GetEnv() {
		env[k] = v
	}
	for k, v := range s.cfg.GetDeviceEnv() {
		env[k] = v
	}
	env[telemetry.MetricsFileEnv] = s.metricsFile
	s.env = env
	visible := env["NVIDIA_VISIBLE_DEVICES"]
	if visible == "" {
		visible = env["CUDA_VISIBLE_DEVICES"]
	}
	g := s.g
	var gpus []telemetry.GPU
	if g.lib != nil {
		var err error
		gpus, err = telemetry.ResolveGPUs(g.lib, visible)
		if err != nil {
			s.logger.Warn("task GPUs not found in NVML; no GPU telemetry", "error", err)
			s.events = append(s.events, "no GPU telemetry: "+err.Error())
			gpus = nil
		}
	}
	g.setLoad(gpus, fakeTaskUtil)
	s.undo = append(s.undo, func() { g.setLoad(gpus, 0) })
	s.gpus = gpus
	s.gpuIDs = visibleIDs(visible)
	if len(gpus) > 0 {
		s.gpuIDs = s.gpuIDs[:0]
		for _, gp := range gpus {
			s.gpuIDs = append(s.gpuIDs, gp.UUID)
		}
	}
	return nil
}

// setupSharing makes the task an MPS client: of its GPU's per-GPU daemon when it holds GPU
// slots, or of the node's daemon when its config asks for sharing.mps.
func (s *taskStart) setupSharing() error {
	g, pcfg, env := s.g, s.pcfg, s.env
	mpsGPU, mpsEvent, err := attachSlots(g, s.cfg, env)
	if err != nil {
		return err
	}
	if mpsGPU != "" {
		id := s.cfg.GetId()
		s.mpsGPU = mpsGPU
		s.undo = append(s.undo, func() { g.slots.Detach(mpsGPU, id) })
		s.events = append(s.events, mpsEvent)
	}
	sh := s.tc.Sharing
	if sh == nil || !sh.MPS || mpsGPU != "" {
		return nil
	}
	if !g.mps {
		return unrecoverable(fmt.Errorf(`task config field "sharing.mps": true, but MPS is not available on this node (%s)`, g.mpsReason))
	}
	env["CUDA_MPS_PIPE_DIRECTORY"] = pcfg.MPSPipeDir
	env["CUDA_MPS_LOG_DIRECTORY"] = pcfg.MPSLogDir
	if sh.ActiveThreadPct > 0 {
		env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = strconv.Itoa(sh.ActiveThreadPct)
	}
	if g.mode != nvmlFake && g.mode != "injected" {
		if err := ensureMPSDaemon(pcfg.MPSPipeDir, pcfg.MPSLogDir); err != nil {
			return plugin.RecoverableError(fmt.Errorf("sharing.mps: start the MPS control daemon: %w", err), true)
		}
	}
	s.events = append(s.events, fmt.Sprintf("CUDA MPS on (active threads %s)", pctLabel(sh.ActiveThreadPct)))
	return nil
}

// applyPowerLimit caps the task's GPUs at power_limit and records what to restore.
func (s *taskStart) applyPowerLimit() error {
	limit, gpus := s.tc.PowerLimit, s.gpus
	if limit <= 0 {
		return nil
	}
	if len(gpus) == 0 {
		return unrecoverable(fmt.Errorf(`task config field "power_limit": %g W requested, but the task has no GPUs NVML can control (%s)`, limit, s.g.describe()))
	}
	saved, err := telemetry.ApplyPowerLimit(gpus, limit)
	if err != nil {
		return unrecoverable(err)
	}
	// Written right after applying; a crash in between leaves the cap until the next
	// driver restart sets another. The restore is keyed by the value we applied.
	if err := writeJSONFile(filepath.Join(s.dir, powerFile), saved); err != nil {
		_ = telemetry.RestorePowerLimits(gpus, saved)
		return plugin.RecoverableError(fmt.Errorf("record power limits: %w", err), true)
	}
	s.undo = append(s.undo, func() { _ = telemetry.RestorePowerLimits(gpus, saved) })
	s.events = append(s.events, fmt.Sprintf("power limit %g W per GPU on %s (was %g W)", limit, gpuLabel(gpuNames(gpus)), float64(saved[0].PreviousMW)/1000))
	return nil
}

// prepareMetricsFile creates the metrics file the task's user can append to.
func (s *taskStart) prepareMetricsFile() error {
	if err := prepareMetricsFile(s.metricsFile, s.cred); err != nil {
		return unrecoverable(fmt.Errorf(`task config field "metrics.file": %w`, err))
	}
	return nil
}

// setupCgroup creates the task's cgroup, or notes in an event why it runs without limits.
func (s *taskStart) setupCgroup() error {
	cgDir, cgWarn := s.d.setupCgroup(s.cfg, s.logger)
	if cgDir != "" {
		s.cgDir = cgDir
		s.undo = append(s.undo, func() { _ = shim.KillCgroup(cgDir); _ = shim.RemoveCgroup(cgDir) })
	}
	if cgWarn != "" {
		s.events = append(s.events, cgWarn)
	}
	return nil
}

// launch starts the shim, which starts the task; from here on the shim dir must survive.
func (s *taskStart) launch(ctx context.Context) (*shim.Handle, error) {
	spec := &shim.Spec{
		Command:      s.tc.Command,
		Args:         s.tc.Args,
		Env:          envList(s.env),
		Dir:          s.workDir,
		StdoutPath:   s.cfg.GetStdoutPath(),
		StderrPath:   s.cfg.GetStderrPath(),
		Credential:   s.cred,
		CgroupDir:    s.cgDir,
		MetricsFile:  s.metricsFile,
		MetricsRegex: s.tc.metricsRegex(),
	}
	opts := shim.LaunchOptions{Exe: s.d.opts.ShimExe, Args: s.d.opts.ShimArgs, Dir: s.dir, StartTimeout: s.pcfg.StartTimeout}
	sh, err := shim.Launch(ctx, opts, spec)
	if err != nil {
		// A missing command or unreadable log path will not fix itself on retry.
		return nil, unrecoverable(fmt.Errorf("start task: %w%s", err, shimLogTail(s.dir, err)))
	}
	s.launched = true
	return sh, nil
}

// startHandle records the running task, registers its handle, sends the start events and
// starts the monitor.
func (d *Driver) startHandle(s *taskStart, sh *shim.Handle) (*drivers.StartTaskResponse, error) {
	cfg, tc := s.cfg, s.tc
	st := &driverState{Shim: *sh, Config: *tc, GPUs: s.gpuIDs, MetricsFile: s.metricsFile, StartedAt: sh.StartedAt, MPSGPU: s.mpsGPU}
	blob, err := encodeDriverState(st)
	if err != nil {
		_ = sh.Kill()
		return nil, status.Errorf(codes.Internal, "encode driver state: %v", err)
	}
	h := d.newHandle(cfg, st, sh, s.gpus, s.logger)
	d.mu.Lock()
	d.tasks[cfg.GetId()] = h
	d.mu.Unlock()

	h.event(fmt.Sprintf("started %s on %s", filepath.Base(tc.Command), gpuLabel(gpuNames(s.gpus))),
		map[string]string{"pid": strconv.Itoa(sh.TaskPID), "gpus": strings.Join(s.gpuIDs, ",")})
	for _, e := range s.events {
		h.event(e, nil)
	}
	d.startMonitor(h, s.pcfg.SampleInterval)

	return &drivers.StartTaskResponse{
		Result: drivers.StartTaskResponse_SUCCESS,
		Handle: &drivers.TaskHandle{Version: taskHandleVersion, Config: cfg, State: drivers.TaskState_RUNNING, DriverState: blob},
	}, nil
}

// shimLogTail quotes the end of the shim's log for an error message (the directory is
// removed after a failed start).
func shimLogTail(dir string, err error) string {
	if !strings.Contains(err.Error(), shim.LogFile) {
		return "" // the error already says it all
	}
	b, err := os.ReadFile(filepath.Join(dir, shim.LogFile))
	if err != nil || len(b) == 0 {
		return ""
	}
	if len(b) > 400 {
		b = b[len(b)-400:]
	}
	return " (shim log: " + strings.TrimSpace(string(b)) + ")"
}

func gpuNames(gpus []telemetry.GPU) []string {
	out := make([]string, len(gpus))
	for i, g := range gpus {
		out[i] = g.Name
	}
	return out
}

func pctLabel(p int) string {
	if p <= 0 {
		return "uncapped"
	}
	return strconv.Itoa(p) + "%"
}

// visibleIDs splits NVIDIA_VISIBLE_DEVICES into IDs ("all", "none", "void" and "" give none
// we can name).
func visibleIDs(v string) []string {
	switch strings.TrimSpace(v) {
	case "", "all", "none", "void":
		return nil
	}
	var out []string
	for id := range strings.SplitSeq(v, ",") {
		if id = strings.TrimSpace(id); id != "" {
			out = append(out, id)
		}
	}
	return out
}

func envList(env map[string]string) []string {
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	slices.Sort(out)
	return out
}

// resolveUser maps the task's user to uid, gid and groups. Switching users needs root.
func resolveUser(name string) (*shim.Credential, error) {
	if name == "" {
		return nil, nil
	}
	if os.Geteuid() != 0 {
		if cur, err := user.Current(); err == nil && cur.Username == name {
			return nil, nil
		}
		return nil, fmt.Errorf("task field \"user\" = %q: the driver runs as uid %d, not root, and cannot run tasks as another user; remove user or run the Nomad client as root", name, os.Geteuid())
	}
	u, err := user.Lookup(name)
	if err != nil {
		return nil, fmt.Errorf("task field \"user\" = %q: %w", name, err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		return nil, fmt.Errorf("task field \"user\" = %q: non-numeric uid %q or gid %q", name, u.Uid, u.Gid)
	}
	c := &shim.Credential{Username: name, UID: uint32(uid), GID: uint32(gid)}
	if ids, err := u.GroupIds(); err == nil {
		for _, s := range ids {
			if g, err := strconv.ParseUint(s, 10, 32); err == nil {
				c.Groups = append(c.Groups, uint32(g))
			}
		}
	}
	return c, nil
}

// prepareMetricsFile creates the metrics file (and its directory) so the task, possibly
// running as another user, can append to it.
func prepareMetricsFile(path string, cred *shim.Credential) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	f.Close()
	if cred != nil {
		return os.Chown(path, int(cred.UID), int(cred.GID))
	}
	return nil
}

// ensureMPSDaemon starts nvidia-cuda-mps-control in daemon mode unless its control pipe
// exists.
func ensureMPSDaemon(pipeDir, logDir string) error {
	if _, err := os.Stat(filepath.Join(pipeDir, "control")); err == nil {
		return nil
	}
	for _, dir := range []string{pipeDir, logDir} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	cmd := exec.Command("nvidia-cuda-mps-control", "-d")
	cmd.Env = append(os.Environ(), "CUDA_MPS_PIPE_DIRECTORY="+pipeDir, "CUDA_MPS_LOG_DIRECTORY="+logDir)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%w: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// setupCgroup creates the task's cgroup v2 with Nomad's limits. Without cgroup v2 (or root)
// the task runs without limits and the returned warning says why.
func (d *Driver) setupCgroup(cfg *drivers.TaskConfig, logger hclog.Logger) (dir, warning string) {
	root := d.opts.CgroupRoot
	if _, err := shim.CgroupV2Controllers(root); err != nil {
		return "", "memory and CPU limits not enforced: " + err.Error()
	}
	if os.Geteuid() != 0 {
		return "", "memory and CPU limits not enforced: the driver is not root"
	}
	d.mu.Lock()
	parent := d.cfg.CgroupParent
	d.mu.Unlock()
	dir = filepath.Join(root, parent, sanitizeID(cfg.GetId())+".scope")
	lr := cfg.GetResources().GetLinuxResources()
	if p := lr.GetCpusetCgroup(); p != "" && filepath.IsAbs(p) {
		if rel, err := filepath.Rel(root, p); err == nil && rel != "." && !strings.HasPrefix(rel, "..") {
			dir = p // the cgroup Nomad reserved for this task (its cpuset partition)
		}
	}
	ar := cfg.GetResources().GetAllocatedResources()
	var l shim.CgroupLimits
	memMB, maxMB := ar.GetMemory().GetMemoryMb(), ar.GetMemory().GetMemoryMaxMb()
	switch {
	case maxMB > memMB && memMB > 0:
		l.MemoryMaxBytes, l.MemoryLowBytes = maxMB<<20, memMB<<20
	case memMB > 0:
		l.MemoryMaxBytes = memMB << 20
	case lr.GetMemoryLimitBytes() > 0:
		l.MemoryMaxBytes = lr.GetMemoryLimitBytes()
	}
	shares := ar.GetCpu().GetCpuShares()
	if shares == 0 {
		shares = lr.GetCpuShares()
	}
	l.CPUWeight = shim.CPUWeightFromShares(shares)
	l.CPUQuotaUS, l.CPUPeriodUS = lr.GetCpuQuota(), lr.GetCpuPeriod()
	l.Cpuset = lr.GetCpusetCpus()
	warns, err := shim.CreateCgroup(root, dir, l)
	if err != nil {
		logger.Warn("cgroup not created; running without limits", "error", err)
		return "", "memory and CPU limits not enforced: " + err.Error()
	}
	for _, w := range warns {
		logger.Warn("cgroup limit not applied", "detail", w)
	}
	if len(warns) > 0 {
		return dir, "some cgroup limits not applied: " + strings.Join(warns, "; ")
	}
	return dir, ""
}
