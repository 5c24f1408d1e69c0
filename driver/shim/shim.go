package shim

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/hetgpu/hetgpu/driver/telemetry"
)

// forwarded are the signals the shim passes on to the task's process group. SIGKILL and
// SIGSTOP cannot be caught; the driver sends those to the task directly.
func forwarded() []os.Signal {
	return []os.Signal{
		syscall.SIGHUP, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGTERM, syscall.SIGUSR1,
		syscall.SIGUSR2, syscall.SIGALRM, syscall.SIGCONT, syscall.SIGTSTP, syscall.SIGTTIN,
		syscall.SIGTTOU, syscall.SIGWINCH, syscall.SIGABRT,
	}
}

// Main is the shim process: args is [spec path]. It returns the shim's own exit status (not
// the task's, which goes to the state file).
func Main(args []string) int {
	// Catch forwarded signals before anything else so none is lost while starting.
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, forwarded()...)
	// A broken log FIFO must not kill the shim before it records the exit status.
	signal.Ignore(syscall.SIGPIPE)

	logger := log.New(os.Stderr, "hetgpu-shim: ", log.LstdFlags|log.Lmicroseconds)
	if len(args) != 1 {
		logger.Printf("usage: %s %s SPEC_FILE", filepath.Base(os.Args[0]), Command)
		return 2
	}
	spec, err := ReadSpec(args[0])
	if err != nil {
		logger.Print(err)
		return 2
	}
	statePath := filepath.Join(filepath.Dir(args[0]), StateFile)
	st := &State{ShimPID: os.Getpid()}
	fail := func(err error) int {
		logger.Printf("task not started: %v", err)
		st.StartError = err.Error()
		st.Exited = true
		st.ExitCode = -1
		st.FinishedAt = time.Now()
		if werr := writeState(statePath, st); werr != nil {
			logger.Print(werr)
		}
		return 1
	}
	r := &runner{spec: spec, logger: logger}
	cmd, err := r.prepare()
	if err != nil {
		return fail(err)
	}
	defer r.closeFiles()

	// Pdeathsig belongs to the thread that forks: keep this goroutine on one thread for the
	// shim's life, so the task is killed only when the shim really dies.
	runtime.LockOSThread()
	if cmd, err = r.start(cmd); err != nil {
		return fail(err)
	}
	pid := cmd.Process.Pid
	st.TaskPID = pid
	st.StartedAt = time.Now()
	if ps, err := ReadProcStat("/proc", pid); err == nil {
		st.TaskStart = ps.StartTime
	}
	if err := writeState(statePath, st); err != nil {
		// The driver cannot find the task without the state file: give up on it.
		logger.Print(err)
		_ = signalGroup(pid, syscall.SIGKILL)
		_ = cmd.Wait()
		return 1
	}
	logger.Printf("started task pid %d: %s", pid, spec.Command)

	done := make(chan struct{})
	go func() {
		for {
			select {
			case s := <-sigs:
				if err := signalGroup(pid, s.(syscall.Signal)); err != nil {
					logger.Printf("forward %v to task: %v", s, err)
				}
			case <-done:
				return
			}
		}
	}()

	werr := cmd.Wait()
	close(done)
	st.FinishedAt = time.Now()
	st.Exited = true
	st.ExitCode, st.Signal = exitStatus(cmd.ProcessState, werr)
	// The task is its main process: leftovers in its process group or cgroup go with it.
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	if spec.CgroupDir != "" {
		if n, err := CgroupOOMKills(spec.CgroupDir); err == nil && n > 0 {
			st.OOMKilled = true
		}
		_ = KillCgroup(spec.CgroupDir)
	}
	r.finishTee(2 * time.Second)
	if err := writeState(statePath, st); err != nil {
		logger.Print(err)
		return 1
	}
	logger.Printf("task pid %d exited: code %d signal %d", pid, st.ExitCode, st.Signal)
	return 0
}

// exitStatus turns a wait result into Nomad's (exit code, signal) pair.
func exitStatus(ps *os.ProcessState, err error) (code, sig int) {
	if ps == nil {
		return -1, 0
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		s := int(ws.Signal())
		return 128 + s, s
	}
	return ps.ExitCode(), 0
}

type runner struct {
	spec   *Spec
	logger *log.Logger
	files  []*os.File
	// tee copies the task's stdout to the log FIFO and scans it for metrics.
	teeDone chan struct{}
}

func (r *runner) closeFiles() {
	for _, f := range r.files {
		f.Close()
	}
}

// openOutput opens a log destination. Nomad's paths are FIFOs read by its log collector;
// plain files (tests, manual runs) are created and appended to.
func (r *runner) openOutput(path string) (*os.File, error) {
	if path == "" {
		path = os.DevNull
	}
	fi, err := os.Stat(path)
	var f *os.File
	if err == nil && fi.Mode()&os.ModeNamedPipe != 0 {
		f, err = os.OpenFile(path, os.O_WRONLY, 0)
	} else {
		f, err = os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	}
	if err != nil {
		return nil, fmt.Errorf("open task log %s: %w", path, err)
	}
	r.files = append(r.files, f)
	return f, nil
}

