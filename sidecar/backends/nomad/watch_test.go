package nomad

import (
	"context"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/hetgpu/hetgpu/internal/poll"
	"github.com/hetgpu/hetgpu/sidecar/backends/nomad/nomadtest"
)

// watching runs Watch on a fixture configured by mod until the test ends.
func watching(t *testing.T, f *fixture) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var changes atomic.Int64
	done := make(chan error, 1)
	go func() { done <- f.b.Watch(ctx, func() { changes.Add(1) }) }()
	t.Cleanup(func() { cancel(); <-done })
	poll.Until(t, "first resync", func() bool { return changes.Load() > 0 })
}

func pendingIDs(t *testing.T, f *fixture) []string {
	var ids []string
	for _, j := range f.snapshot(t).Pending {
		ids = append(ids, j.ID)
	}
	return ids
}

// TestStreamStallTimer: heartbeats keep a quiet stream alive; a stream that sends nothing,
// heartbeats included, for StreamStall is ended, and events after it are seen through the
// resync and the new stream.
func TestStreamStallTimer(t *testing.T) {
	const stall = 300 * time.Millisecond
	for _, tc := range []struct {
		name      string
		heartbeat time.Duration
		wantStall bool
	}{
		{"heartbeats every 100ms keep it", 100 * time.Millisecond, false},
		{"no heartbeat: stalled", 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, func(c *Config) { c.ResyncEvery, c.StreamStall, c.LeaderProbe = -1, stall, -1 })
			f.srv.SetHeartbeat(tc.heartbeat)
			watching(t, f)
			time.Sleep(4 * stall)
			if got := f.b.Reconnects()[reasonStalled] > 0; got != tc.wantStall {
				t.Fatalf("stalled reconnects after %s quiet: %v (%v), want %v", 4*stall, got, f.b.Reconnects(), tc.wantStall)
			}
		})
	}

	// A stream that stops sending altogether (heartbeats too) while the cluster moves on.
	f := newFixture(t, func(c *Config) { c.ResyncEvery, c.StreamStall, c.LeaderProbe = -1, stall, -1 })
	f.srv.SetHeartbeat(50 * time.Millisecond)
	watching(t, f)
	f.srv.Stall(true)
	f.srv.Register(heldJob("during-stall", 1, 1, nil))
	start := time.Now()
	poll.Until(t, "the stall noticed", func() bool { return f.b.Reconnects()[reasonStalled] > 0 })
	if d := time.Since(start); d > stall+time.Second {
		t.Errorf("stall noticed after %s, want about %s", d, stall)
	}
	f.srv.Stall(false)
	poll.Until(t, "the job registered during the stall", func() bool { return len(pendingIDs(t, f)) == 1 })
}

// TestLeaderProbe: an election (no leader) leaves the stream open; a new leader ends it, and
// the backend resyncs and streams again at once.
func TestLeaderProbe(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.ResyncEvery, c.LeaderProbe = -1, 20*time.Millisecond })
	f.srv.SetLeader("127.0.0.1:4001")
	watching(t, f)
	f.srv.SetLeader("") // election under way: the agent answers 500 No cluster leader
	time.Sleep(200 * time.Millisecond)
	if n := f.b.Reconnects(); len(n) != 0 {
		t.Fatalf("reconnected while there was no leader: %v", n)
	}
	before := len(f.srv.Requests())
	f.srv.SetLeader("127.0.0.1:4002")
	f.srv.Register(heldJob("after-election", 1, 1, nil))
	poll.Until(t, "the leader change noticed", func() bool { return f.b.Reconnects()[reasonLeader] == 1 })
	poll.Until(t, "the job after the election", func() bool { return len(pendingIDs(t, f)) == 1 })
	// The resync that found the job comes before the stream's reopening: wait for both, since a
	// loaded machine may see the job before the new stream's request is sent.
	var resynced, reopened bool
	poll.Until(t, "a resync and a reopened stream after the leader change", func() bool {
		resynced, reopened = false, false
		for _, r := range f.srv.Requests()[before:] {
			resynced = resynced || strings.HasPrefix(r, "GET /v1/jobs")
			reopened = reopened || strings.HasPrefix(r, "GET /v1/event/stream")
		}
		return resynced && reopened
	})
	time.Sleep(200 * time.Millisecond)
	if n := f.b.Reconnects()[reasonLeader]; n != 1 {
		t.Errorf("%d leader reconnects for one leader change", n)
	}
}

// deadAddr is an address nothing listens on.
func deadAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return "http://" + addr
}

