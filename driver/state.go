package driver

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hetgpu/hetgpu/driver/shim"
	"github.com/hetgpu/hetgpu/driver/telemetry"
)

// taskHandleVersion is TaskHandle.version (Nomad reserves 0).
const taskHandleVersion = 1

// driverStateVersion versions the JSON in TaskHandle.driver_state.
const driverStateVersion = 1

// driverState is what Nomad stores for us in TaskHandle.driver_state and hands back to
// RecoverTask: enough to find the shim and task again and continue the telemetry.
type driverState struct {
	Version     int         `json:"version"`
	Shim        shim.Handle `json:"shim"`
	Config      TaskConfig  `json:"config"`
	GPUs        []string    `json:"gpus,omitempty"`
	MetricsFile string      `json:"metrics_file"`
	StartedAt   time.Time   `json:"started_at"`
	// MPSGPU is the GPU whose MPS daemon the task is a client of (slot tasks only).
	MPSGPU string `json:"mps_gpu,omitempty"`
}

func encodeDriverState(s *driverState) ([]byte, error) {
	s.Version = driverStateVersion
	return json.Marshal(s)
}

func decodeDriverState(b []byte) (*driverState, error) {
	if len(b) == 0 {
		return nil, errors.New("task handle has no driver_state")
	}
	var s driverState
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("decode driver_state: %w", err)
	}
	if s.Version < 1 || s.Version > driverStateVersion {
		return nil, fmt.Errorf("driver_state version %d, this driver understands 1..%d", s.Version, driverStateVersion)
	}
	if s.Shim.Dir == "" || s.Shim.ShimPID <= 0 {
		return nil, errors.New("driver_state has no shim directory or pid")
	}
	return &s, nil
}

// Files the driver keeps next to the shim's, in the task's shim directory.
const (
	checkpointFile = "telemetry.json" // telemetry so far, for a restarted driver
	powerFile      = "power.json"     // power limits to restore (written before applying)
	reportedFile   = "reported"       // the run record is spooled; never report twice
)

// checkpoint is the telemetry state saved every few seconds.
type checkpoint struct {
	Sampler  telemetry.Checkpoint    `json:"sampler"`
	Offset   int64                   `json:"metrics_offset"`
	Progress telemetry.ProgressState `json:"progress"`
	// LastReported is the throughput of the latest "measured" event.
	LastReported float64 `json:"last_reported,omitempty"`
}

func writeJSONFile(path string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func readJSONFile(path string, v any) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	return json.Unmarshal(data, v)
}

// sanitizeID turns Nomad's task ID ("<alloc>/<task>/<hash>") into one path element.
func sanitizeID(id string) string {
	var b strings.Builder
	for _, r := range id {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '.' {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	s := strings.TrimLeft(b.String(), ".")
	if s == "" {
		s = "task"
	}
	return s
}

// ensurePrivateDir creates dir (mode 0700) and refuses one another user owns: the default
// state directory may live in a world-writable /tmp.
func ensurePrivateDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("stat %s: %w", dir, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a directory", dir)
	}
	if uid, ok := fileOwner(fi); ok && uid != uint32(os.Geteuid()) {
		return fmt.Errorf("%s is owned by uid %d, not by the driver's uid %d", dir, uid, os.Geteuid())
	}
	return nil
}

func taskShimDir(stateDir, taskID string) string {
	return filepath.Join(stateDir, "tasks", sanitizeID(taskID))
}