func (r *runner) prepare() (*exec.Cmd, error) {
	s := r.spec
	path, err := lookPath(s.Command, s.Env, s.Dir)
	if err != nil {
		return nil, err
	}
	stdout, err := r.openOutput(s.StdoutPath)
	if err != nil {
		return nil, err
	}
	stderr, err := r.openOutput(s.StderrPath)
	if err != nil {
		return nil, err
	}
	cmd := &exec.Cmd{
		Path:   path,
		Args:   append([]string{s.Command}, s.Args...),
		Env:    s.Env,
		Dir:    s.Dir,
		Stdout: stdout,
		Stderr: stderr,
		SysProcAttr: &syscall.SysProcAttr{
			// Own process group: signals reach the task's children too, and the shim's
			// session is left alone.
			Setpgid:   true,
			Pdeathsig: syscall.SIGKILL,
		},
	}
	if c := s.Credential; c != nil {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: c.UID, Gid: c.GID, Groups: c.Groups}
	}
	if s.MetricsRegex != "" {
		x, err := telemetry.NewRegexExtractor(s.MetricsRegex)
		if err != nil {
			return nil, err
		}
		pr, pw, err := os.Pipe()
		if err != nil {
			return nil, fmt.Errorf("stdout pipe: %w", err)
		}
		r.files = append(r.files, pr, pw)
		cmd.Stdout = pw
		r.teeDone = make(chan struct{})
		go r.tee(pr, stdout, x)
	}
	return cmd, nil
}

// start starts the task inside its cgroup: atomically through clone3(CLONE_INTO_CGROUP)
// where the kernel supports it, else by moving the shim itself into the cgroup first.
func (r *runner) start(cmd *exec.Cmd) (*exec.Cmd, error) {
	defer func() {
		// The child has its own copy of the pipe's write end; drop ours so the tee sees EOF.
		if r.teeDone != nil {
			if pw, ok := cmd.Stdout.(*os.File); ok {
				pw.Close()
			}
		}
	}()
	dir := r.spec.CgroupDir
	if dir == "" {
		return cmd, startErr(cmd.Start(), cmd.Path)
	}
	fd, err := syscall.Open(dir, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	if err == nil {
		// A fresh Cmd: one whose Start failed cannot be started again.
		attr := *cmd.SysProcAttr
		attr.UseCgroupFD = true
		attr.CgroupFD = fd
		first := &exec.Cmd{Path: cmd.Path, Args: cmd.Args, Env: cmd.Env, Dir: cmd.Dir,
			Stdout: cmd.Stdout, Stderr: cmd.Stderr, SysProcAttr: &attr}
		err = first.Start()
		syscall.Close(fd)
		if err == nil {
			return first, nil
		}
		r.logger.Printf("start in cgroup %s with clone3: %v; moving the shim into it instead", dir, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(fmt.Sprint(os.Getpid())), 0o644); err != nil {
		r.logger.Printf("join cgroup %s: %v; starting without limits", dir, err)
	}
	return cmd, startErr(cmd.Start(), cmd.Path)
}

func startErr(err error, path string) error {
	if err != nil {
		return fmt.Errorf("start %s: %w", path, err)
	}
	return nil
}

// tee copies the task's stdout to out line by line and appends a metrics line for every line
// the regex matches. Lines longer than the buffer are copied but not scanned.
func (r *runner) tee(in io.Reader, out io.Writer, x *telemetry.RegexExtractor) {
	defer close(r.teeDone)
	var metrics *os.File
	defer func() {
		if metrics != nil {
			metrics.Close()
		}
	}()
	br := bufio.NewReaderSize(in, 64*1024)
	outOK := true
	for {
		line, err := br.ReadSlice('\n')
		if len(line) > 0 {
			if outOK {
				if _, werr := out.Write(line); werr != nil {
					// Keep draining so the task never blocks on a full pipe.
					r.logger.Printf("write task stdout: %v", werr)
					outOK = false
				}
			}
			if m, ok := x.Extract(line); ok && r.spec.MetricsFile != "" {
				if metrics == nil {
					f, oerr := os.OpenFile(r.spec.MetricsFile, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
					if oerr != nil {
						r.logger.Printf("open metrics file: %v", oerr)
					} else {
						metrics = f
					}
				}
				if metrics != nil {
					m.Time = time.Now()
					if _, werr := metrics.Write(m.Marshal()); werr != nil {
						r.logger.Printf("write metrics file: %v", werr)
					}
				}
			}
		}
		if err == nil || errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		return
	}
}

// finishTee waits a little for the tee to drain what the task wrote before exiting; a
// grandchild holding stdout open must not keep the shim from recording the exit.
func (r *runner) finishTee(d time.Duration) {
	if r.teeDone == nil {
		return
	}
	select {
	case <-r.teeDone:
	case <-time.After(d):
		r.logger.Printf("stdout still open %v after the task exited; not waiting", d)
	}
}

// lookPath resolves command the way a shell would, but with the task's PATH and working
// directory rather than the shim's.
func lookPath(command string, env []string, dir string) (string, error) {
	if strings.Contains(command, "/") {
		p := command
		if !filepath.IsAbs(p) && dir != "" {
			p = filepath.Join(dir, p)
		}
		if err := executable(p); err != nil {
			return "", fmt.Errorf("command %q: %w", command, err)
		}
		return p, nil
	}
	pathEnv := "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			pathEnv = v
		}
	}
	for _, d := range filepath.SplitList(pathEnv) {
		if d == "" {
			d = "."
		}
		p := filepath.Join(d, command)
		if !filepath.IsAbs(p) && dir != "" {
			p = filepath.Join(dir, p)
		}
		if executable(p) == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("command %q: not found in the task's PATH (%s)", command, pathEnv)
}

func executable(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	if fi.IsDir() {
		return fmt.Errorf("%s is a directory", path)
	}
	if fi.Mode()&0o111 == 0 {
		return fmt.Errorf("%s is not executable", path)
	}
	return nil
}
