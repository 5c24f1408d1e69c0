package nomad

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/hashicorp/nomad/api"
)

// KeepAliveConns is how many idle connections to the Nomad address the sidecar's client
// keeps: at least the pins and stats reads a round has in flight, so concurrent calls reuse
// their connections instead of opening (and for TLS, handshaking) a new one each time. The
// api package's default keeps GOMAXPROCS+1, two or three on a small machine.
const KeepAliveConns = 64

// HTTPClient is the HTTP client the sidecar talks to Nomad with: one shared keep-alive pool
// sized for concurrent pins (KeepAliveConns), HTTP/1.1 and TLS 1.2+ as the api package's
// default, and the TLS settings of tlsCfg (nil: none).
func HTTPClient(tlsCfg *api.TLSConfig) (*http.Client, error) {
	tr := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:          KeepAliveConns,
		MaxIdleConnsPerHost:   KeepAliveConns,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
		TLSClientConfig:       &tls.Config{MinVersion: tls.VersionTLS12},
		// Nomad's own client stays on HTTP/1 (exec and websockets); so does this one.
		ForceAttemptHTTP2: false,
	}
	hc := &http.Client{Transport: tr}
	if tlsCfg != nil {
		if err := api.ConfigureTLS(hc, tlsCfg); err != nil {
			return nil, fmt.Errorf("nomad client TLS: %w", err)
		}
	}
	return hc, nil
}

// FailoverDial is how long one connection attempt to one of several agent addresses may take
// before the next is tried.
const FailoverDial = 2 * time.Second

// HTTPClientFailover is HTTPClient against several Nomad agents (addresses: URLs of one
// scheme, the first is the one the api client is given): each new connection goes to the
// agent that took the last one, or to the next that accepts when it does not (a server that
// died or restarts), so the api client, its event stream and its writes follow a leader
// change without a load balancer. The Agents it returns (nil for one address) moves on from
// an agent that accepts connections but does not answer (hung, or a stopped process whose
// kernel still accepts): Backend calls it when its stream stalls or its probe gets no
// answer (Config.Agents). With TLS the first address's host name is verified (Nomad's server
// certificates carry server.<region>.nomad: set tls_server_name to it).
func HTTPClientFailover(tlsCfg *api.TLSConfig, addresses []string) (*http.Client, *Agents, error) {
	hc, err := HTTPClient(tlsCfg)
	if err != nil {
		return nil, nil, err
	}
	if len(addresses) < 2 {
		return hc, nil, nil
	}
	f, err := newFailover(addresses)
	if err != nil {
		return nil, nil, err
	}
	hc.Transport.(*http.Transport).DialContext = f.DialContext
	return hc, f, nil
}

// Agents dials the first agent of hosts that accepts, from the one that accepted last.
type Agents struct {
	hosts []string // host:port
	d     net.Dialer

	mu    sync.Mutex
	cur   int
	conns map[*agentConn]int // open connections, by host index
	// skipped: when Skip last moved off each host; such a host is dialled again only when
	// no other accepts, for skipFor.
	skipped map[int]time.Time
}

// skipFor is how long an agent Skip moved off is passed over.
const skipFor = 30 * time.Second

func newFailover(addresses []string) (*Agents, error) {
	f := &Agents{d: net.Dialer{Timeout: FailoverDial, KeepAlive: 30 * time.Second}, conns: map[*agentConn]int{}, skipped: map[int]time.Time{}}
	scheme := ""
	for i, a := range addresses {
		u, err := url.Parse(a)
		if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
			return nil, fmt.Errorf("nomad address %q: want http(s)://host[:port]", a)
		}
		if i > 0 && u.Scheme != scheme {
			return nil, fmt.Errorf("nomad address %q: scheme %s, want %s like %q", a, u.Scheme, scheme, addresses[0])
		}
		scheme = u.Scheme
		host := u.Host
		if u.Port() == "" {
			host = net.JoinHostPort(u.Hostname(), map[string]string{"http": "80", "https": "443"}[u.Scheme])
		}
		f.hosts = append(f.hosts, host)
	}
	return f, nil
}

// DialContext ignores the address asked for (always the first agent's): it goes to the
// agents in turn, those Skip moved off lately last.
func (f *Agents) DialContext(ctx context.Context, network, _ string) (net.Conn, error) {
	started := time.Now()
	f.mu.Lock()
	var order, later []int
	for i := range f.hosts {
		k := (f.cur + i) % len(f.hosts)
		if t, ok := f.skipped[k]; ok && started.Sub(t) < skipFor {
			later = append(later, k)
		} else {
			order = append(order, k)
		}
	}
	f.mu.Unlock()
	var errs []error
	for _, k := range append(order, later...) {
		conn, err := f.d.DialContext(ctx, network, f.hosts[k])
		if err != nil {
			errs = append(errs, err)
			if ctx.Err() != nil {
				break
			}
			continue
		}
		c := &agentConn{Conn: conn, f: f}
		f.mu.Lock()
		if t, ok := f.skipped[k]; ok && t.After(started) {
			// Skipped while this dial was under way: not this one.
			f.mu.Unlock()
			_ = conn.Close()
			errs = append(errs, fmt.Errorf("%s: skipped as not answering", f.hosts[k]))
			continue
		}
		f.cur = k
		f.conns[c] = k
		f.mu.Unlock()
		return c, nil
	}
	return nil, fmt.Errorf("no Nomad agent of %v accepts: %w", f.hosts, errors.Join(errs...))
}

// Current is the agent address new connections go to first.
func (f *Agents) Current() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.hosts[f.cur]
}

// Skip moves new connections on to the next agent and closes every connection to the current
// one, so requests waiting on an agent that does not answer fail (and are retried) instead
// of hanging. It returns the agent skipped and the one used now.
func (f *Agents) Skip() (from, to string) {
	f.mu.Lock()
	old := f.cur
	f.skipped[old] = time.Now()
	f.cur = (f.cur + 1) % len(f.hosts)
	var doomed []*agentConn
	for c, k := range f.conns {
		if k == old {
			doomed = append(doomed, c)
		}
	}
	from, to = f.hosts[old], f.hosts[f.cur]
	f.mu.Unlock()
	for _, c := range doomed {
		_ = c.Close()
	}
	return from, to
}

// agentConn is a connection Agents tracks until it is closed.
type agentConn struct {
	net.Conn
	f    *Agents
	once sync.Once
}

func (c *agentConn) Close() error {
	c.once.Do(func() {
		c.f.mu.Lock()
		delete(c.f.conns, c)
		c.f.mu.Unlock()
	})
	return c.Conn.Close()
}
