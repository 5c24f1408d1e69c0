package driver

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hetgpu/hetgpu/driver/shim"
	"github.com/hetgpu/hetgpu/model/cluster"
	"github.com/hetgpu/hetgpu/plugin/proto/drivers"
)

// The test binary doubles as the shim for in-process drivers (ShimExe = this binary).
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == shim.Command {
		os.Exit(shim.Main(os.Args[2:]))
	}
	dir, err := os.MkdirTemp("", "hetgpu-driver-test-bin-")
	if err != nil {
		panic(err)
	}
	testBinDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// testBinDir receives the binaries built for this test run.
var testBinDir string

// builtBinaries builds nomad-driver-hetgpu and hetgpu-toy-train once per test run.
var builtBinaries = sync.OnceValues(func() (string, error) {
	dir := testBinDir
	// One go command links both in parallel.
	cmd := exec.Command("go", "build", "-o", dir+"/", "./cmd/nomad-driver-hetgpu", "./cmd/hetgpu-toy-train")
	cmd.Env = append(os.Environ(), "CGO_CFLAGS=-Wno-deprecated-declarations")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", &buildError{pkg: "./cmd/...", out: string(out), err: err}
	}
	return dir, nil
})

type buildError struct {
	pkg, out string
	err      error
}

func (e *buildError) Error() string { return "go build " + e.pkg + ": " + e.err.Error() + "\n" + e.out }

func binaries(t *testing.T) (driverBin, toyBin string) {
	t.Helper()
	dir, err := builtBinaries()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, "nomad-driver-hetgpu"), filepath.Join(dir, "hetgpu-toy-train")
}

// fakeSidecar records the observations the driver posts.
type fakeSidecar struct {
	mu   sync.Mutex
	obs  []cluster.Observation
	keys []string
	srv  *httptest.Server
}

func newFakeSidecar(t *testing.T) *fakeSidecar {
	s := &fakeSidecar{}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/observations" || r.Method != http.MethodPost {
			http.NotFound(w, r)
			return
		}
		var o cluster.Observation
		if err := json.NewDecoder(r.Body).Decode(&o); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		s.mu.Lock()
		s.obs = append(s.obs, o)
		s.keys = append(s.keys, r.Header.Get("Idempotency-Key"))
		s.mu.Unlock()
		w.WriteHeader(http.StatusAccepted)
	}))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *fakeSidecar) waitFor(t *testing.T, n int) []cluster.Observation {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		s.mu.Lock()
		got := append([]cluster.Observation(nil), s.obs...)
		s.mu.Unlock()
		if len(got) >= n {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("sidecar got %d observations, want %d", len(got), n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// eventLog collects TaskEvents.
type eventLog struct {
	mu  sync.Mutex
	evs []*drivers.DriverTaskEvent
}

func collectEvents(t *testing.T, c drivers.DriverClient) *eventLog {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	stream, err := c.TaskEvents(ctx, &drivers.TaskEventsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	l := &eventLog{}
	go func() {
		for {
			ev, err := stream.Recv()
			if err != nil {
				return
			}
			l.mu.Lock()
			l.evs = append(l.evs, ev)
			l.mu.Unlock()
		}
	}()
	return l
}

// waitMessage waits for an event whose message contains sub and returns it.
func (l *eventLog) waitMessage(t *testing.T, sub string) *drivers.DriverTaskEvent {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		l.mu.Lock()
		for _, ev := range l.evs {
			if strings.Contains(ev.GetMessage(), sub) {
				l.mu.Unlock()
				return ev
			}
		}
		var msgs []string
		for _, ev := range l.evs {
			msgs = append(msgs, ev.GetMessage())
		}
		l.mu.Unlock()
		if time.Now().After(deadline) {
			t.Fatalf("no event containing %q; events: %q", sub, msgs)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// testTask is a TaskConfig as the Nomad client would send it.
func testTask(t *testing.T, id string, msgpackCfg []byte) *drivers.TaskConfig {
	t.Helper()
	alloc := t.TempDir()
	if err := os.MkdirAll(filepath.Join(alloc, "train", "local"), 0o755); err != nil {
		t.Fatal(err)
	}
	return &drivers.TaskConfig{
		Id:                  "alloc-" + id + "/train/0123abcd",
		Name:                "train",
		AllocId:             "alloc-" + id,
		JobId:               "job-" + id,
		JobName:             "job-" + id,
		TaskGroupName:       "trainers",
		Namespace:           "default",
		MsgpackDriverConfig: msgpackCfg,
		Env: map[string]string{
			"PATH":                         "/usr/local/bin:/usr/bin:/bin",
			"NOMAD_META_hetgpu_model":      "resnet/ResNet-50",
			"NOMAD_META_hetgpu_batch_size": "32",
		},
		AllocDir:   alloc,
		StdoutPath: filepath.Join(alloc, "train.stdout"),
		StderrPath: filepath.Join(alloc, "train.stderr"),
	}
}

func pidAlive(pid int) bool {
	st, err := shim.ReadProcStat("/proc", pid)
	return err == nil && st.State != 'Z' && syscall.Kill(pid, 0) == nil
}
