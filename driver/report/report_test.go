package report

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/hetgpu/hetgpu/internal/syncbuf"
	"github.com/hetgpu/hetgpu/model/cluster"
)

// sidecar is a fake /v1/observations endpoint whose health the test switches.
type sidecar struct {
	mu       sync.Mutex
	mode     string // "ok", "503", "drop" (connection closed), "400"
	got      []cluster.Observation
	keys     []string
	attempts int
	auth     string
}

func (s *sidecar) set(mode string) { s.mu.Lock(); s.mode = mode; s.mu.Unlock() }

func (s *sidecar) received() []cluster.Observation {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]cluster.Observation(nil), s.got...)
}

func (s *sidecar) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.attempts++
	if r.URL.Path != Path || r.Method != http.MethodPost {
		http.Error(w, "wrong endpoint", http.StatusNotFound)
		return
	}
	s.auth = r.Header.Get("Authorization")
	switch s.mode {
	case "503":
		http.Error(w, "catalog not ready", http.StatusServiceUnavailable)
		return
	case "drop":
		panic(http.ErrAbortHandler)
	case "400":
		http.Error(w, "gpu_type: unknown", http.StatusBadRequest)
		return
	}
	var o cluster.Observation
	if err := json.NewDecoder(r.Body).Decode(&o); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	s.got = append(s.got, o)
	s.keys = append(s.keys, r.Header.Get("Idempotency-Key"))
	w.WriteHeader(http.StatusAccepted)
}

// startSidecar serves a fake sidecar in mode until the test ends; addr is its URL.
func startSidecar(t *testing.T, mode string) (sc *sidecar, addr string) {
	sc = &sidecar{mode: mode}
	srv := httptest.NewServer(sc)
	t.Cleanup(srv.Close)
	return sc, srv.URL
}

func obs(job string, energy float64) cluster.Observation {
	return cluster.Observation{Namespace: "default", JobID: job, Group: "train", GPUType: "a100", GPUs: 2,
		Throughput: 812.5, EnergyJ: energy, RuntimeS: 60, Time: time.Unix(1_700_000_000, 0).UTC()}
}

