package shim

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"syscall"
)

// ProcStat is the part of /proc/<pid>/stat the driver needs.
type ProcStat struct {
	PID   int
	State byte
	PPID  int
	PGID  int
	// UTime and STime are CPU time in clock ticks; RSSPages is the resident set in pages.
	UTime, STime uint64
	// StartTime is the start time in clock ticks after boot: together with the pid it
	// identifies a process, because pids are reused but never at the same start time.
	StartTime uint64
	RSSPages  int64
}

// ReadProcStat parses /proc/<pid>/stat under procRoot ("/proc").
func ReadProcStat(procRoot string, pid int) (*ProcStat, error) {
	data, err := os.ReadFile(procRoot + "/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil, err
	}
	return ParseProcStat(data)
}

// ParseProcStat parses the contents of a /proc/<pid>/stat file. The command name is in
// parentheses and may itself contain spaces and parentheses, so fields are counted from the
// last ')'.
func ParseProcStat(data []byte) (*ProcStat, error) {
	open := bytes.IndexByte(data, '(')
	end := bytes.LastIndexByte(data, ')')
	if open < 1 || end < open {
		return nil, errors.New("proc stat: no command name in parentheses")
	}
	pid, err := strconv.Atoi(string(bytes.TrimSpace(data[:open])))
	if err != nil {
		return nil, fmt.Errorf("proc stat: pid: %w", err)
	}
	// Fields after the command name, starting with field 3 (state).
	f := bytes.Fields(data[end+1:])
	if len(f) < 22 {
		return nil, fmt.Errorf("proc stat: %d fields after the command name, want at least 22", len(f))
	}
	num := func(i int) (uint64, error) { return strconv.ParseUint(string(f[i]), 10, 64) }
	st := &ProcStat{PID: pid}
	if len(f[0]) != 1 {
		return nil, fmt.Errorf("proc stat: state %q", f[0])
	}
	st.State = f[0][0]
	ppid, err := strconv.Atoi(string(f[1]))
	if err != nil {
		return nil, fmt.Errorf("proc stat: ppid: %w", err)
	}
	st.PPID = ppid
	pgid, err := strconv.Atoi(string(f[2]))
	if err != nil {
		return nil, fmt.Errorf("proc stat: pgrp: %w", err)
	}
	st.PGID = pgid
	// Field numbers from proc(5), minus 3 for the offset of f.
	if st.UTime, err = num(14 - 3); err != nil {
		return nil, fmt.Errorf("proc stat: utime: %w", err)
	}
	if st.STime, err = num(15 - 3); err != nil {
		return nil, fmt.Errorf("proc stat: stime: %w", err)
	}
	if st.StartTime, err = num(22 - 3); err != nil {
		return nil, fmt.Errorf("proc stat: starttime: %w", err)
	}
	rss, err := strconv.ParseInt(string(f[24-3]), 10, 64)
	if err != nil {
		return nil, fmt.Errorf("proc stat: rss: %w", err)
	}
	st.RSSPages = rss
	return st, nil
}

// Alive reports whether pid is a live (not zombie) process that started at startTime.
// startTime 0 skips the identity check.
func Alive(procRoot string, pid int, startTime uint64) bool {
	if pid <= 0 {
		return false
	}
	st, err := ReadProcStat(procRoot, pid)
	if err != nil {
		return false
	}
	if startTime != 0 && st.StartTime != startTime {
		return false // the pid was reused by another process
	}
	// A zombie has exited; its parent (maybe init, after a driver restart) has not reaped it.
	return st.State != 'Z' && st.State != 'X'
}

// signalGroup sends sig to the process group led by pid, falling back to the process itself
// when the group is gone (e.g. the task changed its own process group).
func signalGroup(pid int, sig syscall.Signal) error {
	err := syscall.Kill(-pid, sig)
	if errors.Is(err, syscall.ESRCH) {
		err = syscall.Kill(pid, sig)
	}
	return err
}
