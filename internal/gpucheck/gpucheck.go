// Package gpucheck holds what the device plugin's and the task driver's real-GPU checks
// (make gpu-check; docs/gpu-check.md) share: the environment they read, the NVML session they
// open and the folder their JSON results go to. Only tests import it.
package gpucheck

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Environment of the GPU check.
const (
	Env    = "HETGPU_GPU_CHECK"     // "real" or "fake"; unset: the check's tests skip
	EnvOut = "HETGPU_GPU_CHECK_OUT" // folder for the JSON results
)

// Mode is the check's mode from Env, "real" or "fake". Unset, it skips the test; any other
// value fails it.
func Mode(t testing.TB) string {
	t.Helper()
	switch mode := os.Getenv(Env); mode {
	case "real", "fake":
		return mode
	case "":
		t.Skipf("%s is not set: the real-GPU check runs with make gpu-check (on a GPU machine) or make gpu-check-dry", Env)
	default:
		t.Fatalf("%s = %q: expected real or fake", Env, mode)
	}
	return ""
}

// Dir is the folder the check's JSON results go to.
type Dir string

// Open initialises lib for the test (shut down when it ends) and returns the folder for the
// results: EnvOut, or a temporary folder when it is unset.
func Open(t testing.TB, lib nvml.Interface) Dir {
	t.Helper()
	if r := lib.Init(); r != nvml.SUCCESS {
		t.Fatalf("NVML Init: %s (is the NVIDIA driver loaded? nvidia-smi must work)", r.Error())
	}
	t.Cleanup(func() { lib.Shutdown() })
	out := os.Getenv(EnvOut)
	if out == "" {
		out = t.TempDir()
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	return Dir(out)
}

// Write saves v as indented JSON in the file name of d.
func (d Dir) Write(t testing.TB, name string, v any) {
	t.Helper()
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(string(d), name), append(b, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
}
