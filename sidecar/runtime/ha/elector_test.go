package ha_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/hetgpu/hetgpu/internal/poll"
	"github.com/hetgpu/hetgpu/sidecar/backends/nomad/nomadtest"
	"github.com/hetgpu/hetgpu/sidecar/runtime/ha"
)

// link is one replica's network path to Nomad; cut makes Nomad stop answering it (requests
// hang until the client gives up), as in a partition.
type link struct {
	*httptest.Server
	cut atomic.Bool
}

func newLink(t *testing.T, target string) *link {
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	l := &link{}
	proxy := httputil.NewSingleHostReverseProxy(u)
	closing := make(chan struct{})
	l.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if l.cut.Load() {
			select {
			case <-r.Context().Done():
			case <-closing:
			}
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		close(closing)
		l.Close()
	})
	return l
}

func (l *link) client(t *testing.T, timeout time.Duration) *api.Client {
	c, err := api.NewClient(&api.Config{Address: l.URL, HttpClient: &http.Client{Timeout: timeout}})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// clock is a settable clock for the fake's lock timers and an elector's lease.
type clock struct {
	mu  sync.Mutex
	off time.Duration
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.off)
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	c.off += d
	c.mu.Unlock()
}

type replica struct {
	el     *ha.Elector
	link   *link
	cancel context.CancelFunc
	done   chan struct{}
	leads  atomic.Int32
	loses  atomic.Int32
}

func startReplica(t *testing.T, f *nomadtest.Server, id string, mod func(*ha.Config)) *replica {
	t.Helper()
	r := &replica{link: newLink(t, f.URL), done: make(chan struct{})}
	cfg := ha.Config{Client: r.link.client(t, 500*time.Millisecond), ID: id, Address: "http://" + id + ".invalid",
		TTL: 10 * time.Second, Renew: 100 * time.Millisecond, Margin: 2 * time.Second, Retry: 20 * time.Millisecond,
		OnLead: func(context.Context) error { r.leads.Add(1); return nil },
		OnLose: func() { r.loses.Add(1) }}
	if mod != nil {
		mod(&cfg)
	}
	el, err := ha.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r.el = el
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() {
		defer close(r.done)
		_ = el.Run(ctx)
	}()
	t.Cleanup(r.stop)
	return r
}

func (r *replica) stop() {
	r.cancel()
	<-r.done
}

func (r *replica) role() string {
	role, _ := r.el.Role()
	return role
}

func leaders(rs ...*replica) int {
	n := 0
	for _, r := range rs {
		if r.role() == ha.RoleLeader {
			n++
		}
	}
	return n
}

func TestElectorOneLeaderLostAndRegained(t *testing.T) {
	f := nomadtest.New()
	defer f.Close()
	a := startReplica(t, f, "a", nil)
	poll.Until(t, "a to lead", func() bool { return a.role() == ha.RoleLeader })
	b := startReplica(t, f, "b", nil)
	c := startReplica(t, f, "c", nil)
	// The standbys learn who leads from the lock variable.
	poll.Until(t, "standbys to know the leader", func() bool {
		_, lb := b.el.Role()
		_, lc := c.el.Role()
		return lb == "http://a.invalid" && lc == "http://a.invalid"
	})
	ctx := context.Background()
	for _, tc := range []struct {
		r    *replica
		want error
	}{{a, nil}, {b, ha.ErrNotLeader}, {c, ha.ErrNotLeader}} {
		if err := tc.r.el.Held(ctx); !errors.Is(err, tc.want) && !(tc.want == nil && err == nil) {
			t.Fatalf("%s: Held = %v, want %v", tc.r.el.ID(), err, tc.want)
		}
	}
	if n := leaders(a, b, c); n != 1 {
		t.Fatalf("%d leaders, want 1", n)
	}
	// The leader stops (releasing the lock): exactly one standby takes over.
	a.stop()
	poll.Until(t, "a standby to lead", func() bool { return leaders(b, c) == 1 })
	if err := a.el.Held(ctx); !errors.Is(err, ha.ErrNotLeader) {
		t.Fatalf("stopped leader: Held = %v, want ErrNotLeader", err)
	}
	next, other := b, c
	if c.role() == ha.RoleLeader {
		next, other = c, b
	}
	// It stops too: the last one regains the lock.
	next.stop()
	poll.Until(t, "the last replica to lead", func() bool { return other.role() == ha.RoleLeader })
	if a.leads.Load()+b.leads.Load()+c.leads.Load() != 3 {
		t.Fatalf("takeovers a=%d b=%d c=%d, want 3 in all", a.leads.Load(), b.leads.Load(), c.leads.Load())
	}
}

