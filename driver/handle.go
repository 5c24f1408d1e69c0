package driver

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/hetgpu/hetgpu/driver/shim"
	"github.com/hetgpu/hetgpu/driver/telemetry"
	"github.com/hetgpu/hetgpu/internal/mpsshare"
	"github.com/hetgpu/hetgpu/model/cluster"
	"github.com/hetgpu/hetgpu/model/gpuspec"
	"github.com/hetgpu/hetgpu/plugin/proto/drivers"
)

// checkpointEvery is how many sampling periods pass between telemetry checkpoints.
const checkpointEvery = 5

// measuredEventGap is the least time between two "measured" events; a new one needs the
// throughput to move by more than measuredEventChange.
const (
	measuredEventGap    = time.Minute
	measuredEventChange = 0.10
)

// deferredEventDelay is how long the reattach event waits for the restarted client to
// register the allocation's event handler.
const deferredEventDelay = 3 * time.Second

// taskHandle is one task this driver process watches: its shim, its telemetry and, once it
// exited, its result.
type taskHandle struct {
	d      *Driver
	gpu    *gpuBackend
	logger hclog.Logger
	cfg    *drivers.TaskConfig
	st     *driverState
	shim   *shim.Handle
	ann    annotations

	gpus     []telemetry.GPU
	sampler  *telemetry.Sampler
	tail     *telemetry.Tail
	progress *telemetry.Progress

	mu             sync.Mutex
	state          drivers.TaskState
	exit           *drivers.ExitResult
	exitErr        error
	completedAt    time.Time
	lastReported   float64
	lastReportedAt time.Time
	summary        telemetry.Summary
	// coSeen holds the MPS co-runners seen on the task's GPU, by task ID (slot tasks).
	coSeen map[string]mpsshare.Client

	// deferredEvent is sent deferredEventDelay after the monitor starts (or before the
	// finish event, whichever comes first).
	deferredEvent string

	// stopRequested is set once Nomad asked to stop or kill the task: whatever its exit code,
	// such a run did not finish its work and is reported partial.
	stopRequested atomic.Bool

	// done is closed when the exit is recorded and the run is reported; monitorDone when
	// the monitor stopped (after done, or at driver shutdown while the task keeps running).
	done        chan struct{}
	monitorDone chan struct{}
}

// newHandle builds the handle of a started or recovered task.
func (d *Driver) newHandle(cfg *drivers.TaskConfig, st *driverState, sh *shim.Handle, gpus []telemetry.GPU, logger hclog.Logger) *taskHandle {
	d.mu.Lock()
	g := d.gpu
	d.mu.Unlock()
	sampler := telemetry.NewSampler(gpus)
	if st.MPSGPU != "" && g != nil && g.slots != nil {
		u := &utilShare{lib: g.lib, mgr: g.slots, gpu: st.MPSGPU, taskID: cfg.GetId(), tree: procTree(d.opts.ProcRoot)}
		c, err := g.slots.SetPID(st.MPSGPU, cfg.GetId(), sh.TaskPID)
		if err != nil {
			logger.Warn("MPS client PID not recorded: its energy falls back to the thread-cap split", "error", err)
		}
		g.setProcessLoad(st.MPSGPU, sh.TaskPID, mpsshare.FakeClientLoad(fakeTaskUtil, c.ThreadPct))
		sampler.SetShare(u.share)
	}
	return &taskHandle{
		d: d, gpu: g, logger: logger, cfg: cfg, st: st, shim: sh, ann: parseAnnotations(cfg.GetEnv()),
		gpus: gpus, sampler: sampler, tail: telemetry.NewTail(st.MetricsFile),
		progress: telemetry.NewProgress(st.StartedAt), state: drivers.TaskState_RUNNING,
		done: make(chan struct{}), monitorDone: make(chan struct{}),
	}
}

// startMonitor starts watching the task until it exits or the driver shuts down.
func (d *Driver) startMonitor(h *taskHandle, interval time.Duration) {
	for _, p := range h.ann.Problems {
		h.logger.Warn("hetgpu annotation ignored", "problem", p)
	}
	go h.monitor(d.ctx, interval)
}

func (h *taskHandle) dir() string { return h.st.Shim.Dir }

