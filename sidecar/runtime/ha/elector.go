// Package ha runs several sidecar replicas against one Nomad region with exactly one
// leader: leader election on a Nomad Variables lock (nomad/api's Locks), a fence that every
// batch of cluster writes checks first, and the state a new leader needs (learned runs,
// the predictor's window, the tuned ranking policy, the decision sequence) kept in Nomad
// Variables, compressed and split into chunks below Nomad's 64 KiB per variable.
package ha

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"
)

// Roles as GET /v1/health reports them.
const (
	RoleLeader  = "leader"
	RoleStandby = "standby"
	RoleSingle  = "single"
)

// Defaults of the ha block.
const (
	DefaultLockPath    = "hetgpu/leader"
	DefaultStatePrefix = "hetgpu/state"
	// DefaultTTL is Nomad's smallest lock TTL: a partitioned leader stops writing sooner.
	DefaultTTL       = 10 * time.Second
	DefaultLockDelay = time.Second
	DefaultRetry     = time.Second
)

// ErrNotLeader is the fence's answer on a replica that does not hold the lock.
var ErrNotLeader = errors.New("this sidecar replica is not the leader")

// ErrLeaseLost is the fence's answer once the lease may have ended: the last renewal Nomad
// confirmed is older than TTL less the safety margin.
var ErrLeaseLost = errors.New("leader lease lost")

// Config configures an Elector.
type Config struct {
	// Client talks to Nomad; give the elector its own (api.Locks changes its client's retry
	// options), with a request timeout below the TTL.
	Client    *api.Client
	Namespace string
	// LockPath is the lock variable; it also holds the leader's id and address.
	LockPath string
	// TTL is the lock's lease (Nomad: 10 s to 24 h). LockDelay is how long Nomad blocks the
	// lock after a lease ran out unrenewed (a stolen or released lock has none).
	TTL, LockDelay time.Duration
	// Renew is how often the leader renews (default TTL/5); Margin is how long before
	// lastRenew+TTL the leader stops writing (default TTL/5), for clock drift and a request
	// in flight; Fresh is how old the last renewal may be when a batch of writes starts
	// before the fence renews first (default Renew/2).
	Renew, Margin, Fresh time.Duration
	// Retry is how often a standby tries the lock (default 1 s).
	Retry time.Duration
	// ID names this replica (default host-pid-random); Address is its API URL, advertised
	// in the lock variable so standbys send writers there.
	ID, Address string
	// FastTakeover: a standby that finds nothing listening at the leader's address (or a
	// replica there that does not lead) twice in a row releases the dead leader's lock at
	// once instead of waiting for Nomad's TTL (2xTTL + LockDelay on the real agent).
	FastTakeover bool
	// OnLead runs after the lock is won and before the fence opens (load the shared state);
	// an error gives the lock up again. OnLose runs after leadership ended.
	OnLead func(ctx context.Context) error
	OnLose func()
	Logger hclog.Logger
	// Probe is the HTTP client for the leader liveness probe (default 1 s timeout).
	Probe *http.Client
	Now   func() time.Time
}

// Elector campaigns for the lock and answers the fence. Safe for concurrent use.
type Elector struct {
	cfg Config
	log hclog.Logger

	mu        sync.Mutex
	open      bool // leader and OnLead done: the fence may allow
	lastRenew time.Time
	locks     *api.Locks
	leader    Holder // the last known leader
	renewMu   sync.Mutex
	deadSeen  int // consecutive probes that found the leader gone
	// lost tells the renewal loop that a fence check found the lock taken.
	lost chan struct{}
}

// Holder is the leader as the lock variable advertises it.
type Holder struct {
	ID      string `json:"id"`
	Address string `json:"address"`
	LockID  string `json:"-"`
}

