package driver

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/hashicorp/go-hclog"
	"github.com/hetgpu/hetgpu/driver/shim"
	"github.com/hetgpu/hetgpu/driver/telemetry"
	"github.com/hetgpu/hetgpu/plugin/proto/drivers"
)

// RecoverTask reattaches to a task a previous driver process started: its shim still runs
// or recorded the exit.
func (d *Driver) RecoverTask(_ context.Context, req *drivers.RecoverTaskRequest) (*drivers.RecoverTaskResponse, error) {
	id := req.GetTaskId()
	if id == "" {
		id = req.GetHandle().GetConfig().GetId()
	}
	d.mu.Lock()
	_, known := d.tasks[id]
	d.mu.Unlock()
	if known {
		return &drivers.RecoverTaskResponse{}, nil
	}
	hd := req.GetHandle()
	if hd == nil || hd.GetConfig() == nil {
		return nil, status.Error(codes.InvalidArgument, "RecoverTask: no task handle")
	}
	st, err := decodeDriverState(hd.GetDriverState())
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "RecoverTask %s: %v", id, err)
	}
	pcfg, g, err := d.config()
	if err != nil {
		return nil, status.Error(codes.FailedPrecondition, err.Error())
	}
	sh := st.Shim
	if err := recoverable(id, &sh); err != nil {
		return nil, err
	}
	cfg := hd.GetConfig()
	logger := d.logger.With("task_id", id, "task", cfg.GetName(), "alloc_id", cfg.GetAllocId())
	gpus := reattachGPUs(g, st, cfg, logger)
	h := d.newHandle(cfg, st, &sh, gpus, logger)
	h.restoreCheckpoint()
	g.setLoad(gpus, fakeTaskUtil)
	d.mu.Lock()
	if _, raced := d.tasks[id]; raced {
		d.mu.Unlock()
		return &drivers.RecoverTaskResponse{}, nil
	}
	d.tasks[id] = h
	d.mu.Unlock()
	// Nomad registers the restored allocation for events only after RecoverTask returned:
	// the monitor sends this a little later.
	h.deferredEvent = "reattached to the task after a driver or client restart"
	h.logger.Info("recovered task", "pid", sh.TaskPID, "shim_pid", sh.ShimPID)
	d.startMonitor(h, pcfg.SampleInterval)
	return &drivers.RecoverTaskResponse{}, nil
}

// recoverable says whether a task can be recovered: while its shim runs, or when the shim
// already recorded the exit (the task ended while the driver was down).
func recoverable(id string, sh *shim.Handle) error {
	if sh.ShimAlive() {
		return nil
	}
	if s, err := sh.State(); err != nil || !s.Exited {
		return status.Errorf(codes.NotFound, "RecoverTask %s: shim pid %d is gone and recorded no exit", id, sh.ShimPID)
	}
	return nil
}

// reattachGPUs finds a recovered task's GPUs in NVML again and, for a slot task, registers it
// again with its GPU's MPS daemon (restarting the daemon if it went with the driver).
func reattachGPUs(g *gpuBackend, st *driverState, cfg *drivers.TaskConfig, logger hclog.Logger) []telemetry.GPU {
	var gpus []telemetry.GPU
	if g.lib != nil && len(st.GPUs) > 0 {
		var err error
		if gpus, err = telemetry.ResolveGPUs(g.lib, strings.Join(st.GPUs, ",")); err != nil {
			logger.Warn("task GPUs not found in NVML after restart; no GPU telemetry", "error", err)
			gpus = nil
		}
	}
	if st.MPSGPU != "" && g.slots != nil {
		if _, err := g.slots.Attach(st.MPSGPU, slotClient(cfg)); err != nil {
			logger.Warn("MPS daemon of the task's GPU not restored", "gpu", st.MPSGPU, "error", err)
		}
	}
	return gpus
}

// WaitTask blocks until the task exited (the handle's wait).
func (d *Driver) WaitTask(ctx context.Context, req *drivers.WaitTaskRequest) (*drivers.WaitTaskResponse, error) {
	h, err := d.lookup(req.GetTaskId())
	if err != nil {
		return nil, err
	}
	res, werr, err := h.wait(ctx)
	if err != nil {
		return nil, err
	}
	resp := &drivers.WaitTaskResponse{Result: res}
	if werr != nil {
		resp.Err = werr.Error()
	}
	return resp, nil
}

