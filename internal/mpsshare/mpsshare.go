// Package mpsshare holds what the task driver, the fake GPUs and the toy workload agree on
// about a GPU shared under MPS: where the driver lists a GPU's MPS clients (one file per
// task in the GPU's pipe directory) and how fast co-runners go on a fake GPU.
package mpsshare

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// ClientsDir is the directory inside a GPU's CUDA_MPS_PIPE_DIRECTORY where the driver keeps
// one file per task running as an MPS client of that GPU.
const ClientsDir = "hetgpu-clients"

// Client is one task's entry.
type Client struct {
	TaskID    string `json:"task_id"`
	ThreadPct int    `json:"thread_pct"`
	// ModelName and BatchSize are the task's hetgpu annotations (for the co-runner of run
	// records).
	ModelName string `json:"model_name,omitempty"`
	BatchSize int    `json:"batch_size,omitempty"`
	Job       string `json:"job,omitempty"`
	// PID is the task's root process (0 until the task started): NVML's per-process
	// utilisation samples of its process tree are its measured share of the GPU.
	PID int `json:"pid,omitempty"`
}

// FakeInterference is the fake GPUs' co-location model: each of n MPS clients on one GPU runs
// at 1/(1 + FakeInterference*(n-1)) of its speed alone. Two clients then reach 2/1.3 = 1.54
// times one job's throughput together, within the range Gavel measured for pairs on V100
// (about 1.1 to 1.9).
const FakeInterference = 0.3

// FakeSpeed is the speed of one of n clients relative to running alone.
func FakeSpeed(n int) float64 {
	if n <= 1 {
		return 1
	}
	return 1 / (1 + FakeInterference*float64(n-1))
}

// FakeClientLoad is the SM utilisation (0..1) one MPS client shows on a fake GPU: a busy task
// (busy, 0..1) keeps at most its active-thread percentage of the SMs busy (0 or over 100:
// uncapped).
func FakeClientLoad(busy float64, threadPct int) float64 {
	if threadPct <= 0 || threadPct > 100 {
		threadPct = 100
	}
	return busy * float64(threadPct) / 100
}

// fileName keeps a task ID usable as a file name.
func fileName(taskID string) string {
	return strings.NewReplacer("/", "_", "\x00", "_", "..", "__").Replace(taskID) + ".json"
}

// Register writes a client's entry.
func Register(pipeDir string, c Client) error {
	dir := filepath.Join(pipeDir, ClientsDir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("MPS client registry %s: %w", dir, err)
	}
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, "."+fileName(c.TaskID)+".tmp")
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return fmt.Errorf("MPS client registry: %w", err)
	}
	return os.Rename(tmp, filepath.Join(dir, fileName(c.TaskID)))
}

// Unregister removes a client's entry (no error when it is gone).
func Unregister(pipeDir, taskID string) error {
	err := os.Remove(filepath.Join(pipeDir, ClientsDir, fileName(taskID)))
	if err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("MPS client registry: %w", err)
	}
	return nil
}

// Clients lists the entries of a GPU, ordered by task ID; unreadable entries are skipped.
func Clients(pipeDir string) []Client {
	ents, err := os.ReadDir(filepath.Join(pipeDir, ClientsDir))
	if err != nil {
		return nil
	}
	var out []Client
	for _, e := range ents {
		if e.IsDir() || strings.HasPrefix(e.Name(), ".") || !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(pipeDir, ClientsDir, e.Name()))
		if err != nil {
			continue
		}
		var c Client
		if json.Unmarshal(b, &c) == nil {
			out = append(out, c)
		}
	}
	sort.Slice(out, func(a, b int) bool { return out[a].TaskID < out[b].TaskID })
	return out
}
