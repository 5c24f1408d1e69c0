// Package shim runs one task under a small supervisor process: the driver binary re-executed
// in shim mode, in its own session. The shim is the task's parent: it opens Nomad's log FIFOs,
// starts the task (as the task's user, in its cgroup), forwards signals to the task's process
// group, waits for it and records the exit status atomically in a state file. Because the shim
// is not in the driver's session, tasks outlive the driver process, and a restarted driver
// finds them again from a Handle (pids guarded by their start times against pid reuse).
package shim

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// Command is argv[1] that switches the driver binary into shim mode.
const Command = "shim"

// specVersion and stateVersion let a newer driver read files written by an older shim.
const (
	specVersion  = 1
	stateVersion = 1
)

// File names inside a task's shim directory.
const (
	SpecFile  = "spec.json"
	StateFile = "state.json"
	LogFile   = "shim.log"
)

// Spec is everything the shim needs to start the task. The driver writes it (mode 0600:
// it holds the task's environment, secrets included) and passes its path to the shim.
type Spec struct {
	Version int      `json:"version"`
	Command string   `json:"command"`
	Args    []string `json:"args,omitempty"`
	// Env is the task's complete environment, KEY=VALUE.
	Env []string `json:"env,omitempty"`
	// Dir is the working directory.
	Dir string `json:"dir,omitempty"`
	// StdoutPath and StderrPath are Nomad's log FIFOs (or plain files); empty means /dev/null.
	StdoutPath string `json:"stdout_path,omitempty"`
	StderrPath string `json:"stderr_path,omitempty"`
	// Credential, when set, is the user the task runs as (needs root).
	Credential *Credential `json:"credential,omitempty"`
	// CgroupDir, when set, is the cgroup v2 directory the task is started in.
	CgroupDir string `json:"cgroup_dir,omitempty"`
	// MetricsFile and MetricsRegex: when the regex is set the shim tees the task's stdout,
	// and every matching line is appended to MetricsFile as a JSON metrics line.
	MetricsFile  string `json:"metrics_file,omitempty"`
	MetricsRegex string `json:"metrics_regex,omitempty"`
}

// Credential is a resolved user.
type Credential struct {
	Username string   `json:"username"`
	UID      uint32   `json:"uid"`
	GID      uint32   `json:"gid"`
	Groups   []uint32 `json:"groups,omitempty"`
}

// State is what the shim records about the task: written once when the task started (or
// failed to start) and once more when it exited.
type State struct {
	Version   int       `json:"version"`
	ShimPID   int       `json:"shim_pid"`
	TaskPID   int       `json:"task_pid,omitempty"`
	TaskStart uint64    `json:"task_start,omitempty"`
	StartedAt time.Time `json:"started_at,omitzero"`
	// StartError is why the task could not be started; the shim exits right after.
	StartError string `json:"start_error,omitempty"`
	Exited     bool   `json:"exited"`
	// ExitCode follows the shell convention: 128+signal when the task died of a signal.
	ExitCode   int       `json:"exit_code"`
	Signal     int       `json:"signal,omitempty"`
	OOMKilled  bool      `json:"oom_killed,omitempty"`
	FinishedAt time.Time `json:"finished_at,omitzero"`
}

// writeJSONAtomic writes v to path through a temporary file, fsync and rename, so a reader
// (or a crash) never sees a half-written file.
func writeJSONAtomic(path string, v any, mode os.FileMode) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encode %s: %w", filepath.Base(path), err)
	}
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer os.Remove(tmp.Name()) // no-op after a successful rename
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync() // make the rename durable; best effort
		d.Close()
	}
	return nil
}

// WriteSpec stores the spec in dir and returns its path.
func WriteSpec(dir string, spec *Spec) (string, error) {
	s := *spec
	s.Version = specVersion
	path := filepath.Join(dir, SpecFile)
	return path, writeJSONAtomic(path, &s, 0o600)
}

// ReadSpec loads a spec written by WriteSpec.
func ReadSpec(path string) (*Spec, error) {
	s, err := readJSON[Spec](path, "spec")
	switch {
	case err != nil:
		return nil, err
	case s.Version > specVersion:
		return nil, fmt.Errorf("shim spec %s has version %d, this binary understands up to %d", path, s.Version, specVersion)
	case s.Command == "":
		return nil, fmt.Errorf("shim spec %s: command is empty", path)
	}
	return s, nil
}

// ReadState loads the state file; it returns an error wrapping os.ErrNotExist before the
// shim wrote it.
func ReadState(path string) (*State, error) { return readJSON[State](path, "state") }

// readJSON decodes the shim file at path; what names it in errors.
func readJSON[T any](path, what string) (*T, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read shim %s: %w", what, err)
	}
	var v T
	if err := json.Unmarshal(data, &v); err != nil {
		return nil, fmt.Errorf("decode shim %s %s: %w", what, path, err)
	}
	return &v, nil
}

func writeState(path string, s *State) error {
	s.Version = stateVersion
	return writeJSONAtomic(path, s, 0o644)
}