func TestElectorLockStolenAfterTTL(t *testing.T) {
	f := nomadtest.New()
	defer f.Close()
	clk := &clock{}
	f.SetClock(clk.now)
	// a renews rarely and checks the lock before every write batch.
	a := startReplica(t, f, "a", func(c *ha.Config) { c.Renew = 7 * time.Second; c.Fresh = time.Nanosecond })
	poll.Until(t, "a to lead", func() bool { return a.role() == ha.RoleLeader })
	b := startReplica(t, f, "b", nil)
	// a is cut off from Nomad; on Nomad's clock its lease (2 x TTL) and delay run out.
	a.link.cut.Store(true)
	clk.advance(2*10*time.Second + 2*time.Second)
	poll.Until(t, "b to take the expired lock", func() bool { return b.role() == ha.RoleLeader })
	// a's own clock says its lease still runs; the renewal before its next write batch
	// finds the lock taken and the fence closes.
	a.link.cut.Store(false)
	err := a.el.Held(context.Background())
	if !errors.Is(err, ha.ErrNotLeader) {
		t.Fatalf("a after its lock was taken: Held = %v, want ErrNotLeader", err)
	}
	if a.role() != ha.RoleStandby || leaders(a, b) != 1 {
		t.Fatalf("roles a=%s b=%s, want standby and leader", a.role(), b.role())
	}
	poll.Until(t, "a to report the loss", func() bool { return a.loses.Load() == 1 })
}

func TestElectorPartitionedLeaderStopsBeforeLeaseEnds(t *testing.T) {
	f := nomadtest.New()
	defer f.Close()
	clk := &clock{}
	a := startReplica(t, f, "a", func(c *ha.Config) { c.Now = clk.now; c.Renew = time.Second })
	poll.Until(t, "a to lead", func() bool { return a.role() == ha.RoleLeader })
	ctx := context.Background()
	if err := a.el.Held(ctx); err != nil {
		t.Fatalf("leader: Held = %v", err)
	}
	a.link.cut.Store(true)
	// 8.1 s after its last confirmed renewal (TTL 10 s, margin 2 s), no renewal having
	// succeeded: the fence is closed although Nomad would keep the lock until 2 x TTL +
	// delay = 21 s.
	clk.advance(8100 * time.Millisecond)
	err := a.el.Held(ctx)
	if !errors.Is(err, ha.ErrLeaseLost) {
		t.Fatalf("partitioned leader at 8.1 s: Held = %v, want ErrLeaseLost", err)
	}
	if a.role() != ha.RoleStandby {
		t.Fatalf("partitioned leader's role = %s, want standby", a.role())
	}
	lv := f.Variable("default", ha.DefaultLockPath)
	if lv == nil || lv.Lock == nil {
		t.Fatalf("Nomad's lock ended before the leader stopped writing: %+v", lv)
	}
}

func TestElectorFastTakeoverOfDeadLeader(t *testing.T) {
	f := nomadtest.New()
	defer f.Close()
	// a's API: answers health as leader until it dies (then refuses connections).
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, `{"status":"ok","role":"leader","replica_id":"a"}`)
	}))
	a := startReplica(t, f, "a", func(c *ha.Config) { c.Address = api.URL })
	poll.Until(t, "a to lead", func() bool { return a.role() == ha.RoleLeader })
	b := startReplica(t, f, "b", func(c *ha.Config) { c.FastTakeover = true })
	time.Sleep(200 * time.Millisecond)
	if b.role() != ha.RoleStandby {
		t.Fatalf("b leads while a's process answers")
	}
	// a dies without releasing (its renewals stop; nothing listens at its address). Nomad
	// would free the lock only after 2 x TTL + delay; b releases it once it saw a gone twice.
	a.link.cut.Store(true)
	api.Close()
	start := time.Now()
	poll.Until(t, "b to take over", func() bool { return b.role() == ha.RoleLeader })
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("takeover took %s; the TTL path would be 21 s, fast takeover should be about 2 retries", d)
	}
}

// Fast takeover needs proof that the leader's process is gone: an address that reaches
// this replica itself, or an unspecified one, is none, and the lock stays.
func TestElectorNoFastTakeoverWithoutProof(t *testing.T) {
	for _, tc := range []struct {
		name    string
		address func(self string) string
	}{
		{"unspecified address", func(string) string { return "http://0.0.0.0:1" }},
		{"address of the standby itself", func(self string) string { return self }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := nomadtest.New()
			defer f.Close()
			// b's own API, which the leader's advertised address may point at.
			self := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.WriteString(w, `{"status":"ok","role":"standby","replica_id":"b"}`)
			}))
			defer self.Close()
			a := startReplica(t, f, "a", func(c *ha.Config) { c.Address = tc.address(self.URL) })
			poll.Until(t, "a to lead", func() bool { return a.role() == ha.RoleLeader })
			b := startReplica(t, f, "b", func(c *ha.Config) { c.FastTakeover = true })
			// Many probes later a still leads.
			time.Sleep(300 * time.Millisecond)
			if a.role() != ha.RoleLeader || b.role() != ha.RoleStandby {
				t.Fatalf("roles a=%s b=%s; want a to keep the lock", a.role(), b.role())
			}
		})
	}
}

// A replica that cannot load the shared state gives the lock up instead of leading on a
// stale store; another replica leads.
func TestElectorTakeoverFailureGivesLockUp(t *testing.T) {
	f := nomadtest.New()
	defer f.Close()
	var tries atomic.Int32
	a := startReplica(t, f, "a", func(c *ha.Config) {
		c.OnLead = func(context.Context) error { tries.Add(1); return errors.New("shared state unreadable") }
	})
	poll.Until(t, "a to try leading", func() bool { return tries.Load() >= 1 })
	b := startReplica(t, f, "b", nil)
	poll.Until(t, "b to lead", func() bool { return b.role() == ha.RoleLeader })
	if a.role() != ha.RoleStandby || a.el.Held(context.Background()) == nil {
		t.Fatalf("a, which could not take over, has role %s", a.role())
	}
}
