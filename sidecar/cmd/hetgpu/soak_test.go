package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hetgpu/hetgpu/sidecar/runtime/store"
)

// TestSoakChild is the sidecar process the soak test starts and kills (it only runs when
// the soak test asks for it).
func TestSoakChild(t *testing.T) {
	cfg := os.Getenv("HETGPU_SOAK_CHILD")
	if cfg == "" {
		t.Skip("started by TestSoak")
	}
	os.Exit(run(context.Background(), []string{"sidecar", "-config", cfg}, os.Stdout, os.Stderr))
}

// TestSoak runs the embedded sidecar as a child process under mixed reads and writes and
// kills it with SIGKILL at intervals; writers retry what was not acknowledged (same
// Idempotency-Key, as the task driver does). At the end every acknowledged record is stored
// exactly once, and every restart succeeded. The short form (a few seconds, two kills) runs in
// `make test`; HETGPU_SOAK=30m HETGPU_SOAK_KILL_EVERY=5m runs the long one and logs the
// child's RSS at start and end.
func TestSoak(t *testing.T) {
	dur, every := 8*time.Second, 3*time.Second
	if v := os.Getenv("HETGPU_SOAK"); v != "" {
		var err error
		if dur, err = time.ParseDuration(v); err != nil {
			t.Fatalf("HETGPU_SOAK = %q: %v", v, err)
		}
		every = 5 * time.Minute
	}
	if v := os.Getenv("HETGPU_SOAK_KILL_EVERY"); v != "" {
		var err error
		if every, err = time.ParseDuration(v); err != nil {
			t.Fatalf("HETGPU_SOAK_KILL_EVERY = %q: %v", v, err)
		}
	}
	if testing.Short() && os.Getenv("HETGPU_SOAK") == "" {
		t.Skip("-short")
	}
	dir := t.TempDir()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cfgPath := filepath.Join(dir, "sidecar.hcl")
	cfg := fmt.Sprintf("listen = %q\nstate_dir = %q\nlog_level = \"warn\"\nsimulator {\n  speed = 300\n}\n", addr, filepath.Join(dir, "state"))
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(dir, "sidecar.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	base := "http://" + addr
	client := &http.Client{Timeout: 5 * time.Second}

	var child *exec.Cmd
	starts := 0
	start := func() {
		t.Helper()
		child = exec.Command(os.Args[0], "-test.run=^TestSoakChild$")
		child.Env = append(os.Environ(), "HETGPU_SOAK_CHILD="+cfgPath, "NOMAD_ADDR=")
		child.Stdout, child.Stderr = logf, logf
		if err := child.Start(); err != nil {
			t.Fatal(err)
		}
		starts++
		deadline := time.Now().Add(60 * time.Second)
		for {
			resp, err := client.Get(base + "/v1/health")
			if err == nil {
				resp.Body.Close()
				return
			}
			if time.Now().After(deadline) {
				log, _ := os.ReadFile(logf.Name())
				t.Fatalf("restart %d: the sidecar did not come up in 60 s:\n%s", starts, log)
			}
			if child.ProcessState != nil {
				t.Fatalf("restart %d: the sidecar exited", starts)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	rss := func() string {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", child.Process.Pid))
		if err != nil {
			return "?"
		}
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
				return strings.TrimSpace(v)
			}
		}
		return "?"
	}
	start()
	time.Sleep(time.Second) // settle, then note the RSS
	rssStart := rss()

	var (
		mu       sync.Mutex
		acked    = map[string]bool{}
		pending  []int
		nextID   int
		posts    int
		connErrs int
		reads    int
	)
	post := func(id int) bool {
		body := fmt.Sprintf(`{"job_id":"soak-%d","group":"train","task":"train","model_name":"ResNet-50","batch_size":64,"gpu_type":"v100","gpus":1,"throughput":%g,"energy_j":90000,"runtime_s":600}`,
			id, 4+float64(id%10)*0.05)
		req, _ := http.NewRequest("POST", base+"/v1/observations", strings.NewReader(body))
		req.Header.Set("Idempotency-Key", "soak-"+strconv.Itoa(id))
		resp, err := client.Do(req)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var a struct{ Accepted, Duplicates int }
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusAccepted || json.Unmarshal(b, &a) != nil || a.Accepted+a.Duplicates != 1 {
			t.Errorf("record %d: %d %s", id, resp.StatusCode, b)
			return true
		}
		return true
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for w := 0; w < 2; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				mu.Lock()
				var id int
				if len(pending) > 0 && nextID%5 == 0 {
					id, pending = pending[0], pending[1:]
				} else {
					id = nextID
				}
				nextID++
				mu.Unlock()
				ok := post(id)
				mu.Lock()
				posts++
				if ok {
					acked[strconv.Itoa(id)] = true
				} else {
					connErrs++
					pending = append(pending, id)
				}
				mu.Unlock()
				time.Sleep(40 * time.Millisecond)
			}
		}()
	}
	for r := 0; r < 2; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				for _, p := range []string{"/v1/queue", "/v1/decisions?limit=20", "/v1/health", "/metrics"} {
					if resp, err := client.Get(base + p); err == nil {
						_, _ = io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
						mu.Lock()
						reads++
						mu.Unlock()
					}
				}
				time.Sleep(50 * time.Millisecond)
			}
		}()
	}
	end := time.Now().Add(dur)
	for time.Now().Add(every).Before(end) || time.Until(end) > every/2 {
		time.Sleep(min(every, time.Until(end)))
		if time.Until(end) <= 0 {
			break
		}
		_ = child.Process.Signal(syscall.SIGKILL)
		_ = child.Wait()
		start()
	}
	time.Sleep(max(0, time.Until(end)))
	cancel()
	wg.Wait()
	rssEnd := rss()
	// Deliver what is still pending, as a driver's spool does after the sidecar is back.
	for _, id := range pending {
		if !post(id) {
			t.Fatalf("record %d not accepted after the last restart", id)
		}
		acked[strconv.Itoa(id)] = true
	}
	_ = child.Process.Signal(syscall.SIGKILL)
	_ = child.Wait()

	st, err := store.Open(filepath.Join(dir, "state", "simulated", "sidecar.db"), store.Options{})
	if err != nil {
		t.Fatalf("store after the soak: %v", err)
	}
	defer st.Close()
	seen := map[string]int{}
	_ = st.Observations(func(r store.ObservationRecord) error {
		if r.Source == "driver" {
			seen[strings.TrimPrefix(r.Obs.JobID, "soak-")]++
		}
		return nil
	})
	missing, twice := 0, 0
	for id := range acked {
		if seen[id] == 0 {
			missing++
		}
	}
	for _, n := range seen {
		if n > 1 {
			twice++
		}
	}
	t.Logf("soak %s: %d starts (%d kill -9), %d posts (%d connection errors, retried), %d acknowledged, %d stored, %d reads; child RSS %s at start, %s at end",
		dur, starts, starts-1, posts, connErrs, len(acked), len(seen), reads, rssStart, rssEnd)
	if missing > 0 || twice > 0 {
		t.Errorf("%d acknowledged records missing, %d stored more than once", missing, twice)
	}
	if starts < 2 {
		t.Error("the sidecar was never killed")
	}
}
