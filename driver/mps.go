package driver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/hetgpu/hetgpu/internal/mpsshare"
	"github.com/hetgpu/hetgpu/internal/tick"
	"github.com/hetgpu/hetgpu/model/cluster"
	"github.com/hetgpu/hetgpu/plugin"
)

// A task on GPU slots (the device plugin's `sharing` block) runs as an MPS client of one MPS
// control daemon per physical GPU. The daemon of a GPU is started with that GPU alone visible
// and its own pipe and log directories (<mps_pipe_dir>/<GPU UUID>, <mps_log_dir>/<GPU UUID>),
// when the first slot task of the GPU starts; a supervisor restarts it when it dies while
// clients remain, and it is told to quit when the GPU's last client ended. The slot's limits
// reach the task as MPS's own client variables from the device plugin's reservation.

// Env variables of a slot reservation (set by the hetgpu device plugin's Reserve).
const (
	envMPSGPUs   = "HETGPU_MPS_GPUS"
	envSlotIDs   = "HETGPU_SLOT_IDS"
	envThreadPct = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
	envPinnedMem = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"
	envPipeDir   = "CUDA_MPS_PIPE_DIRECTORY"
	envLogDir    = "CUDA_MPS_LOG_DIRECTORY"
	mpsPidFile   = "nvidia-cuda-mps-control.pid"
)

// mpsSuperviseInterval is how often the supervisor checks the daemons.
const mpsSuperviseInterval = 2 * time.Second

// mpsLauncher starts, stops and checks the control daemon of one GPU.
type mpsLauncher interface {
	Start(uuid, pipeDir, logDir string) error
	Stop(pipeDir, logDir string) error
	Alive(pipeDir string) bool
}

// realMPS runs nvidia-cuda-mps-control.
type realMPS struct{ exe string }

