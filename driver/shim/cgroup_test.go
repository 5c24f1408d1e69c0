package shim

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeCgroupRoot builds a directory that looks like a cgroup v2 root to our code.
func fakeCgroupRoot(t *testing.T, controllers string) string {
	t.Helper()
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "cgroup.controllers"), []byte(controllers+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "cgroup.subtree_control"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	return root
}

func readTrim(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	return strings.TrimSpace(string(b))
}

func TestCreateCgroupWritesLimits(t *testing.T) {
	root := fakeCgroupRoot(t, "cpuset cpu io memory pids")
	// The parent exists in a real hierarchy once created; give it a subtree_control file.
	parent := filepath.Join(root, "hetgpu.slice")
	if err := os.MkdirAll(parent, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(parent, "cgroup.subtree_control"), []byte("memory\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(parent, "task.scope")
	warn, err := CreateCgroup(root, dir, CgroupLimits{
		MemoryMaxBytes: 512 << 20, MemoryLowBytes: 256 << 20, CPUWeight: 100, CPUQuotaUS: 50000, CPUPeriodUS: 100000,
		Cpuset: "0-1",
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(warn) != 0 {
		t.Errorf("warnings: %v", warn)
	}
	for file, want := range map[string]string{
		"memory.max":      "536870912",
		"memory.low":      "268435456",
		"memory.swap.max": "0",
		"cpu.weight":      "100",
		"cpu.max":         "50000 100000",
		"cpuset.cpus":     "0-1",
	} {
		if got := readTrim(t, filepath.Join(dir, file)); got != want {
			t.Errorf("%s = %q, want %q", file, got, want)
		}
	}
	if got := readTrim(t, filepath.Join(root, "cgroup.subtree_control")); got != "+memory +cpu +cpuset" {
		t.Errorf("root subtree_control = %q", got)
	}
	// memory was already on in the parent: only the missing ones are added.
	if got := readTrim(t, filepath.Join(parent, "cgroup.subtree_control")); got != "+cpu +cpuset" {
		t.Errorf("parent subtree_control = %q", got)
	}
}

func TestCreateCgroupDegrades(t *testing.T) {
	t.Run("not cgroup v2", func(t *testing.T) {
		root := t.TempDir()
		_, err := CreateCgroup(root, filepath.Join(root, "x", "y"), CgroupLimits{})
		if err == nil || !strings.Contains(err.Error(), "not a cgroup v2") {
			t.Fatalf("error = %v", err)
		}
	})
	t.Run("outside root", func(t *testing.T) {
		root := fakeCgroupRoot(t, "memory")
		if _, err := CreateCgroup(root, "/elsewhere/x", CgroupLimits{}); err == nil {
			t.Fatal("want error for a cgroup outside the root")
		}
	})
	t.Run("no controllers: warnings only", func(t *testing.T) {
		root := fakeCgroupRoot(t, "io pids")
		dir := filepath.Join(root, "t.scope")
		// Without the cpu controller cpu.weight cannot be written in a real hierarchy;
		// make that so here with a directory in its place.
		if err := os.MkdirAll(filepath.Join(dir, "cpu.weight"), 0o755); err != nil {
			t.Fatal(err)
		}
		warn, err := CreateCgroup(root, dir, CgroupLimits{CPUWeight: 10})
		if err != nil {
			t.Fatal(err)
		}
		if len(warn) != 1 || !strings.Contains(warn[0], "cpu.weight") {
			t.Fatalf("warnings = %v, want one about cpu.weight", warn)
		}
		if got := readTrim(t, filepath.Join(root, "cgroup.subtree_control")); got != "" {
			t.Errorf("enabled unavailable controllers: %q", got)
		}
	})
}

func TestCPUWeightFromShares(t *testing.T) {
	tests := []struct {
		shares int64
		want   uint64
	}{
		{0, 0}, {-5, 0}, {2, 1}, {1024, 39}, {262144, 10000}, {1 << 40, 10000},
	}
	for _, tc := range tests {
		if got := CPUWeightFromShares(tc.shares); got != tc.want {
			t.Errorf("CPUWeightFromShares(%d) = %d, want %d", tc.shares, got, tc.want)
		}
	}
}

func TestCgroupCounters(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "memory.current"), []byte("12345\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "memory.events"), []byte("low 0\nhigh 0\nmax 3\noom 1\noom_kill 2\n"), 0o644)
	if v, err := CgroupMemoryCurrent(dir); err != nil || v != 12345 {
		t.Errorf("memory.current = %d, %v", v, err)
	}
	if v, err := CgroupOOMKills(dir); err != nil || v != 2 {
		t.Errorf("oom_kill = %d, %v", v, err)
	}
}
