package e2e

// The suite leaves nothing running. Every folder the tests make (t.TempDir, agentDir) lies
// under one suite root (TMPDIR is pointed at it), every process the tests start carries the
// root in its environment (suiteEnv), and each proc is ended by its process groups and by what
// runs under its folder (agent_test.go). At the end TestMain fails the suite if any process
// started under the root survived: a working directory or executable under it, or the
// marker in its environment. The same sweep runs just before the -test.timeout deadline and
// on SIGINT/SIGTERM, which skip the tests' cleanups.

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// suiteEnv is the environment variable holding the suite root in every process the suite
// starts (Nomad passes its environment on to logmon and plugins).
const suiteEnv = "HETGPU_E2E_SUITE_ROOT"

func TestMain(m *testing.M) {
	flag.Parse()
	// A short name: Nomad's Task API socket lies deep under an allocation's secrets dir, and a
	// unix socket path may not exceed 107 bytes (install_test.go's is 103 with this root).
	root, err := os.MkdirTemp("", "hs")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e: suite root:", err)
		os.Exit(2)
	}
	// Symlinked temp dirs would hide processes from the prefix checks.
	if r, err := filepath.EvalSymlinks(root); err == nil {
		root = r
	}
	os.Setenv("TMPDIR", root)
	os.Setenv(suiteEnv, root)
	roots := []string{root}

	// go test's own timeout panics without running cleanups: sweep just before it.
	if f := flag.Lookup("test.timeout"); f != nil {
		if d, err := time.ParseDuration(f.Value.String()); err == nil && d > 0 {
			margin := min(30*time.Second, d/10)
			time.AfterFunc(d-margin, func() {
				fmt.Fprintf(os.Stderr, "e2e: %s before the -test.timeout deadline: ending every process under %s\n", margin, root)
				endUnder(roots, 10*time.Second)
			})
		}
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		s := <-sigs
		fmt.Fprintf(os.Stderr, "e2e: %v: ending every process under %s\n", s, root)
		endUnder(roots, 10*time.Second)
		os.Exit(2)
	}()

	code := m.Run()
	// Processes killed by the tests' cleanups may take a moment to be reaped.
	left := waitGone(roots, 10*time.Second)
	if len(left) > 0 {
		fmt.Fprintf(os.Stderr, "FAIL: %d process(es) started under %s outlived the suite:\n", len(left), root)
		for _, p := range left {
			fmt.Fprintf(os.Stderr, "  %s\n", p)
		}
		endUnder(roots, 10*time.Second)
		code = 1
	}
	unmountUnder(root)
	if err := os.RemoveAll(root); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: suite root %s not fully removed: %v\n", root, err)
	}
	os.Exit(code)
}

// procInfo is a process found under a folder.
type procInfo struct {
	pid, pgid int
	cwd, exe  string
	cmd       string
}

func (p procInfo) String() string {
	return fmt.Sprintf("pid %d pgid %d cwd %s exe %s: %s", p.pid, p.pgid, p.cwd, p.exe, p.cmd)
}

// under reports whether path (a /proc link target, perhaps " (deleted)") lies in one of roots.
func under(path string, roots []string) bool {
	path = strings.TrimSuffix(path, " (deleted)")
	for _, r := range roots {
		if path == r || strings.HasPrefix(path, r+string(filepath.Separator)) {
			return true
		}
	}
	return false
}

// procsUnder lists the live processes (zombies excluded) other than this one whose working
// directory or executable lies under one of roots, or whose environment names one of them as
// the suite root.
func procsUnder(roots []string) []procInfo {
	self := os.Getpid()
	entries, _ := os.ReadDir("/proc")
	var out []procInfo
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		dir := filepath.Join("/proc", e.Name())
		stat, err := os.ReadFile(filepath.Join(dir, "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp ...: comm may hold spaces and parentheses.
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(stat[i+1:]))
		if len(f) < 3 || f[0] == "Z" || f[0] == "X" {
			continue
		}
		pgid, _ := strconv.Atoi(f[2])
		cwd, _ := os.Readlink(filepath.Join(dir, "cwd"))
		exe, _ := os.Readlink(filepath.Join(dir, "exe"))
		hit := under(cwd, roots) || under(exe, roots)
		if !hit {
			env, _ := os.ReadFile(filepath.Join(dir, "environ"))
			for _, kv := range bytes.Split(env, []byte{0}) {
				if v, ok := bytes.CutPrefix(kv, []byte(suiteEnv+"=")); ok && under(string(v), roots) {
					hit = true
					break
				}
			}
		}
		if !hit {
			continue
		}
		cmd, _ := os.ReadFile(filepath.Join(dir, "cmdline"))
		out = append(out, procInfo{pid: pid, pgid: pgid, cwd: cwd, exe: exe,
			cmd: strings.TrimSpace(string(bytes.ReplaceAll(cmd, []byte{0}, []byte{' '})))})
	}
	return out
}