// New checks the configuration and fills its defaults.
func New(cfg Config) (*Elector, error) {
	if cfg.Client == nil {
		return nil, errors.New("ha: a Nomad client is required")
	}
	if cfg.LockPath == "" {
		cfg.LockPath = DefaultLockPath
	}
	if cfg.Namespace == "" || cfg.Namespace == "*" {
		cfg.Namespace = "default"
	}
	if cfg.TTL == 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.LockDelay == 0 {
		cfg.LockDelay = DefaultLockDelay
	}
	if cfg.Renew == 0 {
		cfg.Renew = cfg.TTL / 5
	}
	if cfg.Margin == 0 {
		cfg.Margin = cfg.TTL / 5
	}
	if cfg.Fresh == 0 {
		cfg.Fresh = cfg.Renew / 2
	}
	if cfg.Retry == 0 {
		cfg.Retry = DefaultRetry
	}
	if cfg.Renew >= cfg.TTL-cfg.Margin {
		return nil, fmt.Errorf("ha: renew interval %s must be shorter than ttl %s less the safety margin %s", cfg.Renew, cfg.TTL, cfg.Margin)
	}
	if cfg.ID == "" {
		h, _ := os.Hostname()
		cfg.ID = fmt.Sprintf("%s-%d-%s", h, os.Getpid(), randomHex(4))
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.Probe == nil {
		cfg.Probe = &http.Client{Timeout: time.Second}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Elector{cfg: cfg, log: cfg.Logger.Named("ha")}, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// newLockID is a lock ID in Nomad's UUID form; the replica chooses it so that it can
// advertise it in the same acquire (standbys need it to release a dead leader's lock).
func newLockID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// ID is this replica's id.
func (e *Elector) ID() string { return e.cfg.ID }

// Role is "leader" while the fence may allow writes, else "standby"; leader is the leading
// replica's address (its id when it advertises none), "" when unknown.
func (e *Elector) Role() (role, leader string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	role = RoleStandby
	if e.open && e.cfg.Now().Before(e.lastRenew.Add(e.cfg.TTL-e.cfg.Margin)) {
		role = RoleLeader
	}
	leader = e.leader.Address
	if leader == "" {
		leader = e.leader.ID
	}
	return role, leader
}

// Leader is the last known leader.
func (e *Elector) Leader() Holder {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.leader
}

// Held is the fence: nil while this replica leads and its lease is current. When the last
// renewal is older than Fresh it renews first, so a lock taken over by another replica is
// noticed before the next batch of writes, not at the next renewal tick. The lease counts
// from when the last successful renewal was sent, and ends Margin before TTL: a leader cut
// off from Nomad stops writing before Nomad frees its lock.
func (e *Elector) Held(ctx context.Context) error {
	e.mu.Lock()
	open, last, lk := e.open, e.lastRenew, e.locks
	e.mu.Unlock()
	if !open || lk == nil {
		return ErrNotLeader
	}
	now := e.cfg.Now()
	if !now.Before(last.Add(e.cfg.TTL - e.cfg.Margin)) {
		return fmt.Errorf("%w: last renewal confirmed at %s, lease of %s less margin %s ended", ErrLeaseLost,
			last.UTC().Format(time.RFC3339Nano), e.cfg.TTL, e.cfg.Margin)
	}
	if now.Sub(last) < e.cfg.Fresh {
		return nil
	}
	return e.renew(ctx, lk)
}

// renew renews the lease once; a conflict (the lock is another's) closes the fence.
func (e *Elector) renew(ctx context.Context, lk *api.Locks) error {
	e.renewMu.Lock()
	defer e.renewMu.Unlock()
	e.mu.Lock()
	end := e.lastRenew.Add(e.cfg.TTL - e.cfg.Margin)
	e.mu.Unlock()
	sent := e.cfg.Now()
	if !sent.Before(end) {
		return fmt.Errorf("%w: lease of %s less margin %s ended at %s", ErrLeaseLost, e.cfg.TTL, e.cfg.Margin, end.UTC().Format(time.RFC3339Nano))
	}
	// No renewal may count after the lease ended: bound the call by it.
	rctx, cancel := context.WithDeadline(ctx, end)
	defer cancel()
	err := lk.Renew(rctx)
	if err == nil {
		e.mu.Lock()
		if e.locks == lk && sent.After(e.lastRenew) {
			e.lastRenew = sent
		}
		e.mu.Unlock()
		return nil
	}
	if errors.Is(err, api.ErrLockConflict) {
		e.closeFence(lk)
		return fmt.Errorf("%w: renewing %s: %w", ErrNotLeader, e.cfg.LockPath, err)
	}
	return fmt.Errorf("renew the leader lock %s: %w", e.cfg.LockPath, err)
}

func (e *Elector) closeFence(lk *api.Locks) {
	e.mu.Lock()
	if e.locks == lk {
		e.open = false
		select {
		case e.lost <- struct{}{}:
		default:
		}
	}
	e.mu.Unlock()
}

// Run campaigns until ctx ends; a leader releases the lock on the way out.
func (e *Elector) Run(ctx context.Context) error {
	e.log.Info("campaigning for leadership", "lock", e.cfg.LockPath, "namespace", e.cfg.Namespace, "id", e.cfg.ID,
		"address", e.cfg.Address, "ttl", e.cfg.TTL, "renew", e.cfg.Renew, "margin", e.cfg.Margin)
	for {
		if ctx.Err() != nil {
			return nil
		}
		lk, err := e.acquire(ctx)
		switch {
		case err == nil:
			// Led until the lease ended (or taking over failed): try again after Retry.
			e.lead(ctx, lk)
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, api.ErrLockConflict):
			e.watchLeader(ctx)
		default:
			e.log.Warn("trying the leader lock failed; retrying", "lock", e.cfg.LockPath, "error", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(e.cfg.Retry):
		}
	}
}

// acquire tries the lock once, advertising this replica in the lock variable's items.
func (e *Elector) acquire(ctx context.Context) (*api.Locks, error) {
	lockID := newLockID()
	v := api.Variable{Namespace: e.cfg.Namespace, Path: e.cfg.LockPath,
		Items: api.VariableItems{"id": e.cfg.ID, "address": e.cfg.Address, "lock_id": lockID},
		Lock:  &api.VariableLock{ID: lockID, TTL: e.cfg.TTL.String(), LockDelay: e.cfg.LockDelay.String()}}
	lk, err := e.cfg.Client.Locks(api.WriteOptions{Namespace: e.cfg.Namespace}, v, api.LocksOptionWithMaxRetries(0))
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", e.cfg.LockPath, err)
	}
	sent := e.cfg.Now()
	actx, cancel := context.WithTimeout(ctx, e.cfg.TTL-e.cfg.Margin)
	defer cancel()
	if _, err := lk.Acquire(actx); err != nil {
		return nil, err
	}
	e.mu.Lock()
	e.locks, e.lastRenew, e.open, e.lost = lk, sent, false, make(chan struct{}, 1)
	e.leader, e.deadSeen = Holder{ID: e.cfg.ID, Address: e.cfg.Address, LockID: lockID}, 0
	e.mu.Unlock()
	return lk, nil
}

// lead holds the lease until it is lost or ctx ends.
func (e *Elector) lead(ctx context.Context, lk *api.Locks) {
	e.log.Info("won the leader lock; loading the shared state", "lock", e.cfg.LockPath, "id", e.cfg.ID)
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// Renewals run from the start: loading the shared state may take longer than a TTL.
	renewed := make(chan error, 1)
	go func() { renewed <- e.maintain(lctx, lk) }()
	if e.cfg.OnLead != nil {
		if err := e.cfg.OnLead(lctx); err != nil {
			e.log.Error("taking over as leader failed; giving the lock up", "error", err)
			cancel()
			<-renewed
			e.stepDown(ctx, lk, true, false)
			return
		}
	}
	e.mu.Lock()
	if e.locks == lk {
		e.open = true
	}
	e.mu.Unlock()
	e.log.Info("leading", "id", e.cfg.ID, "address", e.cfg.Address)
	err := <-renewed
	if ctx.Err() != nil {
		e.stepDown(ctx, lk, true, true)
		return
	}
	e.log.Warn("leadership lost; standing by", "id", e.cfg.ID, "reason", err)
	e.stepDown(ctx, lk, false, true)
}

// maintain renews every Renew until a renewal conflicts, the lease ends unrenewed, or ctx
// ends (nil then).
func (e *Elector) maintain(ctx context.Context, lk *api.Locks) error {
	e.mu.Lock()
	lost := e.lost
	e.mu.Unlock()
	t := time.NewTicker(e.cfg.Renew)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-lost:
			return fmt.Errorf("%w: another replica holds %s", ErrNotLeader, e.cfg.LockPath)
		case <-t.C:
		}
		err := e.renew(ctx, lk)
		switch {
		case err == nil:
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, ErrNotLeader), errors.Is(err, ErrLeaseLost):
			return err
		default:
			e.log.Warn("renewing the leader lock failed; the lease runs out unless a renewal succeeds", "error", err)
		}
	}
}

