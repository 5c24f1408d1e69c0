// Package nomad is the Nomad backend of cluster.Cluster: it watches a Nomad cluster through
// github.com/hashicorp/nomad/api (event stream, resumed at the last index + 1, with a full
// resync through the list APIs on every (re)connect), builds snapshots of nodes, GPUs,
// allocations and held jobs, pins decisions by re-registering jobs with EnforceRegister, shows
// each decision in the job's ui block and a version tag, re-holds pinned jobs whose node or
// GPUs fail, and reports finished runs for the learner.
package nomad

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"

	"github.com/hetgpu/hetgpu/model/cluster"
)

// Config configures the backend.
type Config struct {
	Client *api.Client
	// Namespace to watch; "*" (default) is every namespace the token can read.
	Namespace string
	Logger    hclog.Logger
	// ExplainBaseURL is the sidecar's address as users reach it; the job's ui link points to
	// {ExplainBaseURL}/v1/jobs/{ns}/{id}/explain?format=html. Empty: no link.
	ExplainBaseURL string
	// SignExplain, when set, returns the "exp=…&sig=…" query that lets the link open the
	// job's explain page without a token (sidecar/runtime/explainlink).
	SignExplain func(ns, id string) string
	// EstimateError is the sigma of the model (cluster.EstimateModel) that reads a group's
	// hetgpu.runtime after it has run for a while; 0 takes the estimate minus the time run.
	EstimateError float64
	// EstimateModel, when set, replaces EstimateError's model: it is asked at every snapshot
	// for the namespace of each group (the models learned from finished runs, estimates.Set).
	EstimateModel func(namespace string) cluster.EstimateModel
	// ExplainRefresh: a signed link that expires within this is signed again and the job's ui
	// block rewritten (linkrefresh.go); 0 never refreshes.
	ExplainRefresh time.Duration
	// Shadow: un-held annotated jobs are offered for decision too (the service records but
	// never pins in shadow mode), and their own allocations are left out of the snapshot.
	Shadow bool
	// SampleDeviceStats polls the device stats of running hetgpu allocations to measure
	// energy (one client RPC per allocation per SampleEvery).
	SampleDeviceStats bool
	SampleEvery       time.Duration
	// Topology reads instance topology (NVLink peers, NUMA, PCIe switch) from node device
	// stats once per node registration.
	Topology bool
	// ResyncEvery adds a full list resync besides the one on every (re)connect; default 1m,
	// negative disables.
	ResyncEvery time.Duration
	// LearnGrace is how long after a group's last allocation ended the sidecar waits before
	// it records the run itself, so the task driver's record (throughput and energy measured
	// on the GPUs) is usually the one kept; default 20 s, negative reports at once.
	LearnGrace time.Duration
	// Now is the clock; default time.Now.
	Now func() time.Time
	// RetryBackoff is the first wait before reconnecting (doubling to MaxRetryBackoff);
	// default 1 s.
	RetryBackoff time.Duration
	// StreamStall ends an event stream that sent nothing, not even a heartbeat, for this long
	// (Nomad heartbeats every 30 s); default 45 s, negative disables.
	StreamStall time.Duration
	// LeaderProbe is how often the agent is asked for the cluster's leader while the stream is
	// open: an unreachable agent or a new leader ends the stream at once, and it is opened
	// again after a full resync (a stream an agent forwards through a server that died sends
	// nothing more, not even heartbeats); default 2 s, negative disables.
	LeaderProbe time.Duration
	// Agents, when set (HTTPClientFailover with several addresses), is told to move on to the
	// next agent when the stream stalls or the agent stops answering the probe.
	Agents *Agents
	// Parallel bounds the API calls in flight at once for pins (jobs pinned side by side in a
	// round) and for the node and job reads of a resync (default 16); StatsParallel the node
	// stats requests for energy sampling and live readings (default 16; a server forwards each
	// to a client).
	Parallel      int
	StatsParallel int
	// WaitNotes caps the ui writes per job that say why a held job waits (its rank and what
	// it waits for; each write is a job version, made again only when the kind of wait
	// changes); default 3, negative none.
	WaitNotes int
	// Fence, when set (sidecar/runtime/ha), is checked before every batch of job writes (pins,
	// preemptions, re-holds): a replica that lost the leader lock writes nothing more. Nil:
	// one replica, always allowed.
	Fence cluster.Fence
	// RPC, when set, is how writes to children linked to their parent (periodic and
	// dispatched) reach the servers, keeping the link (rpc.go). Nil: the HTTP API, which cuts
	// a periodic child's link and cannot write a dispatched child at all.
	RPC *RPCConfig
}

// Backend implements cluster.Cluster and cluster.Backend on Nomad.
type Backend struct {
	cfg Config
	c   *api.Client
	rpc *rpcClient // nil without Config.RPC
	log hclog.Logger

	mu        sync.Mutex
	nodes     map[string]*nodeRec
	jobs      map[string]*jobRec // by "ns/id"
	allocs    map[string]*allocRec
	blocked   map[string]*api.Evaluation // latest blocked eval by "ns/id"
	index     uint64
	energy    map[string]*energyAcc
	learned   map[string]bool
	placed    map[string]bool
	gone      []string
	lastFault map[string]time.Time
	lastStats time.Time
	// unmanaged: job key -> version of jobs read and found not hetgpu's (see knownUnmanaged).
	unmanaged map[string]uint64
	// orphans: live allocations of jobs that are gone, to ask Nomad about (checkOrphans).
	orphans map[string]bool

	// reconnects counts event streams ended and opened again, by reason (watch.go).
	reconnects map[string]uint64

	// round is the latest Snapshot's view, which Pin enforces (snapshot.go, roundView).
	round atomic.Pointer[roundView]
}

// New returns a backend; Watch must run for it to see anything.
func New(cfg Config) (*Backend, error) {
	if cfg.Client == nil {
		return nil, errors.New("nomad backend: no API client")
	}
	if cfg.Namespace == "" {
		cfg.Namespace = "*"
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.ResyncEvery == 0 {
		cfg.ResyncEvery = time.Minute
	}
	if cfg.SampleEvery <= 0 {
		cfg.SampleEvery = 5 * time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.LearnGrace == 0 {
		cfg.LearnGrace = 20 * time.Second
	}
	if cfg.RetryBackoff <= 0 {
		cfg.RetryBackoff = time.Second
	}
	if cfg.StreamStall == 0 {
		cfg.StreamStall = 45 * time.Second
	}
	if cfg.LeaderProbe == 0 {
		cfg.LeaderProbe = 2 * time.Second
	}
	if cfg.Parallel <= 0 {
		cfg.Parallel = 32
	}
	if cfg.WaitNotes == 0 {
		cfg.WaitNotes = 3
	}
	if cfg.StatsParallel <= 0 {
		cfg.StatsParallel = 16
	}
	return &Backend{
		cfg: cfg, c: cfg.Client, rpc: newRPCClient(cfg.RPC, cfg.Client), log: cfg.Logger.Named("nomad"),
		nodes: map[string]*nodeRec{}, jobs: map[string]*jobRec{}, allocs: map[string]*allocRec{},
		blocked: map[string]*api.Evaluation{},
		energy:  map[string]*energyAcc{}, learned: map[string]bool{}, placed: map[string]bool{},
		lastFault: map[string]time.Time{}, unmanaged: map[string]uint64{}, orphans: map[string]bool{},
		reconnects: map[string]uint64{},
	}, nil
}

func (b *Backend) now() time.Time { return b.cfg.Now() }

var _ cluster.Preempter = (*Backend)(nil)
var _ cluster.Backend = (*Backend)(nil)
