// Package report delivers the driver's run records (cluster.Observation) to the hetgpu
// sidecar's POST /v1/observations. Every record is first written to a spool directory (write-
// ahead, atomically), then delivered with retries and exponential backoff; a record leaves the
// spool only when the sidecar accepted it. A sidecar outage, a driver crash or a restart
// therefore loses nothing: whatever is in the spool is sent once the sidecar answers again.
package report

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	mrand "math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/hetgpu/hetgpu/internal/tick"
	"github.com/hetgpu/hetgpu/model/cluster"
)

// Path is the sidecar endpoint that takes one observation as JSON.
const Path = "/v1/observations"

// Defaults for Config.
const (
	DefaultMinBackoff = 500 * time.Millisecond
	DefaultMaxBackoff = 5 * time.Minute
	// idleRecheck is how often an idle reporter looks at the spool anyway (files dropped in
	// by hand, or left by another process).
	idleRecheck = time.Minute
)

// RejectedDir is where records the sidecar refused for good (4xx) are kept for an operator.
const RejectedDir = "rejected"

// Config configures a Reporter.
type Config struct {
	// Addr is the sidecar's base URL, e.g. "http://127.0.0.1:4656". Empty disables delivery:
	// records are still spooled, and sent once an address is configured.
	Addr string
	// Resolve, when set and Addr is empty, finds the sidecar's base URL (e.g. through Nomad
	// service discovery); it is asked again after a delivery fails to connect or the
	// sidecar answers 5xx, so records follow a sidecar that moved.
	Resolve func(ctx context.Context) (string, error)
	// Token is sent as "Authorization: Bearer <token>" when set.
	Token    string
	SpoolDir string
	Client   *http.Client
	Logger   hclog.Logger
	// Backoff between failed deliveries doubles from MinBackoff up to MaxBackoff (with
	// jitter), and resets after a success.
	MinBackoff time.Duration
	MaxBackoff time.Duration
}

// Reporter spools and delivers observations.
type Reporter struct {
	cfg  Config
	kick chan struct{}
	// mu serialises deliveries: Run and Flush may race; it guards addr too.
	mu sync.Mutex
	// addr is the sidecar's URL for this delivery: cfg.Addr, or what Resolve found.
	addr string
}

// New checks the configuration and creates the spool directory.
func New(cfg Config) (*Reporter, error) {
	if cfg.SpoolDir == "" {
		return nil, errors.New("report: spool_dir is empty")
	}
	if cfg.Addr != "" {
		if !strings.HasPrefix(cfg.Addr, "http://") && !strings.HasPrefix(cfg.Addr, "https://") {
			return nil, fmt.Errorf("sidecar_addr = %q: want a URL such as http://127.0.0.1:4656", cfg.Addr)
		}
		cfg.Addr = strings.TrimRight(cfg.Addr, "/")
	}
	if err := os.MkdirAll(filepath.Join(cfg.SpoolDir, RejectedDir), 0o700); err != nil {
		return nil, fmt.Errorf("spool_dir %q: %w", cfg.SpoolDir, err)
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{Timeout: 10 * time.Second}
	}
	cfg.Client = FollowRedirects(cfg.Client)
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.MinBackoff <= 0 {
		cfg.MinBackoff = DefaultMinBackoff
	}
	if cfg.MaxBackoff < cfg.MinBackoff {
		cfg.MaxBackoff = max(DefaultMaxBackoff, cfg.MinBackoff)
	}
	return &Reporter{cfg: cfg, kick: make(chan struct{}, 1), addr: cfg.Addr}, nil
}

// Submit spools obs durably and wakes the delivery loop. It returns once the record is on
// disk; delivery happens in Run. key identifies the run (the driver uses the task ID) and is
// sent as Idempotency-Key; empty picks a random one.
func (r *Reporter) Submit(key string, obs cluster.Observation) (string, error) {
	data, err := json.Marshal(obs)
	if err != nil {
		return "", fmt.Errorf("encode observation: %w", err)
	}
	if key == "" || strings.ContainsAny(key, "/\\") {
		var rnd [8]byte
		_, _ = rand.Read(rnd[:])
		key = hex.EncodeToString(rnd[:])
	}
	// Names sort by submission time, so the spool is delivered in order.
	name := fmt.Sprintf("%020d-%s.json", time.Now().UnixNano(), key)
	if err := writeAtomic(filepath.Join(r.cfg.SpoolDir, name), data); err != nil {
		return "", fmt.Errorf("spool observation: %w", err)
	}
	select {
	case r.kick <- struct{}{}:
	default:
	}
	return name, nil
}