// parseSignal accepts "SIGTERM", "TERM" and numbers.
func parseSignal(s string) (syscall.Signal, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return syscall.SIGINT, nil // Nomad's default kill_signal outside docker
	}
	if n, err := strconv.Atoi(s); err == nil && n > 0 && n < 65 {
		return syscall.Signal(n), nil
	}
	name := strings.ToUpper(s)
	if !strings.HasPrefix(name, "SIG") {
		name = "SIG" + name
	}
	if sig := unix.SignalNum(name); sig != 0 {
		return sig, nil
	}
	return 0, fmt.Errorf("unknown signal %q", s)
}

// StopTask sends the task its kill signal and SIGKILL after the timeout (the handle's stop).
func (d *Driver) StopTask(ctx context.Context, req *drivers.StopTaskRequest) (*drivers.StopTaskResponse, error) {
	h, err := d.lookup(req.GetTaskId())
	if err != nil {
		return nil, err
	}
	if h.exited() {
		return &drivers.StopTaskResponse{}, nil
	}
	sig, err := parseSignal(req.GetSignal())
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	timeout := req.GetTimeout().AsDuration()
	if req.GetTimeout() == nil || timeout < 0 {
		timeout = 5 * time.Second
	}
	if err := h.stop(ctx, sig, timeout); err != nil {
		return nil, err
	}
	return &drivers.StopTaskResponse{}, nil
}

// DestroyTask removes an exited task (killing it first when forced) and forgets it.
func (d *Driver) DestroyTask(ctx context.Context, req *drivers.DestroyTaskRequest) (*drivers.DestroyTaskResponse, error) {
	h, err := d.lookup(req.GetTaskId())
	if err != nil {
		if status.Code(err) == codes.NotFound {
			return &drivers.DestroyTaskResponse{}, nil // nothing to clean up
		}
		return nil, err
	}
	if !h.exited() {
		if !req.GetForce() {
			return nil, status.Errorf(codes.FailedPrecondition, "task %s is still running; stop it first or destroy with force", req.GetTaskId())
		}
		if err := h.kill(ctx); err != nil {
			return nil, err
		}
	}
	h.destroy()
	d.mu.Lock()
	delete(d.tasks, req.GetTaskId())
	d.mu.Unlock()
	return &drivers.DestroyTaskResponse{}, nil
}

// InspectTask reports the handle's TaskStatus.
func (d *Driver) InspectTask(_ context.Context, req *drivers.InspectTaskRequest) (*drivers.InspectTaskResponse, error) {
	h, err := d.lookup(req.GetTaskId())
	if err != nil {
		return nil, err
	}
	ts, attrs := h.TaskStatus()
	return &drivers.InspectTaskResponse{Task: ts, Driver: &drivers.TaskDriverStatus{Attributes: attrs}}, nil
}

// SignalTask delivers a signal to the running task.
func (d *Driver) SignalTask(_ context.Context, req *drivers.SignalTaskRequest) (*drivers.SignalTaskResponse, error) {
	h, err := d.lookup(req.GetTaskId())
	if err != nil {
		return nil, err
	}
	sig, err := parseSignal(req.GetSignal())
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if err := h.signal(sig); err != nil {
		return nil, err
	}
	return &drivers.SignalTaskResponse{}, nil
}

// TaskStats streams the task's CPU and memory use until it exits.
func (d *Driver) TaskStats(req *drivers.TaskStatsRequest, stream grpc.ServerStreamingServer[drivers.TaskStatsResponse]) error {
	h, err := d.lookup(req.GetTaskId())
	if err != nil {
		return err
	}
	interval := req.GetCollectionInterval().AsDuration()
	if interval <= 0 {
		interval = time.Second
	}
	ps := newProcStats(d.opts.ProcRoot)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if h.exited() {
			return nil
		}
		stats := h.stats(ps, time.Now())
		if err := stream.Send(&drivers.TaskStatsResponse{Stats: stats}); err != nil {
			return err
		}
		select {
		case <-stream.Context().Done():
			return nil
		case <-h.done:
			return nil
		case <-t.C:
		}
	}
}

// TaskEvents streams the driver's task events.
func (d *Driver) TaskEvents(_ *drivers.TaskEventsRequest, stream grpc.ServerStreamingServer[drivers.DriverTaskEvent]) error {
	ch, cancel := d.events.subscribe()
	defer cancel()
	return serveStream(d, stream.Context(), ch, stream.Send)
}

// serveStream calls send with each value of ch until the stream (its context ctx) or the driver
// ends, which is no error, or send fails, which ends the stream with send's error.
func serveStream[T any](d *Driver, ctx context.Context, ch <-chan T, send func(T) error) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-d.ctx.Done():
			return nil
		case v := <-ch:
			if err := send(v); err != nil {
				return err
			}
		}
	}
}
