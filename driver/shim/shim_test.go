package shim

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The test binary doubles as the shim: Launch re-executes it with "shim SPEC".
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == Command {
		os.Exit(Main(os.Args[2:]))
	}
	os.Exit(m.Run())
}

type env struct {
	t      *testing.T
	dir    string
	stdout string
	stderr string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	dir := t.TempDir()
	return &env{t: t, dir: dir, stdout: filepath.Join(dir, "stdout"), stderr: filepath.Join(dir, "stderr")}
}

func (e *env) launch(spec *Spec) (*Handle, error) {
	e.t.Helper()
	exe, err := os.Executable()
	if err != nil {
		e.t.Fatal(err)
	}
	if spec.StdoutPath == "" {
		spec.StdoutPath = e.stdout
	}
	if spec.StderrPath == "" {
		spec.StderrPath = e.stderr
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	h, err := Launch(ctx, LaunchOptions{Exe: exe, Dir: filepath.Join(e.dir, "shim"), StartTimeout: 10 * time.Second}, spec)
	if err == nil {
		e.t.Cleanup(func() { _ = h.Kill() })
	}
	return h, err
}

func (e *env) wait(h *Handle) *State {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st, err := h.Wait(ctx)
	if err != nil {
		e.t.Fatalf("wait: %v", err)
	}
	return st
}

func sh(script string) *Spec {
	return &Spec{Command: "/bin/sh", Args: []string{"-c", script}, Env: []string{"PATH=/usr/bin:/bin", "GREETING=hello"}}
}

func TestExitCodesAndOutput(t *testing.T) {
	tests := []struct {
		name       string
		script     string
		wantCode   int
		wantSignal int
		wantOut    string
		wantErr    string
	}{
		{"success", `echo "$GREETING out"; echo err >&2`, 0, 0, "hello out\n", "err\n"},
		{"exit code", `exit 3`, 3, 0, "", ""},
		{"killed by signal", `kill -9 $$`, 128 + 9, 9, "", ""},
		{"cwd", `pwd`, 0, 0, "/tmp\n", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			spec := sh(tc.script)
			spec.Dir = "/tmp"
			h, err := e.launch(spec)
			if err != nil {
				t.Fatal(err)
			}
			st := e.wait(h)
			if st.ExitCode != tc.wantCode || st.Signal != tc.wantSignal {
				t.Errorf("exit = (%d, signal %d), want (%d, signal %d)", st.ExitCode, st.Signal, tc.wantCode, tc.wantSignal)
			}
			if st.FinishedAt.Before(st.StartedAt) || st.StartedAt.IsZero() {
				t.Errorf("times: started %v finished %v", st.StartedAt, st.FinishedAt)
			}
			out, _ := os.ReadFile(e.stdout)
			if string(out) != tc.wantOut {
				t.Errorf("stdout = %q, want %q", out, tc.wantOut)
			}
			errOut, _ := os.ReadFile(e.stderr)
			if string(errOut) != tc.wantErr {
				t.Errorf("stderr = %q, want %q", errOut, tc.wantErr)
			}
		})
	}
}