func (r realMPS) Start(uuid, pipeDir, logDir string) error {
	cmd := exec.Command(r.exe, "-d")
	cmd.Env = append(os.Environ(), "CUDA_VISIBLE_DEVICES="+uuid, envPipeDir+"="+pipeDir, envLogDir+"="+logDir)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s -d for GPU %s: %w: %s", r.exe, uuid, err, strings.TrimSpace(string(out)))
	}
	// -d forks the daemon; it writes its pid file once it listens.
	for range 50 {
		if r.Alive(pipeDir) {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("%s -d for GPU %s: no live daemon in %s after 5s (see %s)", r.exe, uuid, pipeDir, logDir)
}

func (r realMPS) Stop(pipeDir, logDir string) error {
	cmd := exec.Command(r.exe)
	cmd.Env = append(os.Environ(), envPipeDir+"="+pipeDir, envLogDir+"="+logDir)
	cmd.Stdin = strings.NewReader("quit\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("quit the MPS daemon of %s: %w: %s", pipeDir, err, strings.TrimSpace(string(out)))
	}
	return nil
}

func (realMPS) Alive(pipeDir string) bool { return pidFileAlive(filepath.Join(pipeDir, mpsPidFile)) }

// fakeMPS stands in for the daemon on fake GPUs: the pid file names the driver itself, so a
// daemon is "alive" while its pid file exists; tests remove it to simulate a crash.
type fakeMPS struct{}

func (fakeMPS) Start(_, pipeDir, _ string) error {
	return os.WriteFile(filepath.Join(pipeDir, mpsPidFile), []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644)
}

func (fakeMPS) Stop(pipeDir, _ string) error {
	if err := os.Remove(filepath.Join(pipeDir, mpsPidFile)); err != nil && !os.IsNotExist(err) {
		return err
	}
	return nil
}

func (fakeMPS) Alive(pipeDir string) bool { return pidFileAlive(filepath.Join(pipeDir, mpsPidFile)) }

func pidFileAlive(path string) bool {
	b, err := os.ReadFile(path)
	if err != nil {
		return false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return false
	}
	err = syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// mpsManager owns the per-GPU daemons and their client registries.
type mpsManager struct {
	logger            hclog.Logger
	pipeRoot, logRoot string
	launch            mpsLauncher

	mu   sync.Mutex
	gpus map[string]*mpsGPU
}

type mpsGPU struct {
	uuid            string
	pipeDir, logDir string
	clients         map[string]bool
	restarts        int
}

func newMPSManager(logger hclog.Logger, pipeRoot, logRoot string, launch mpsLauncher) *mpsManager {
	return &mpsManager{logger: logger, pipeRoot: pipeRoot, logRoot: logRoot, launch: launch, gpus: map[string]*mpsGPU{}}
}

// dirs are a GPU's pipe and log directories.
func (m *mpsManager) dirs(uuid string) (pipe, log string) {
	return filepath.Join(m.pipeRoot, sanitizeID(uuid)), filepath.Join(m.logRoot, sanitizeID(uuid))
}

// Attach makes c a client of the GPU's daemon, starting the daemon if needed, and returns the
// env the task needs to reach it.
func (m *mpsManager) Attach(uuid string, c mpsshare.Client) (map[string]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	g := m.gpus[uuid]
	if g == nil {
		pipe, log := m.dirs(uuid)
		g = &mpsGPU{uuid: uuid, pipeDir: pipe, logDir: log, clients: map[string]bool{}}
	}
	for _, d := range []string{g.pipeDir, g.logDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("MPS directory for GPU %s: %w", uuid, err)
		}
	}
	if !m.launch.Alive(g.pipeDir) {
		if err := m.launch.Start(uuid, g.pipeDir, g.logDir); err != nil {
			return nil, err
		}
		m.logger.Info("MPS control daemon started", "gpu", uuid, "pipe_dir", g.pipeDir)
	}
	if err := mpsshare.Register(g.pipeDir, c); err != nil {
		return nil, err
	}
	g.clients[c.TaskID] = true
	m.gpus[uuid] = g
	return map[string]string{envPipeDir: g.pipeDir, envLogDir: g.logDir}, nil
}

// Detach removes a task from a GPU's clients; the daemon quits with its last client.
func (m *mpsManager) Detach(uuid, taskID string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	g := m.gpus[uuid]
	if g == nil {
		pipe, _ := m.dirs(uuid)
		_ = mpsshare.Unregister(pipe, taskID)
		return
	}
	if err := mpsshare.Unregister(g.pipeDir, taskID); err != nil {
		m.logger.Warn("MPS client entry not removed", "gpu", uuid, "task_id", taskID, "error", err)
	}
	delete(g.clients, taskID)
	if len(g.clients) > 0 {
		return
	}
	delete(m.gpus, uuid)
	if err := m.launch.Stop(g.pipeDir, g.logDir); err != nil {
		m.logger.Warn("MPS control daemon did not quit", "gpu", uuid, "error", err)
		return
	}
	m.logger.Info("MPS control daemon stopped: no clients left", "gpu", uuid)
}

// CoRunners lists the other clients of a GPU.
func (m *mpsManager) CoRunners(uuid, taskID string) []mpsshare.Client {
	pipe, _ := m.dirs(uuid)
	var out []mpsshare.Client
	for _, c := range mpsshare.Clients(pipe) {
		if c.TaskID != taskID {
			out = append(out, c)
		}
	}
	return out
}

// Clients lists every client of a GPU.
func (m *mpsManager) Clients(uuid string) []mpsshare.Client {
	pipe, _ := m.dirs(uuid)
	return mpsshare.Clients(pipe)
}

// supervise restarts daemons that died while they still have clients.
func (m *mpsManager) supervise(ctx context.Context, interval time.Duration) {
	tick.Every(ctx, interval, m.check)
}

func (m *mpsManager) check() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, g := range m.gpus {
		if len(g.clients) == 0 || m.launch.Alive(g.pipeDir) {
			continue
		}
		g.restarts++
		if err := m.launch.Start(g.uuid, g.pipeDir, g.logDir); err != nil {
			m.logger.Error("MPS control daemon died and did not restart", "gpu", g.uuid, "restarts", g.restarts, "error", err)
			continue
		}
		m.logger.Warn("MPS control daemon died; restarted", "gpu", g.uuid, "restarts", g.restarts, "clients", len(g.clients))
	}
}

// Restarts reports how often a GPU's daemon was restarted.
func (m *mpsManager) Restarts(uuid string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if g := m.gpus[uuid]; g != nil {
		return g.restarts
	}
	return 0
}

// slotGPUs reads the GPUs of a slot reservation from the task env (nil: not on slots).
func slotGPUs(env map[string]string) []string {
	return visibleIDs(env[envMPSGPUs])
}

// slotClient is a task's entry in its GPU's client registry.
func slotClient(cfg interface {
	GetId() string
	GetEnv() map[string]string
	GetNamespace() string
	GetJobId() string
	GetTaskGroupName() string
}) mpsshare.Client {
	env := cfg.GetEnv()
	ann := parseAnnotations(env)
	pct, _ := strconv.Atoi(env[envThreadPct])
	return mpsshare.Client{TaskID: cfg.GetId(), ThreadPct: pct, ModelName: ann.ModelName, BatchSize: ann.BatchSize,
		Job: cfg.GetNamespace() + "/" + cfg.GetJobId() + "/" + cfg.GetTaskGroupName()}
}

