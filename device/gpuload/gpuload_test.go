package gpuload

import (
	"errors"
	"os"
	"testing"
	"time"
)

// Without the NVIDIA driver the load says so (the real-GPU check then checks the energy
// counter at idle); with it, make gpu-check's device tests run it.
func TestRunWithoutDriver(t *testing.T) {
	for _, dir := range []string{"/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib", "/usr/local/nvidia/lib64"} {
		if _, err := os.Stat(dir + "/libcuda.so.1"); err == nil {
			t.Skipf("%s/libcuda.so.1 exists: the GPU check (make gpu-check) runs the load", dir)
		}
	}
	_, err := Run("0000:00:00.0", time.Second, 1<<20)
	if !errors.Is(err, ErrNoDriver) {
		t.Fatalf("Run without libcuda = %v, want ErrNoDriver", err)
	}
}