func TestStartErrors(t *testing.T) {
	plain := filepath.Join(t.TempDir(), "train.py")
	if err := os.WriteFile(plain, []byte("print(1)\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		spec    *Spec
		wantErr string
	}{
		{"not in PATH", &Spec{Command: "no-such-command-hetgpu", Env: []string{"PATH=/usr/bin:/bin"}}, "not found in the task's PATH"},
		{"missing absolute", &Spec{Command: "/nonexistent/train"}, "no such file"},
		{"not executable", &Spec{Command: plain}, "not executable"},
		{"log dir missing", &Spec{Command: "/bin/true", StdoutPath: "/nonexistent/dir/stdout"}, "open task log"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			_, err := e.launch(tc.spec)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Launch error = %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestSignalForwardedToGroup(t *testing.T) {
	e := newEnv(t)
	// The trap proves the shell got SIGTERM; the child sleep is in the same group.
	h, err := e.launch(sh(`trap 'echo got-term; exit 7' TERM; while :; do sleep 0.05; done`))
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // let the shell install its trap
	if err := h.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	st := e.wait(h)
	if st.ExitCode != 7 {
		t.Fatalf("exit code = %d, want 7 from the TERM trap", st.ExitCode)
	}
	out, _ := os.ReadFile(e.stdout)
	if !strings.Contains(string(out), "got-term") {
		t.Errorf("stdout = %q, want got-term", out)
	}
}

func TestKillIgnoringTask(t *testing.T) {
	e := newEnv(t)
	h, err := e.launch(sh(`trap '' TERM INT; sleep 30 & wait`))
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	_ = h.Signal(syscall.SIGTERM)
	time.Sleep(200 * time.Millisecond)
	if !h.TaskAlive() {
		t.Fatal("task died of an ignored SIGTERM")
	}
	if err := h.Kill(); err != nil {
		t.Fatal(err)
	}
	st := e.wait(h)
	if st.Signal != 9 || st.ExitCode != 137 {
		t.Fatalf("exit = (%d, %d), want (137, 9)", st.ExitCode, st.Signal)
	}
}

// A second driver process knows the task only through the handle's JSON, and the task may
// have finished before it looks.
func TestReattachFromHandleAfterExit(t *testing.T) {
	e := newEnv(t)
	h, err := e.launch(sh(`sleep 0.2; exit 42`))
	if err != nil {
		t.Fatal(err)
	}
	blob, err := json.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, err := h.State()
		if err == nil && st.Exited {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("task did not exit")
		}
		time.Sleep(50 * time.Millisecond)
	}
	var again Handle
	if err := json.Unmarshal(blob, &again); err != nil {
		t.Fatal(err)
	}
	if again.TaskAlive() {
		t.Error("TaskAlive after exit")
	}
	if st := e.wait(&again); st.ExitCode != 42 {
		t.Fatalf("exit code after reattach = %d, want 42", st.ExitCode)
	}
}

func TestShimKilledTakesTaskDown(t *testing.T) {
	e := newEnv(t)
	h, err := e.launch(sh(`sleep 30`))
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(h.ShimPID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := h.Wait(ctx); !errors.Is(err, ErrShimLost) {
		t.Fatalf("Wait error = %v, want ErrShimLost", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for h.TaskAlive() {
		if time.Now().After(deadline) {
			t.Fatal("task outlived its SIGKILLed shim")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestPidReuseGuard(t *testing.T) {
	self, err := ReadProcStat("/proc", os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if !Alive("/proc", os.Getpid(), self.StartTime) {
		t.Error("own process not alive")
	}
	if Alive("/proc", os.Getpid(), self.StartTime+1) {
		t.Error("alive with a different start time: pid reuse not detected")
	}
	if Alive("/proc", 0, 0) || Alive("/proc", -1, 0) {
		t.Error("pid <= 0 alive")
	}
}

func TestRegexMetricsTee(t *testing.T) {
	e := newEnv(t)
	metrics := filepath.Join(e.dir, "metrics.jsonl")
	spec := sh(`echo "step 1 loss 0.9 throughput 812.5 samples/s"; echo "no numbers here"; echo "step 2 loss 0.8 throughput 1,024 samples/s"`)
	spec.MetricsFile = metrics
	spec.MetricsRegex = `throughput (?P<samples_per_sec>[0-9.,]+) samples/s`
	h, err := e.launch(spec)
	if err != nil {
		t.Fatal(err)
	}
	if st := e.wait(h); st.ExitCode != 0 {
		t.Fatalf("exit %d", st.ExitCode)
	}
	out, _ := os.ReadFile(e.stdout)
	if strings.Count(string(out), "\n") != 3 || !strings.Contains(string(out), "no numbers here") {
		t.Errorf("stdout not passed through: %q", out)
	}
	m, err := os.ReadFile(metrics)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(m)), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], `"samples_per_sec":812.5`) || !strings.Contains(lines[1], `"samples_per_sec":1024`) {
		t.Fatalf("metrics file = %q", m)
	}
}

func TestParseProcStat(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    ProcStat
		wantErr bool
	}{
		{
			name: "plain",
			in:   "1234 (sleep) S 1 1234 1234 0 -1 4194304 100 0 0 0 7 3 0 0 20 0 1 0 555 1000 250 18446744073709551615",
			want: ProcStat{PID: 1234, State: 'S', PPID: 1, PGID: 1234, UTime: 7, STime: 3, StartTime: 555, RSSPages: 250},
		},
		{
			name: "name with spaces and parens",
			in:   "42 (a (b) c) R 7 42 42 0 -1 0 0 0 0 0 11 22 0 0 20 0 1 0 999 0 5 0",
			want: ProcStat{PID: 42, State: 'R', PPID: 7, PGID: 42, UTime: 11, STime: 22, StartTime: 999, RSSPages: 5},
		},
		{name: "truncated", in: "1 (x) S 1 1", wantErr: true},
		{name: "no parens", in: "1 x S", wantErr: true},
		{name: "bad number", in: "1 (x) S 1 1 1 0 -1 0 0 0 0 0 a 3 0 0 20 0 1 0 555 1000 250", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseProcStat([]byte(tc.in))
			if tc.wantErr {
				if err == nil {
					t.Fatalf("want error, got %+v", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if *got != tc.want {
				t.Fatalf("got %+v, want %+v", *got, tc.want)
			}
		})
	}
}

func FuzzParseProcStat(f *testing.F) {
	f.Add([]byte("1234 (sleep) S 1 1234 1234 0 -1 4194304 100 0 0 0 7 3 0 0 20 0 1 0 555 1000 250 1"))
	f.Add([]byte("42 (a (b) c) R 7 42 42 0 -1 0 0 0 0 0 11 22 0 0 20 0 1 0 999 0 5 0"))
	f.Add([]byte("1 () Z"))
	f.Fuzz(func(t *testing.T, data []byte) {
		st, err := ParseProcStat(data)
		if err == nil && st == nil {
			t.Fatal("nil stat without error")
		}
	})
}