func newReporter(t *testing.T, addr, spool string) *Reporter {
	t.Helper()
	r, err := New(Config{Addr: addr, Token: "s3cret", SpoolDir: spool, MinBackoff: 5 * time.Millisecond, MaxBackoff: 40 * time.Millisecond,
		Client: &http.Client{Timeout: 2 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestSpoolSurvivesOutageAndRestart(t *testing.T) {
	sc, addr := startSidecar(t, "503")
	spool := t.TempDir()

	r1 := newReporter(t, addr, spool)
	for i, job := range []string{"resnet", "bert", "gpt"} {
		if _, err := r1.Submit("", obs(job, float64(1000*(i+1)))); err != nil {
			t.Fatal(err)
		}
		sc.set([]string{"503", "drop", "503"}[i])
		if err := r1.Flush(context.Background()); err == nil {
			t.Fatalf("flush during outage (%s) reported success", sc.mode)
		}
	}
	if p, _ := r1.Pending(); len(p) != 3 {
		t.Fatalf("pending during outage = %d, want 3", len(p))
	}
	// The driver restarts: a new reporter on the same spool; the sidecar recovers.
	sc.set("ok")
	r2 := newReporter(t, addr, spool)
	if err := r2.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := sc.received()
	if len(got) != 3 || got[0].JobID != "resnet" || got[1].JobID != "bert" || got[2].JobID != "gpt" {
		t.Fatalf("delivered %+v, want resnet, bert, gpt in order", got)
	}
	if got[2].EnergyJ != 3000 || got[0] != obs("resnet", 1000) {
		t.Errorf("record changed in transit: %+v", got[0])
	}
	if sc.auth != "Bearer s3cret" {
		t.Errorf("Authorization = %q", sc.auth)
	}
	for _, k := range sc.keys {
		if k == "" {
			t.Error("no Idempotency-Key")
		}
	}
	if p, _ := r2.Pending(); len(p) != 0 {
		t.Fatalf("pending after delivery = %v", p)
	}
}

func TestRunRetriesWithBackoffUntilDelivered(t *testing.T) {
	sc, addr := startSidecar(t, "503")
	r := newReporter(t, addr, t.TempDir())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	for _, job := range []string{"a", "b"} {
		if _, err := r.Submit(job, obs(job, 1)); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(150 * time.Millisecond) // several failed attempts
	sc.mu.Lock()
	failed := sc.attempts
	sc.mu.Unlock()
	if failed < 2 {
		t.Fatalf("only %d attempts during the outage: no retries", failed)
	}
	sc.set("ok")
	deadline := time.Now().Add(5 * time.Second)
	for {
		p, _ := r.Pending()
		if len(sc.received()) >= 2 && len(p) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not delivered after recovery; got %d, pending %v", len(sc.received()), p)
		}
		time.Sleep(10 * time.Millisecond)
	}
	sc.mu.Lock()
	keys := append([]string(nil), sc.keys...)
	sc.mu.Unlock()
	if len(keys) != 2 || keys[0] != "a" || keys[1] != "b" {
		t.Errorf("Idempotency-Key headers = %q, want the submitted keys a, b", keys)
	}
}

// The retry delay reaches Nomad as a duration string: the driver logs JSON, where a
// time.Duration value would be a bare nanosecond count that Nomad re-logs as a float
// (retry_in="1.6688645394e+10").
func TestRetryDelayLoggedAsDuration(t *testing.T) {
	_, addr := startSidecar(t, "503")
	var out syncbuf.Buffer
	r, err := New(Config{Addr: addr, SpoolDir: t.TempDir(), MinBackoff: 5 * time.Millisecond, MaxBackoff: 40 * time.Millisecond,
		Client: &http.Client{Timeout: 2 * time.Second}, Logger: hclog.New(&hclog.LoggerOptions{JSONFormat: true, Output: &out})})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Submit("a", obs("a", 1)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.Run(ctx); close(done) }()
	deadline := time.Now().Add(5 * time.Second)
	for strings.Count(out.String(), "retry_in") < 2 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	<-done
	n := 0
	for _, line := range strings.Split(out.String(), "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) != nil || rec["retry_in"] == nil {
			continue
		}
		n++
		s, ok := rec["retry_in"].(string)
		if d, err := time.ParseDuration(s); !ok || err != nil || d < 5*time.Millisecond || d > 40*time.Millisecond {
			t.Errorf("retry_in = %#v in %s, want a duration string between the backoff bounds", rec["retry_in"], line)
		}
	}
	if n < 2 {
		t.Fatalf("%d retries logged:\n%s", n, out.String())
	}
}

func TestRejectedRecordKeptAside(t *testing.T) {
	_, addr := startSidecar(t, "400")
	spool := t.TempDir()
	r := newReporter(t, addr, spool)
	name, err := r.Submit("bad", obs("bad", 1))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Flush(context.Background()); err != nil {
		t.Fatalf("a permanent rejection should not block the spool: %v", err)
	}
	if _, err := os.Stat(filepath.Join(spool, RejectedDir, name)); err != nil {
		t.Fatalf("rejected record not kept: %v", err)
	}
	if p, _ := r.Pending(); len(p) != 0 {
		t.Fatalf("pending = %v", p)
	}
}

func TestNoAddressKeepsSpool(t *testing.T) {
	spool := t.TempDir()
	r := newReporter(t, "", spool)
	if _, err := r.Submit("x", obs("x", 1)); err != nil {
		t.Fatal(err)
	}
	if err := r.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if p, _ := r.Pending(); len(p) != 1 {
		t.Fatalf("pending = %v, want the record kept", p)
	}
}

func TestConfigErrors(t *testing.T) {
	tests := []struct {
		cfg  Config
		want string
	}{
		{Config{Addr: "http://x"}, "spool_dir"},
		{Config{Addr: "127.0.0.1:4656", SpoolDir: t.TempDir()}, `sidecar_addr = "127.0.0.1:4656"`},
	}
	for _, tc := range tests {
		if _, err := New(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v) = %v, want %q", tc.cfg, err, tc.want)
		}
	}
}

func TestBackoffGrowsWithinBounds(t *testing.T) {
	lo, hi := 100*time.Millisecond, 2*time.Second
	var b time.Duration
	prev := time.Duration(0)
	for i := range 12 {
		b = nextBackoff(b, lo, hi)
		if b < lo || b > hi {
			t.Fatalf("step %d: %v outside [%v, %v]", i, b, lo, hi)
		}
		if i < 3 && b < prev {
			t.Fatalf("step %d: backoff shrank %v -> %v", i, prev, b)
		}
		prev = b
	}
	if b < hi*8/10 {
		t.Fatalf("backoff after 12 failures = %v, want near the cap %v", b, hi)
	}
}