// failoverClient is an api client whose address is addrs[0], failing over to the others.
func failoverClient(t *testing.T, addrs ...string) *api.Client {
	t.Helper()
	hc, _, err := HTTPClientFailover(nil, addrs)
	if err != nil {
		t.Fatal(err)
	}
	c, err := api.NewClient(&api.Config{Address: addrs[0], HttpClient: hc})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestFailoverAcrossAgents: the api client reaches the first agent that accepts; a watched
// backend whose agent goes away streams from the next one, and sees what is registered there.
func TestFailoverAcrossAgents(t *testing.T) {
	live := nomadtest.New()
	t.Cleanup(live.Close)
	live.AddNode("node-t4-0000", "t4", "Tesla T4", 4)
	c := failoverClient(t, deadAddr(t), live.URL)
	if nodes, _, err := c.Nodes().List(nil); err != nil || len(nodes) != 1 {
		t.Fatalf("through a dead first address: %v, %v", nodes, err)
	}

	for _, tc := range []struct{ name, addrs, wantErr string }{
		{"mixed schemes", "http://a:4646 https://b:4646", "scheme https, want http"},
		{"no host", "http://a:4646 /b", "want http(s)://host[:port]"},
		{"one address", "http://a:4646", ""},
		{"two", "http://a:4646 http://b", ""},
	} {
		_, _, err := HTTPClientFailover(nil, strings.Fields(tc.addrs))
		if (err == nil) != (tc.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.wantErr)
		}
	}

	// The agent the backend streams from goes away (a server killed): its next connection
	// goes to the other agent, which has a job the first never had.
	first, second := nomadtest.New(), nomadtest.New()
	t.Cleanup(first.Close)
	t.Cleanup(second.Close)
	for _, s := range []*nomadtest.Server{first, second} {
		s.AddNode("node-t4-0000", "t4", "Tesla T4", 4)
	}
	f := &fixture{srv: first}
	b, err := New(Config{Client: failoverClient(t, first.URL, second.URL), ResyncEvery: -1, RetryBackoff: 10 * time.Millisecond, LeaderProbe: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	f.b = b
	watching(t, f)
	second.Register(heldJob("on-the-second", 1, 1, nil))
	first.Listener.Close()
	first.CloseClientConnections()
	poll.Until(t, "the job of the second agent", func() bool {
		ids := pendingIDs(t, f)
		return len(ids) == 1 && ids[0] == "on-the-second"
	})
	if n := b.Reconnects(); n[reasonClosed]+n[reasonUnreachable] == 0 {
		t.Errorf("reconnects %v, want the closed stream counted", n)
	}
}

// TestSkipsAgentThatDoesNotAnswer: the agent the backend streams from keeps its connections
// but stops answering (a hung or stopped server): the leader probe times out, the backend
// moves on to the next agent, closing the connections left on the hung one, and sees what is
// registered on the other; the hung agent is not dialled again while the other answers.
func TestSkipsAgentThatDoesNotAnswer(t *testing.T) {
	first, second := nomadtest.New(), nomadtest.New()
	t.Cleanup(first.Close)
	t.Cleanup(second.Close)
	for _, s := range []*nomadtest.Server{first, second} {
		s.AddNode("node-t4-0000", "t4", "Tesla T4", 4)
	}
	hc, agents, err := HTTPClientFailover(nil, []string{first.URL, second.URL})
	if err != nil || agents == nil {
		t.Fatalf("failover client: %v, %v", agents, err)
	}
	c, err := api.NewClient(&api.Config{Address: first.URL, HttpClient: hc})
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(Config{Client: c, ResyncEvery: -1, RetryBackoff: 10 * time.Millisecond, LeaderProbe: 50 * time.Millisecond, Agents: agents})
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{srv: first, b: b}
	watching(t, f)
	first.SetLatency(time.Hour) // accepts, answers nothing
	second.Register(heldJob("on-the-second", 1, 1, nil))
	poll.Until(t, "the job of the second agent", func() bool {
		ids := pendingIDs(t, f)
		return len(ids) == 1 && ids[0] == "on-the-second"
	})
	if n := b.Reconnects()[reasonUnreachable]; n == 0 {
		t.Errorf("reconnects %v, want the unanswered probe counted", b.Reconnects())
	}
	if got := agents.Current(); got != strings.TrimPrefix(second.URL, "http://") {
		t.Errorf("current agent %s, want the second", got)
	}
	before := first.TotalCalls()
	time.Sleep(300 * time.Millisecond)
	if n := first.TotalCalls() - before; n != 0 {
		t.Errorf("%d more requests to the agent that does not answer", n)
	}
}