func writeAtomic(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// Pending lists the spooled records not delivered yet, oldest first.
func (r *Reporter) Pending() ([]string, error) {
	entries, err := os.ReadDir(r.cfg.SpoolDir)
	if err != nil {
		return nil, fmt.Errorf("read spool: %w", err)
	}
	var names []string
	for _, e := range entries {
		if e.Type().IsRegular() && strings.HasSuffix(e.Name(), ".json") && !strings.HasPrefix(e.Name(), ".") {
			names = append(names, e.Name())
		}
	}
	slices.Sort(names)
	return names, nil
}

// Run delivers the spool until ctx is done, backing off while the sidecar fails.
func (r *Reporter) Run(ctx context.Context) {
	backoff := time.Duration(0)
	for {
		err := r.Flush(ctx)
		var wait time.Duration
		switch {
		case err == nil:
			backoff, wait = 0, idleRecheck
		case ctx.Err() != nil:
			return
		default:
			backoff = nextBackoff(backoff, r.cfg.MinBackoff, r.cfg.MaxBackoff)
			wait = backoff
			// Durations as strings: the plugin logs JSON, where a Duration is a bare count of
			// nanoseconds that Nomad re-logs as a float ("1.6688645394e+10").
			r.cfg.Logger.Warn("sidecar unreachable; observations stay spooled", "error", err, "retry_in", wait.String())
		}
		kicked, ok := tick.Sleep(ctx, wait, r.kick)
		if !ok {
			return
		}
		// A new record while backing off waits for the backoff; when idle, go now.
		if kicked && backoff > 0 {
			tick.Sleep(ctx, backoff, nil)
		}
	}
}

// nextBackoff doubles prev within [lo, hi], with ±20% jitter so many drivers do not retry in
// lockstep after a sidecar restart.
func nextBackoff(prev, lo, hi time.Duration) time.Duration {
	next := lo
	if prev > 0 {
		next = time.Duration(math.Min(float64(prev)*2, float64(hi)))
	}
	jitter := 0.8 + 0.4*mrand.Float64()
	return min(max(time.Duration(float64(next)*jitter), lo), hi)
}

// Flush tries once to deliver every spooled record, oldest first. It stops at the first
// record the sidecar did not take because of a transient failure and returns that error.
func (r *Reporter) Flush(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cfg.Addr == "" && r.cfg.Resolve == nil {
		return nil // nothing to deliver to; records wait in the spool
	}
	// Nomad runs short-lived copies of the driver (config validation) beside the real one:
	// only one process delivers a spool at a time, so no record is sent twice.
	unlock, err := lockDir(r.cfg.SpoolDir)
	if err != nil {
		return err
	}
	defer unlock()
	names, err := r.Pending()
	if err != nil {
		return err
	}
	if len(names) > 0 && r.addr == "" {
		if r.addr, err = r.resolve(ctx); err != nil {
			return err
		}
	}
	for _, name := range names {
		if err := ctx.Err(); err != nil {
			return err
		}
		path := filepath.Join(r.cfg.SpoolDir, name)
		data, err := os.ReadFile(path)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("read spooled %s: %w", name, err)
		}
		permanent, err := r.post(ctx, name, data)
		switch {
		case err == nil:
			if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("remove delivered %s: %w", name, err)
			}
			r.cfg.Logger.Debug("observation delivered", "record", name)
		case permanent:
			r.cfg.Logger.Error("sidecar rejected an observation; kept for inspection", "record", name,
				"dir", filepath.Join(r.cfg.SpoolDir, RejectedDir), "error", err)
			if rerr := os.Rename(path, filepath.Join(r.cfg.SpoolDir, RejectedDir, name)); rerr != nil {
				return fmt.Errorf("move rejected %s: %w", name, rerr)
			}
		default:
			return err
		}
	}
	return nil
}

// lockDir takes an exclusive flock on dir/.lock, waiting for another holder.
func lockDir(dir string) (func(), error) {
	f, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock spool: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock spool: %w", err)
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}

// post sends one record; permanent reports a refusal that retrying cannot fix.
func (r *Reporter) post(ctx context.Context, name string, data []byte) (permanent bool, err error) {
	url := r.addr + Path
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(data))
	if err != nil {
		return true, err
	}
	req.Header.Set("Content-Type", "application/json")
	// Lets the sidecar drop a duplicate when a response was lost after it stored the record.
	key := strings.TrimSuffix(name, ".json")
	if _, k, ok := strings.Cut(key, "-"); ok {
		key = k
	}
	req.Header.Set("Idempotency-Key", key)
	if r.cfg.Token != "" {
		req.Header.Set("Authorization", "Bearer "+r.cfg.Token)
	}
	resp, err := r.cfg.Client.Do(req)
	if err != nil {
		r.forget()
		return false, fmt.Errorf("post %s: %w", url, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode/100 == 2 {
		return false, nil
	}
	err = fmt.Errorf("post %s: %s: %s", url, resp.Status, strings.TrimSpace(string(body)))
	if resp.StatusCode/100 == 5 || resp.StatusCode == http.StatusNotFound {
		r.forget()
	}
	switch resp.StatusCode {
	case http.StatusRequestTimeout, http.StatusTooManyRequests, http.StatusUnauthorized, http.StatusForbidden,
		http.StatusNotFound:
		// Auth and routing are configuration the operator can fix (or a sidecar still
		// starting): keep retrying rather than set the record aside.
		return false, err
	}
	return resp.StatusCode/100 == 4, err
}