// stepDown closes the fence; release gives the lock back (on the way out, best effort);
// led: OnLead had finished (OnLose runs).
func (e *Elector) stepDown(ctx context.Context, lk *api.Locks, release, led bool) {
	e.mu.Lock()
	e.open, e.locks = false, nil
	e.leader = Holder{}
	e.mu.Unlock()
	if release {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		if err := lk.Release(rctx); err != nil {
			e.log.Debug("releasing the leader lock failed; Nomad frees it after its TTL", "error", err)
		}
		cancel()
	}
	if led && e.cfg.OnLose != nil {
		e.cfg.OnLose()
	}
}

// watchLeader reads who leads and, with FastTakeover, releases the lock of a leader whose
// process is gone.
func (e *Elector) watchLeader(ctx context.Context) {
	v, _, err := e.cfg.Client.Variables().Read(e.cfg.LockPath, (&api.QueryOptions{Namespace: e.cfg.Namespace}).WithContext(ctx))
	if err != nil || v == nil {
		return
	}
	h := Holder{ID: v.Items["id"], Address: v.Items["address"], LockID: v.Items["lock_id"]}
	e.mu.Lock()
	if h != e.leader {
		e.deadSeen = 0
	}
	e.leader = h
	e.mu.Unlock()
	if !e.cfg.FastTakeover || h.Address == "" || h.LockID == "" || h.ID == e.cfg.ID {
		return
	}
	if e.leaderAlive(ctx, h) {
		e.mu.Lock()
		e.deadSeen = 0
		e.mu.Unlock()
		return
	}
	e.mu.Lock()
	e.deadSeen++
	dead := e.deadSeen >= 2
	e.mu.Unlock()
	if !dead {
		return
	}
	e.log.Warn("the leader's process is gone; releasing its lock", "leader", h.ID, "address", h.Address)
	rv := &api.Variable{Namespace: e.cfg.Namespace, Path: e.cfg.LockPath, Lock: &api.VariableLock{ID: h.LockID}}
	if _, _, err := e.cfg.Client.Variables().ReleaseLock(rv, (&api.WriteOptions{Namespace: e.cfg.Namespace}).WithContext(ctx)); err != nil {
		e.log.Debug("releasing the dead leader's lock failed", "error", err)
	}
}