// endUnder kills the process group of every process under roots (just the process when it
// shares this test binary's group) and waits up to d for them to be gone; it returns those
// still there.
func endUnder(roots []string, d time.Duration) []procInfo {
	own := syscall.Getpgrp()
	for _, p := range procsUnder(roots) {
		if p.pgid > 1 && p.pgid != own {
			_ = syscall.Kill(-p.pgid, syscall.SIGKILL)
		}
		_ = syscall.Kill(p.pid, syscall.SIGKILL)
	}
	return waitGone(roots, d)
}

// waitGone waits up to d for no process to be left under roots and returns those left.
func waitGone(roots []string, d time.Duration) []procInfo {
	deadline := time.Now().Add(d)
	for {
		left := procsUnder(roots)
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// unmountUnder detaches what Nomad clients left mounted under dir (tmpfs secrets dirs).
func unmountUnder(dir string) {
	mounts, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		return
	}
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

// TestProcsUnder: the sweep finds a process by its working directory and by the marker in its
// environment, ends it by its process group (a child in the same group goes with it), and
// leaves a process outside the folder alone.
func TestProcsUnder(t *testing.T) {
	skipUnlessLinux(t)
	dir := t.TempDir()
	outside, err := os.MkdirTemp(os.Getenv("HOME"), "e2e-outside-")
	must(t, err)
	defer os.RemoveAll(outside)
	if under(outside, []string{dir}) {
		t.Fatalf("%s counted under %s", outside, dir)
	}
	start := func(cwd string, env ...string) *osProcess {
		t.Helper()
		// sh with a child in its group: the group kill must take both.
		p, err := os.StartProcess("/bin/sh", []string{"sh", "-c", "sleep 300 & sleep 300"},
			&os.ProcAttr{Dir: cwd, Env: env, Sys: &syscall.SysProcAttr{Setpgid: true}})
		must(t, err)
		op := &osProcess{p: p, done: make(chan struct{})}
		go func() { _, _ = p.Wait(); close(op.done) }()
		t.Cleanup(func() { _ = syscall.Kill(-p.Pid, syscall.SIGKILL); <-op.done })
		return op
	}
	byCwd := start(dir)
	byEnv := start(outside, suiteEnv+"="+dir, "PATH="+os.Getenv("PATH"))
	other := start(outside)
	// Each sh and its sleeps (dash keeps the sh), found by the sh's group.
	waitFor(t, 5*time.Second, "the test processes and their children", func() bool {
		members := map[int]int{}
		for _, p := range procsUnder([]string{dir}) {
			members[p.pgid]++
		}
		return members[byCwd.p.Pid] >= 2 && members[byEnv.p.Pid] >= 2
	}, func() string { return fmt.Sprint(procsUnder([]string{dir})) })
	for _, p := range procsUnder([]string{dir}) {
		if p.pgid != byCwd.p.Pid && p.pgid != byEnv.p.Pid {
			t.Errorf("found %s, not started under %s", p, dir)
		}
	}
	if left := endUnder([]string{dir}, 5*time.Second); len(left) != 0 {
		t.Fatalf("left after the sweep: %v", left)
	}
	for name, p := range map[string]*osProcess{"by cwd": byCwd, "by env": byEnv} {
		select {
		case <-p.done:
		case <-time.After(5 * time.Second):
			t.Errorf("the process found %s still runs", name)
		}
	}
	select {
	case <-other.done:
		t.Error("the sweep killed a process outside the folder")
	default:
	}
}

type osProcess struct {
	p    *os.Process
	done chan struct{}
}
