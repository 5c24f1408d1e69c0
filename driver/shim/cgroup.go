package shim

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// DefaultCgroupRoot is where the unified (v2) hierarchy is mounted on current distributions.
const DefaultCgroupRoot = "/sys/fs/cgroup"

// CgroupLimits are the task's resource limits in cgroup v2 terms; zero values leave the
// kernel default (unlimited).
type CgroupLimits struct {
	MemoryMaxBytes int64
	// MemoryLowBytes protects the reservation when a larger hard limit allows bursting
	// (Nomad's memory_mb below memory_max_mb).
	MemoryLowBytes int64
	CPUWeight      uint64
	CPUQuotaUS     int64
	CPUPeriodUS    int64
	Cpuset         string
}

// CPUWeightFromShares converts cgroup v1 cpu.shares (Nomad's cpu_shares, MHz) to cgroup v2
// cpu.weight with the mapping container runtimes use, so the relative weights match theirs.
func CPUWeightFromShares(shares int64) uint64 {
	if shares <= 0 {
		return 0
	}
	shares = min(max(shares, 2), 262144)
	return uint64(1 + ((shares-2)*9999)/262142)
}

// CgroupV2Controllers returns the controllers available at the root of a cgroup v2
// hierarchy, or an error saying why cgroup v2 cannot be used there.
func CgroupV2Controllers(root string) ([]string, error) {
	data, err := os.ReadFile(filepath.Join(root, "cgroup.controllers"))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("%s is not a cgroup v2 (unified) mount: no cgroup.controllers", root)
		}
		return nil, fmt.Errorf("cgroup v2 at %s: %w", root, err)
	}
	return strings.Fields(string(data)), nil
}

// CreateCgroup creates the cgroup dir (absolute, below root), enables the memory, cpu and
// cpuset controllers on the way down where the kernel offers them, and writes the limits.
// Limits that cannot be applied are returned as warnings, not errors: a task without a CPU
// weight still runs. The error is for a cgroup that cannot be created at all.
func CreateCgroup(root, dir string, l CgroupLimits) (warnings []string, err error) {
	rel, err := filepath.Rel(root, dir)
	if err != nil || rel == "." || strings.HasPrefix(rel, "..") {
		return nil, fmt.Errorf("cgroup %s is not below the cgroup root %s", dir, root)
	}
	avail, err := CgroupV2Controllers(root)
	if err != nil {
		return nil, err
	}
	want := []string{"memory", "cpu"}
	if l.Cpuset != "" {
		want = append(want, "cpuset")
	}
	// Enable the wanted controllers in every ancestor's subtree_control, top down.
	parts := strings.Split(rel, string(filepath.Separator))
	cur := root
	for i, p := range parts {
		if i > 0 {
			if err := os.Mkdir(cur, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
				return warnings, fmt.Errorf("create cgroup %s: %w", cur, err)
			}
		}
		if err := enableControllers(cur, avail, want); err != nil {
			warnings = append(warnings, fmt.Sprintf("controllers %v not enabled in %s: %v", want, cur, err))
		}
		cur = filepath.Join(cur, p)
	}
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return warnings, fmt.Errorf("create cgroup %s: %w", dir, err)
	}
	write := func(file, value string) {
		if err := os.WriteFile(filepath.Join(dir, file), []byte(value), 0o644); err != nil {
			warnings = append(warnings, fmt.Sprintf("%s=%s not applied: %v", file, value, err))
		}
	}
	if l.MemoryMaxBytes > 0 {
		write("memory.max", strconv.FormatInt(l.MemoryMaxBytes, 10))
		// Without swap limit a task over memory.max swaps instead of being OOM-killed.
		write("memory.swap.max", "0")
	}
	if l.MemoryLowBytes > 0 {
		write("memory.low", strconv.FormatInt(l.MemoryLowBytes, 10))
	}
	if l.CPUWeight > 0 {
		write("cpu.weight", strconv.FormatUint(l.CPUWeight, 10))
	}
	if l.CPUQuotaUS > 0 && l.CPUPeriodUS > 0 {
		write("cpu.max", fmt.Sprintf("%d %d", l.CPUQuotaUS, l.CPUPeriodUS))
	}
	if l.Cpuset != "" {
		write("cpuset.cpus", l.Cpuset)
	}
	return warnings, nil
}

// enableControllers adds the wanted controllers the kernel offers to dir's
// cgroup.subtree_control, in one write, unless they are already there.
func enableControllers(dir string, avail, want []string) error {
	path := filepath.Join(dir, "cgroup.subtree_control")
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	have := strings.Fields(string(data))
	var add []string
	for _, c := range want {
		if slices.Contains(avail, c) && !slices.Contains(have, c) {
			add = append(add, "+"+c)
		}
	}
	if len(add) == 0 {
		return nil
	}
	return os.WriteFile(path, []byte(strings.Join(add, " ")), 0o644)
}

// KillCgroup kills every process in the cgroup (cgroup.kill, Linux 5.14+).
func KillCgroup(dir string) error {
	if dir == "" {
		return nil
	}
	return os.WriteFile(filepath.Join(dir, "cgroup.kill"), []byte("1"), 0o644)
}

// RemoveCgroup removes the (empty) cgroup directory; a missing one is fine.
func RemoveCgroup(dir string) error {
	if dir == "" {
		return nil
	}
	if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove cgroup %s: %w", dir, err)
	}
	return nil
}

// CgroupMemoryCurrent is memory.current: all memory charged to the task, page cache included.
func CgroupMemoryCurrent(dir string) (uint64, error) {
	data, err := os.ReadFile(filepath.Join(dir, "memory.current"))
	if err != nil {
		return 0, err
	}
	return strconv.ParseUint(string(bytes.TrimSpace(data)), 10, 64)
}

// CgroupOOMKills is the oom_kill counter of memory.events.
func CgroupOOMKills(dir string) (uint64, error) {
	f, err := os.Open(filepath.Join(dir, "memory.events"))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), " ")
		if ok && k == "oom_kill" {
			return strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		}
	}
	return 0, sc.Err()
}