// attachSlots makes a task on GPU slots an MPS client of its GPU's daemon and adds the pipe
// and log directories to env. It returns the GPU ("" when the task is not on slots) and the
// task event to emit.
func attachSlots(g *gpuBackend, cfg interface {
	GetId() string
	GetEnv() map[string]string
	GetNamespace() string
	GetJobId() string
	GetTaskGroupName() string
}, env map[string]string) (string, string, error) {
	ids := slotGPUs(env)
	if len(ids) == 0 {
		return "", "", nil
	}
	if g.slots == nil {
		return "", "", unrecoverable(fmt.Errorf("the task holds GPU slots (%s = %s), but MPS is not available on this node (%s)", envSlotIDs, env[envSlotIDs], g.mpsReason))
	}
	if len(ids) > 1 {
		return "", "", unrecoverable(fmt.Errorf("the task holds slots of %d GPUs (%s); MPS runs one daemon per GPU and a client reaches one daemon: ask for slots in one device block", len(ids), strings.Join(ids, ", ")))
	}
	c := slotClient(cfg)
	c.ThreadPct, _ = strconv.Atoi(env[envThreadPct])
	menv, err := g.slots.Attach(ids[0], c)
	if err != nil {
		return "", "", plugin.RecoverableError(fmt.Errorf("GPU slots: start the MPS control daemon: %w", err), true)
	}
	for k, v := range menv {
		env[k] = v
	}
	mem := env[envPinnedMem]
	if mem == "" {
		mem = "unlimited"
	}
	ev := fmt.Sprintf("MPS client of GPU %s (slots %s; active threads %s%%, pinned memory %s)", ids[0], env[envSlotIDs], env[envThreadPct], mem)
	return ids[0], ev, nil
}

// energyShare is the thread-cap split of a shared GPU's energy, the fallback of the measured
// split (see mpsutil.go) for intervals without per-process samples of the clients: a task's
// weight over the weights of all the GPU's MPS clients, the weight being the client's
// active-thread percentage (its SM share; 100 when uncapped). ok is false for a GPU without
// other clients (all energy is the task's).
func energyShare(clients []mpsshare.Client, taskID string) (float64, bool) {
	if len(clients) < 2 {
		return 1, false
	}
	total, own := 0.0, 0.0
	found := false
	for _, c := range clients {
		w := float64(c.ThreadPct)
		if w <= 0 {
			w = 100
		}
		total += w
		if c.TaskID == taskID {
			own, found = w, true
		}
	}
	if !found || total <= 0 {
		return 1, false
	}
	return own / total, true
}

// coRunners returns the task's current MPS co-runners and remembers every one seen.
func (h *taskHandle) coRunners() []mpsshare.Client {
	if h.st.MPSGPU == "" || h.gpu == nil || h.gpu.slots == nil {
		return nil
	}
	cur := h.gpu.slots.CoRunners(h.st.MPSGPU, h.cfg.GetId())
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.coSeen == nil {
		h.coSeen = map[string]mpsshare.Client{}
	}
	for _, c := range cur {
		h.coSeen[c.TaskID] = c
	}
	return cur
}

// setCoRunner names the co-runner in a run record: the one seen first by task ID order among
// those seen during the run (a pair is what the co-location predictor learns from).
func (h *taskHandle) setCoRunner(obs *cluster.Observation) {
	h.coRunners()
	h.mu.Lock()
	defer h.mu.Unlock()
	ids := make([]string, 0, len(h.coSeen))
	for id := range h.coSeen {
		ids = append(ids, id)
	}
	if len(ids) == 0 {
		return
	}
	slices.Sort(ids)
	c := h.coSeen[ids[0]]
	obs.CoRunner, obs.CoRunnerBatchSize, obs.CoRunnerJob = c.ModelName, c.BatchSize, c.Job
	if obs.CoRunner == "" {
		obs.CoRunner = c.Job
	}
}

// ParseFakeMIG reads fake_mig entries "<gpu index>=<profile>,<profile>".
func ParseFakeMIG(entries []string) (map[int][]string, error) {
	out := map[int][]string{}
	for i, e := range entries {
		idx, profs, ok := strings.Cut(e, "=")
		n, err := strconv.Atoi(strings.TrimSpace(idx))
		if !ok || err != nil || n < 0 || strings.TrimSpace(profs) == "" {
			return nil, fmt.Errorf(`config field "fake_mig[%d]": got %q, want "<gpu index>=<profile>,<profile>" such as "0=3g.20gb,3g.20gb"`, i, e)
		}
		if _, dup := out[n]; dup {
			return nil, fmt.Errorf(`config field "fake_mig[%d]": GPU %d is listed twice`, i, n)
		}
		for _, p := range strings.Split(profs, ",") {
			out[n] = append(out[n], strings.TrimSpace(p))
		}
	}
	return out, nil
}
