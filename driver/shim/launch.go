package shim

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// DefaultStartTimeout bounds how long Launch waits for the shim to start the task (opening
// Nomad's log FIFOs blocks until the log collector reads them).
const DefaultStartTimeout = 30 * time.Second

// pollInterval is how often the driver looks at the state file while waiting.
const pollInterval = 100 * time.Millisecond

// LaunchOptions says how to start the shim.
type LaunchOptions struct {
	// Exe is the driver binary; Args go before the spec path (default: [Command]).
	Exe  string
	Args []string
	// Env is the shim's own environment (the task's is in the Spec); default: PATH only.
	Env []string
	// Dir is the task's shim directory; created with mode 0700.
	Dir          string
	StartTimeout time.Duration
}

// Handle identifies a running shim and its task. It is JSON-encoded into the task handle's
// driver_state, so a restarted driver can find both again.
type Handle struct {
	Dir       string    `json:"dir"`
	ShimPID   int       `json:"shim_pid"`
	ShimStart uint64    `json:"shim_start"`
	TaskPID   int       `json:"task_pid"`
	TaskStart uint64    `json:"task_start"`
	CgroupDir string    `json:"cgroup_dir,omitempty"`
	StartedAt time.Time `json:"started_at"`
}

// Launch starts the shim in its own session and waits until it has started the task.
func Launch(ctx context.Context, opts LaunchOptions, spec *Spec) (*Handle, error) {
	if err := os.MkdirAll(opts.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("create shim dir: %w", err)
	}
	specPath, err := WriteSpec(opts.Dir, spec)
	if err != nil {
		return nil, err
	}
	statePath := filepath.Join(opts.Dir, StateFile)
	if err := os.Remove(statePath); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("remove old shim state: %w", err)
	}
	logf, err := os.OpenFile(filepath.Join(opts.Dir, LogFile), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open shim log: %w", err)
	}
	defer logf.Close()
	args := opts.Args
	if args == nil {
		args = []string{Command}
	}
	env := opts.Env
	if env == nil {
		env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	}
	cmd := exec.Command(opts.Exe, append(append([]string(nil), args...), specPath)...)
	cmd.Env = env
	cmd.Dir = "/"
	cmd.Stdout, cmd.Stderr = logf, logf
	// A new session: the shim survives the driver and gets none of its signals.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start shim %s: %w", opts.Exe, err)
	}
	h := &Handle{Dir: opts.Dir, ShimPID: cmd.Process.Pid, CgroupDir: spec.CgroupDir}
	if ps, err := ReadProcStat("/proc", h.ShimPID); err == nil {
		h.ShimStart = ps.StartTime
	}
	// Reap the shim while this driver is its parent; after a driver restart init does.
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()

	timeout := opts.StartTimeout
	if timeout <= 0 {
		timeout = DefaultStartTimeout
	}
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(pollInterval / 4)
	defer tick.Stop()
	for {
		st, err := ReadState(statePath)
		if err == nil {
			if st.StartError != "" {
				return nil, errors.New(st.StartError)
			}
			if st.TaskPID > 0 {
				h.TaskPID, h.TaskStart, h.StartedAt = st.TaskPID, st.TaskStart, st.StartedAt
				return h, nil
			}
		}
		select {
		case <-exited:
			// One last look: the shim may have written the state just before exiting.
			if st, err := ReadState(statePath); err == nil && st.TaskPID > 0 {
				h.TaskPID, h.TaskStart, h.StartedAt = st.TaskPID, st.TaskStart, st.StartedAt
				return h, nil
			} else if err == nil && st.StartError != "" {
				return nil, errors.New(st.StartError)
			}
			return nil, fmt.Errorf("shim exited before starting the task (%s); see %s", cmd.ProcessState, filepath.Join(opts.Dir, LogFile))
		case <-ctx.Done():
			_ = cmd.Process.Kill()
			return nil, fmt.Errorf("starting the task: %w", ctx.Err())
		case <-deadline.C:
			_ = cmd.Process.Kill() // the task, if any, dies with it (Pdeathsig)
			return nil, fmt.Errorf("shim did not start the task within %v (are the log FIFOs read?); see %s", timeout, filepath.Join(opts.Dir, LogFile))
		case <-tick.C:
		}
	}
}

// StatePath is the shim's state file.
func (h *Handle) StatePath() string { return filepath.Join(h.Dir, StateFile) }

// State reads what the shim recorded.
func (h *Handle) State() (*State, error) { return ReadState(h.StatePath()) }

// ShimAlive reports whether the shim still runs.
func (h *Handle) ShimAlive() bool { return Alive("/proc", h.ShimPID, h.ShimStart) }

// TaskAlive reports whether the task's main process still runs.
func (h *Handle) TaskAlive() bool { return Alive("/proc", h.TaskPID, h.TaskStart) }

// ErrShimLost means the shim died without recording the task's exit (e.g. it was
// SIGKILLed); the task was killed with it.
var ErrShimLost = errors.New("the task's shim died without recording its exit status")

// Wait blocks until the task exited and returns the recorded state. It works whether or not
// this process started the shim.
func (h *Handle) Wait(ctx context.Context) (*State, error) {
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		st, err := h.State()
		if err == nil && st.Exited {
			return st, nil
		}
		if !h.ShimAlive() {
			// The shim writes the state before exiting: read once more to close the race.
			if st, err := h.State(); err == nil && st.Exited {
				return st, nil
			}
			if h.TaskAlive() {
				_ = signalGroup(h.TaskPID, syscall.SIGKILL)
			}
			return nil, fmt.Errorf("%w (shim pid %d, task pid %d)", ErrShimLost, h.ShimPID, h.TaskPID)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-tick.C:
		}
	}
}

// Signal delivers sig to the task's process group: through the shim, which forwards it,
// or directly for signals a process cannot catch and when the shim is gone.
func (h *Handle) Signal(sig syscall.Signal) error {
	if sig != syscall.SIGKILL && sig != syscall.SIGSTOP && h.ShimAlive() {
		if err := syscall.Kill(h.ShimPID, sig); err == nil {
			return nil
		}
	}
	if !h.TaskAlive() {
		return fmt.Errorf("signal %v: task pid %d is not running", sig, h.TaskPID)
	}
	return signalGroup(h.TaskPID, sig)
}

// Kill SIGKILLs the task's process group and everything left in its cgroup. The shim then
// records the signal and exits.
func (h *Handle) Kill() error {
	var err error
	if h.TaskAlive() {
		err = signalGroup(h.TaskPID, syscall.SIGKILL)
	}
	if h.CgroupDir != "" {
		_ = KillCgroup(h.CgroupDir)
	}
	return err
}