// gpuLabel is "2x A100-SXM4-40GB" (or "1x T4 + 1x V100"), for events.
func gpuLabel(names []string) string {
	if len(names) == 0 {
		return "no GPUs"
	}
	count := map[string]int{}
	var order []string
	for _, n := range names {
		n = strings.TrimSpace(strings.TrimPrefix(strings.TrimPrefix(n, "NVIDIA "), "Tesla "))
		if n == "" {
			n = "unknown GPU"
		}
		if count[n] == 0 {
			order = append(order, n)
		}
		count[n]++
	}
	parts := make([]string, len(order))
	for i, n := range order {
		parts[i] = fmt.Sprintf("%dx %s", count[n], n)
	}
	return strings.Join(parts, " + ")
}

func (h *taskHandle) gpuNames() []string {
	names := make([]string, len(h.gpus))
	for i, g := range h.gpus {
		names[i] = g.Name
	}
	return names
}

func formatRate(v float64) string {
	if v >= 100 {
		return strconv.FormatFloat(math.Round(v), 'f', -1, 64)
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}

func (h *taskHandle) event(msg string, ann map[string]string) {
	h.logger.Info(msg)
	h.d.events.publish(taskEvent(h.cfg, msg, ann))
}

// monitor runs while the driver watches the task: it samples the GPUs, reads the metrics,
// checkpoints, and finishes the task when the shim reports its exit.
func (h *taskHandle) monitor(ctx context.Context, interval time.Duration) {
	defer close(h.monitorDone)
	sctx, scancel := context.WithCancel(context.Background())
	samplerDone := make(chan struct{})
	go func() { h.sampler.Run(sctx, interval); close(samplerDone) }()
	stopSampler := func() { scancel(); <-samplerDone }

	type waited struct {
		st  *shim.State
		err error
	}
	waitCh := make(chan waited, 1)
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	go func() {
		st, err := h.shim.Wait(wctx)
		waitCh <- waited{st, err}
	}()

	tick := time.NewTicker(interval)
	defer tick.Stop()
	var deferred <-chan time.Time
	if h.deferredEvent != "" {
		deferred = time.After(deferredEventDelay)
	}
	sendDeferred := func() {
		if h.deferredEvent != "" {
			h.event(h.deferredEvent, map[string]string{"pid": strconv.Itoa(h.st.Shim.TaskPID)})
			h.deferredEvent = ""
		}
	}
	for n := 1; ; n++ {
		select {
		case <-deferred:
			sendDeferred()
		case <-ctx.Done():
			stopSampler()
			h.pollMetrics(time.Now())
			h.saveCheckpoint()
			return
		case w := <-waitCh:
			if w.err != nil && ctx.Err() != nil {
				stopSampler()
				h.saveCheckpoint()
				return
			}
			stopSampler()
			h.pollMetrics(time.Now())
			sendDeferred()
			h.finish(w.st, w.err)
			return
		case now := <-tick.C:
			h.coRunners()
			h.pollMetrics(now)
			h.milestone(now)
			if n%checkpointEvery == 0 {
				h.saveCheckpoint()
			}
		}
	}
}

func (h *taskHandle) pollMetrics(now time.Time) {
	lines, errs := h.tail.Poll()
	for _, err := range errs {
		h.logger.Warn("bad metrics line skipped", "file", h.st.MetricsFile, "error", err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, l := range lines {
		h.progress.Add(l, now)
	}
}

// milestone emits "measured N samples/s on ..." the first time a throughput is known and
// whenever it moved markedly since.
func (h *taskHandle) milestone(now time.Time) {
	h.mu.Lock()
	tp, ok := h.progress.Throughput()
	last, lastAt := h.lastReported, h.lastReportedAt
	h.mu.Unlock()
	if !ok || tp <= 0 {
		return
	}
	if last > 0 && (now.Sub(lastAt) < measuredEventGap || math.Abs(tp-last)/last <= measuredEventChange) {
		return
	}
	h.mu.Lock()
	h.lastReported, h.lastReportedAt = tp, now
	h.mu.Unlock()
	h.event(fmt.Sprintf("measured %s samples/s on %s", formatRate(tp), gpuLabel(h.gpuNames())),
		map[string]string{"throughput": strconv.FormatFloat(tp, 'f', 3, 64)})
}

func (h *taskHandle) saveCheckpoint() {
	h.mu.Lock()
	cp := checkpoint{Sampler: h.sampler.Checkpoint(), Offset: h.tail.Offset(), Progress: h.progress.State(), LastReported: h.lastReported}
	h.mu.Unlock()
	if err := writeJSONFile(filepath.Join(h.dir(), checkpointFile), &cp); err != nil {
		h.logger.Warn("telemetry checkpoint not saved", "error", err)
	}
}

// restoreCheckpoint continues the telemetry a previous driver process collected.
func (h *taskHandle) restoreCheckpoint() {
	var cp checkpoint
	err := readJSONFile(filepath.Join(h.dir(), checkpointFile), &cp)
	if errors.Is(err, os.ErrNotExist) {
		return
	}
	if err != nil {
		h.logger.Warn("telemetry checkpoint unreadable; starting over", "error", err)
		return
	}
	if err := h.sampler.Restore(cp.Sampler); err != nil {
		h.logger.Warn("telemetry checkpoint does not match the task's GPUs", "error", err)
	}
	h.tail.SetOffset(cp.Offset)
	h.progress = telemetry.RestoreProgress(cp.Progress)
	h.lastReported = cp.LastReported
	if cp.LastReported > 0 {
		h.lastReportedAt = time.Now()
	}
}

// finish records the exit, restores power limits, reports the run and wakes WaitTask.
func (h *taskHandle) finish(st *shim.State, waitErr error) {
	res := &drivers.ExitResult{ExitCode: -1}
	completed := time.Now()
	if st != nil {
		res = &drivers.ExitResult{ExitCode: int32(st.ExitCode), Signal: int32(st.Signal), OomKilled: st.OOMKilled}
		if !st.FinishedAt.IsZero() {
			completed = st.FinishedAt
		}
	}
	h.restorePowerLimits()
	coRunners := h.coRunners()
	if h.st.MPSGPU != "" {
		h.gpu.setProcessLoad(h.st.MPSGPU, h.st.Shim.TaskPID, 0)
	}
	if h.st.MPSGPU == "" || len(coRunners) == 0 {
		h.gpu.setLoad(h.gpus, 0) // a shared GPU stays busy while co-runners remain
	}
	sum := h.sampler.Summary()
	h.mu.Lock()
	h.state = drivers.TaskState_EXITED
	h.exit, h.exitErr, h.completedAt, h.summary = res, waitErr, completed, sum
	tp, hasTP := h.progress.Throughput()
	h.mu.Unlock()

	runtime := completed.Sub(h.st.StartedAt)
	msg := fmt.Sprintf("finished after %s on %s", runtime.Round(time.Second), gpuLabel(h.gpuNames()))
	ann := map[string]string{"exit_code": strconv.Itoa(int(res.ExitCode)), "runtime_s": strconv.FormatFloat(runtime.Seconds(), 'f', 1, 64)}
	if hasTP {
		msg += fmt.Sprintf(": %s samples/s", formatRate(tp))
		ann["throughput"] = strconv.FormatFloat(tp, 'f', 3, 64)
	}
	if sum.EnergySource != telemetry.SourceNone {
		msg += fmt.Sprintf(", %.1f kJ (avg %.0f W, peak %.0f W)", sum.EnergyJ/1000, sum.AvgPowerW, sum.PeakPowerW)
		ann["energy_j"] = strconv.FormatFloat(sum.EnergyJ, 'f', 1, 64)
		ann["energy_source"] = sum.EnergySource
	}
	if waitErr != nil {
		msg += "; " + waitErr.Error()
	}
	h.event(msg, ann)
	h.report(res, completed, tp, sum)
	if h.st.MPSGPU != "" && h.gpu.slots != nil {
		h.gpu.slots.Detach(h.st.MPSGPU, h.cfg.GetId())
	}
	_ = os.Remove(filepath.Join(h.dir(), checkpointFile))
	close(h.done)
}

// report spools the run record for the sidecar, once per task even across restarts.
func (h *taskHandle) report(res *drivers.ExitResult, completed time.Time, tp float64, sum telemetry.Summary) {
	rep := h.d.reporterOrNil()
	if rep == nil || len(h.st.GPUs) == 0 {
		return // no sidecar configured, or nothing GPU-related to learn from
	}
	marker := filepath.Join(h.dir(), reportedFile)
	if _, err := os.Stat(marker); err == nil {
		return
	}
	obs := h.observation(res, completed, tp, sum)
	if _, err := rep.Submit(sanitizeID(h.cfg.GetId()), obs); err != nil {
		h.logger.Error("run record not spooled", "error", err)
		return
	}
	if err := os.WriteFile(marker, nil, 0o600); err != nil {
		h.logger.Warn("reported marker not written; the record may be sent twice after a restart", "error", err)
	}
}

func (h *taskHandle) observation(res *drivers.ExitResult, completed time.Time, tp float64, sum telemetry.Summary) cluster.Observation {
	ns := h.cfg.GetNamespace()
	if ns == "" {
		ns = "default"
	}
	job := h.cfg.GetJobId()
	if job == "" {
		job = h.cfg.GetJobName()
	}
	obs := cluster.Observation{
		Namespace:   ns,
		JobID:       job,
		Group:       h.cfg.GetTaskGroupName(),
		Task:        h.cfg.GetName(),
		AllocID:     h.cfg.GetAllocId(),
		ModelFamily: h.ann.ModelFamily,
		ModelName:   h.ann.ModelName,
		BatchSize:   h.ann.BatchSize,
		ParamCount:  h.ann.ParamCount,
		Framework:   h.ann.Framework,
		GPUs:        len(h.st.GPUs),
		Nodes:       1,
		// The metrics source counts samples; the catalog's unit is steps (per-GPU batches).
		SamplesPerSec: tp,
		RuntimeS:      completed.Sub(h.st.StartedAt).Seconds(),
		ExitCode:      int(res.ExitCode),
		Time:          completed.UTC(),
	}
	obs.Throughput = obs.StepsPerSec()
	// A run Nomad stopped (a re-hold, preemption, drain deadline or job stop), that failed
	// or was killed by a signal did not finish its work: the sidecar keeps it, never learns it.
	obs.Partial = h.stopRequested.Load() || res.ExitCode != 0 || res.Signal != 0 || res.OomKilled
	h.mu.Lock()
	if samples, ok := h.progress.Samples(); ok && h.ann.BatchSize > 0 {
		obs.Steps = samples / float64(h.ann.BatchSize)
	}
	h.mu.Unlock()
	if names := h.gpuNames(); len(names) > 0 {
		// The most common model among the task's GPUs (they are one device group in
		// practice).
		counts := map[string]int{}
		for _, n := range names {
			counts[n]++
		}
		sort.SliceStable(names, func(i, j int) bool { return counts[names[i]] > counts[names[j]] })
		obs.GPUName = names[0]
		obs.GPUType = gpuspec.TypeOf(names[0]) // a MIG slice reports its slice type
	}
	if sum.EnergySource != telemetry.SourceNone {
		obs.EnergyJ, obs.AvgPowerW, obs.PeakPowerW = sum.EnergyJ, sum.AvgPowerW, sum.PeakPowerW
	}
	h.setCoRunner(&obs)
	return obs
}

func (h *taskHandle) restorePowerLimits() {
	path := filepath.Join(h.dir(), powerFile)
	var saved []telemetry.SavedLimit
	if err := readJSONFile(path, &saved); err != nil {
		return
	}
	if err := telemetry.RestorePowerLimits(h.gpus, saved); err != nil {
		h.logger.Error("power limit not restored", "error", err)
		h.event("power limit not restored: "+err.Error(), nil)
		return
	}
	_ = os.Remove(path)
	h.event(fmt.Sprintf("power limit restored on %d GPUs", len(saved)), nil)
}

// result returns the exit result once done is closed.
func (h *taskHandle) result() (*drivers.ExitResult, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.exit, h.exitErr
}

func (h *taskHandle) exited() bool {
	select {
	case <-h.done:
		return true
	default:
		return false
	}
}

// The task's lifecycle, as the Driver service asks for it: the handle owns its state and
// its shim, so Wait, Stop, Destroy, Inspect and Signal go through these methods.

// killGrace is how long a task may take to exit after SIGKILL before Stop or Destroy gives up.
const killGrace = 10 * time.Second

// wait blocks until the task exited and returns its result and the shim's wait error; err is
// the gRPC error when ctx ends or the driver shuts down before the task ended.
func (h *taskHandle) wait(ctx context.Context) (res *drivers.ExitResult, waitErr, err error) {
	select {
	case <-h.done:
	case <-ctx.Done():
		return nil, nil, status.FromContextError(ctx.Err()).Err()
	case <-h.monitorDone:
		// The driver is shutting down before the task ended.
		select {
		case <-h.done:
		default:
			return nil, nil, status.Error(codes.Unavailable, "driver shutting down; the task keeps running")
		}
	}
	res, waitErr = h.result()
	return res, waitErr, nil
}

// stop sends sig, waits up to timeout for the exit, then sends SIGKILL. The run is marked
// stopped (reported partial) whatever its exit code.
func (h *taskHandle) stop(ctx context.Context, sig syscall.Signal, timeout time.Duration) error {
	h.stopRequested.Store(true)
	if err := h.shim.Signal(sig); err != nil {
		h.logger.Debug("stop signal not delivered", "signal", sig, "error", err)
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-h.done:
		return nil
	case <-ctx.Done():
		return status.FromContextError(ctx.Err()).Err()
	case <-t.C:
	}
	h.event(fmt.Sprintf("task did not exit %v after %v; sending SIGKILL", timeout, sig), nil)
	if err := h.shim.Kill(); err != nil {
		h.logger.Warn("SIGKILL failed", "error", err)
	}
	return h.awaitKilled(ctx)
}

// kill sends SIGKILL at once (a forced destroy) and waits for the exit.
func (h *taskHandle) kill(ctx context.Context) error {
	h.stopRequested.Store(true)
	_ = h.shim.Kill()
	return h.awaitKilled(ctx)
}

func (h *taskHandle) awaitKilled(ctx context.Context) error {
	select {
	case <-h.done:
		return nil
	case <-ctx.Done():
		return status.FromContextError(ctx.Err()).Err()
	case <-time.After(killGrace):
		return status.Errorf(codes.DeadlineExceeded, "task %s still running 10s after SIGKILL", h.cfg.GetId())
	}
}

// destroy removes what the exited task leaves behind (its cgroup and state directory) once
// the monitor stopped.
func (h *taskHandle) destroy() {
	<-h.monitorDone
	if cg := h.st.Shim.CgroupDir; cg != "" {
		for range 20 {
			if err := shim.RemoveCgroup(cg); err == nil || !errors.Is(err, syscall.EBUSY) {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	if err := os.RemoveAll(h.dir()); err != nil {
		h.logger.Warn("task state dir not removed", "dir", h.dir(), "error", err)
	}
}

// signal delivers sig to a running task.
func (h *taskHandle) signal(sig syscall.Signal) error {
	if h.exited() {
		return status.Errorf(codes.FailedPrecondition, "task %s has exited", h.cfg.GetId())
	}
	if err := h.shim.Signal(sig); err != nil {
		return status.Errorf(codes.Internal, "signal %v: %v", sig, err)
	}
	return nil
}

// TaskStatus is the task's status and the driver attributes InspectTask reports: pids, GPUs,
// the measured throughput and the energy so far (final once the task exited).
func (h *taskHandle) TaskStatus() (*drivers.TaskStatus, map[string]string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	ts := &drivers.TaskStatus{
		Id:        h.cfg.GetId(),
		Name:      h.cfg.GetName(),
		State:     h.state,
		StartedAt: timestamppb.New(h.st.StartedAt),
	}
	attrs := map[string]string{
		"pid":          strconv.Itoa(h.st.Shim.TaskPID),
		"shim_pid":     strconv.Itoa(h.st.Shim.ShimPID),
		"gpus":         strings.Join(h.st.GPUs, ","),
		"metrics_file": h.st.MetricsFile,
	}
	if tp, ok := h.progress.Throughput(); ok {
		attrs["throughput"] = strconv.FormatFloat(tp, 'f', 3, 64)
	}
	if h.state == drivers.TaskState_EXITED {
		ts.CompletedAt = timestamppb.New(h.completedAt)
		ts.Result = h.exit
		attrs["energy_j"] = strconv.FormatFloat(h.summary.EnergyJ, 'f', 1, 64)
	} else {
		sum := h.sampler.Summary()
		attrs["energy_j"] = strconv.FormatFloat(sum.EnergyJ, 'f', 1, 64)
	}
	return ts, attrs
}

// stats samples the task's CPU and memory use.
func (h *taskHandle) stats(ps *procStats, now time.Time) *drivers.TaskStats {
	return ps.sample(h.cfg.GetId(), h.st.Shim.TaskPID, h.st.Shim.CgroupDir, now)
}
