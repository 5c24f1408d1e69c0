// Package app assembles the sidecar: configuration (HCL file, Nomad's environment
// variables, flags), the backend (Nomad, or the embedded simulated cluster when no Nomad
// address is configured), the pipeline stages (sidecar/stages/rank, sidecar/stages/predict, sidecar/stages/place),
// the state store, the service loop and the HTTP API.
package app

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2/gohcl"
	"github.com/hashicorp/hcl/v2/hclparse"

	"github.com/hetgpu/hetgpu/model/cluster"
	"github.com/hetgpu/hetgpu/model/history"
	"github.com/hetgpu/hetgpu/sidecar/runtime/server"
	"github.com/hetgpu/hetgpu/sidecar/runtime/store"
	"github.com/hetgpu/hetgpu/sidecar/stages/preempt"
	"github.com/hetgpu/hetgpu/sidecar/stages/queue"
	"github.com/hetgpu/hetgpu/sidecar/stages/rank"
)

// Config is the sidecar's configuration file (HCL). Every setting is optional:
//
//	listen     = "127.0.0.1:4656"    # API address (flag -listen overrides)
//	public_url = "http://gpu-sidecar.internal:4656"  # how users reach the API; used in the
//	                                 # explain links written into jobs' ui blocks
//	token      = "..."               # bearer token the API requires (env HETGPU_TOKEN); grants everything
//	read_token  = "..."              # reads only: queue, decisions, explain, dashboard, metrics (HETGPU_READ_TOKEN)
//	write_token = "..."              # writes only: POST /v1/observations, the drivers' token (HETGPU_WRITE_TOKEN)
//	tls { cert_file = "" key_file = "" client_ca_file = "" }  # HTTPS; a client CA requires client certs (mTLS)
//	                                 # (health_without_client_cert = true: but for GET /v1/health)
//	insecure   = false               # serve a non-loopback address without TLS or tokens anyway
//	public_explain      = false      # every job's explain page (read-only) opens without a token
//	explain_link_secret = ""         # HMAC key of the signed explain links (>= 32 bytes); else
//	                                 # generated once into state_dir/explain-link.key
//	explain_link_ttl    = "720h"     # signed links stay valid at least this long (>= 24h);
//	                                 # re-signed once less than half of it is left
//	max_body_bytes   = 1048576       # request body limit (413 beyond)
//	max_observations = 1000          # run records per POST /v1/observations (413 beyond)
//	state_dir  = "/var/lib/hetgpu"   # sidecar.db (bbolt) and the predictor's catalog.jsonl
//	backend    = "auto"              # auto | nomad | simulated; auto = nomad when an address
//	                                 # is configured (here or NOMAD_ADDR), else simulated
//	shadow     = false               # decide and record, never pin
//	policy     = "hetgpu"            # registered scheduling policy (hetgpu sim --help lists them);
//	                                 # a baseline ("tiresias", "fifo", ...) with shadow = true shows
//	                                 # what it would have done on this cluster
//	reconcile  = "5s"                # rounds without events
//	debounce   = "250ms"             # batch event bursts into one round
//	log_level  = "info"
//
//	nomad {
//	  address   = "https://nomad.service:4646"  # else NOMAD_ADDR
//	  addresses = ["https://nomad-2:4646"]      # more agents to fail over to (a server that
//	                                            # dies or restarts, a leader change)
//	  token     = "..."                         # else NOMAD_TOKEN
//	  namespace = "*"                           # watched namespaces; else NOMAD_NAMESPACE, else all
//	  region    = ""                            # else NOMAD_REGION
//	  ca_file   = "" cert_file = "" key_file = ""  # else NOMAD_CACERT, NOMAD_CLIENT_CERT, NOMAD_CLIENT_KEY
//	  tls_server_name = ""  tls_skip_verify = false  # else NOMAD_TLS_SERVER_NAME, NOMAD_SKIP_VERIFY
//	  sample_device_stats = true   # measure energy from allocation device stats
//	  sample_every = "5s"          # how often (energy counters and power of running GPUs)
//	  topology = true              # read GPU topology from node device stats
//	  resync   = "1m"              # full list resync besides the one on every reconnect
//	  wait_notes = 3               # ui writes per held job saying why it waits (rank, what
//	                               # it waits for); each is a job version; -1: none
//	  stream_stall = "45s"         # reconnect an event stream silent this long ("0": never)
//	  leader_probe = "2s"          # ask the agent for the leader this often; a new leader or
//	                               # no answer reconnects at once ("0": never)
//	  rpc_address = ""             # a server's RPC host:port for writes to periodic and
//	                               # dispatched children (keeps their link to the parent);
//	                               # empty: the leader's (none behind the Task API
//	                               # socket); "off": none
//	}
//
//	simulator {                     # the embedded cluster used without Nomad
//	  cluster = "modern-mix"        # bundled name or spec file
//	  trace   = "bundled:default"   # what jobs arrive (see hetgpu sim)
//	  speed   = 300                 # simulated seconds per wall-clock second
//	  seed    = 1
//	}
//
//	placement { preset = "hetgpu" }            # hetgpu | rltune | gogh (sidecar/stages/place)
//	preemption {                               # sidecar/stages/preempt; only jobs with hetgpu.preemptible = true
//	  enabled        = true
//	  hysteresis     = 1.3     # move a running job only to a GPU type this much faster
//	  min_run        = "30m"   # never stop a job that started less than this ago
//	  min_run_history = "1h"   # ... nor one ranked by its history (no hetgpu.runtime/steps)
//	  min_run_first  = "6m"    # its first turn; each later turn as long as it has run, up to min_run_history
//	  long_job_guard = true    # start jobs longer than the backlog first
//	}
//	ranker {
//	  policy        = ""       # "" = decided by evidence (app.StagesWithRanker); "heuristic",
//	                           # "bundled:default" or a checkpoint file force that policy
//	  online_tuning = true     # fine-tune from finished runs, guarded (needs training state)
//	  tune_every    = "1m"     # how often to check for enough new runs
//	  tune_runs     = 200      # finished runs between tuning steps
//	  estimate_error = 0.5     # how far users' hetgpu.runtime is off (sigma of log true/estimate):
//	                           # a running job is ranked by its expected time left; 0 = estimate - run
//	  calibrate_estimates = true  # learn the error (and users' bias) from finished runs, starting
//	                           # at estimate_error; false keeps estimate_error fixed
//	  starvation = 0           # boost a job that waited more than this many times its expected
//	                           # runtime (0 = off; see docs/results/estimate-free.md)
//	  history {                # jobs without hetgpu.runtime are read by the finished runs of
//	                           # similar jobs (model/history), kept in the state file
//	    window       = 2000    # the newest finished runs that count
//	    prior_median = "1h"    # runtime before any run finished (on the reference GPU type)
//	    prior_sigma  = 1.5     # its spread (sigma of log runtime)
//	    prior_runs   = 5       # how many runs the prior weighs
//	    level_runs   = 5       # how many runs a broader group weighs in a narrower one
//	    min_sigma    = 0.5     # least spread of a group of similar jobs
//	    explore      = 0.6     # most weight a job's rank gives the cluster-wide runtimes beside its
//	                           # group's (a fresh job may be unlike its peers); 0 turns it off
//	  }
//	}
//	predictor { window = 1000  min_samples = 3 }
//	gang {
//	  reserve_after = "30m"    # a gang waiting this long reserves GPUs (backfill around it); "0" never
//	}
//	ha { enabled = false  ... }  # replicas with one leader on Nomad Variables (HAConfig)
//	queues { half_life = "168h" }   # usage decay for fair share (sidecar/stages/queue)
//	queue "research" { guarantee = 24 }   # a parent: its children list the namespaces
//	queue "team-a" {                # namespaces not listed go to queue "default"
//	  namespaces        = ["team-a"]
//	  weight            = 2         # fair-share weight (default 1)
//	  guarantee         = 16        # GPUs it may reclaim from borrowers
//	  guarantee_by_type = { a100 = 8 }
//	  max               = 64        # most GPUs it holds (0: no maximum)
//	  parent            = "research"
//	}
type Config struct {
	Listen    string `hcl:"listen,optional"`
	PublicURL string `hcl:"public_url,optional"`
	Token     string `hcl:"token,optional"`
	StateDir  string `hcl:"state_dir,optional"`
	Backend   string `hcl:"backend,optional"`
	// Policy is the registered scheduling policy that decides (DefaultPolicy when empty):
	// a baseline such as "tiresias" shows, in shadow mode, what it would have done.
	Policy    string `hcl:"policy,optional"`
	Shadow    bool   `hcl:"shadow,optional"`
	Reconcile string `hcl:"reconcile,optional"`
	Debounce  string `hcl:"debounce,optional"`
	LogLevel  string `hcl:"log_level,optional"`

	// The API's security (security.go).
	ReadToken         string     `hcl:"read_token,optional"`
	WriteToken        string     `hcl:"write_token,optional"`
	TLS               *TLSConfig `hcl:"tls,block"`
	Insecure          bool       `hcl:"insecure,optional"`
	PublicExplain     bool       `hcl:"public_explain,optional"`
	ExplainLinkSecret string     `hcl:"explain_link_secret,optional"`
	ExplainLinkTTL    string     `hcl:"explain_link_ttl,optional"`
	MaxBodyBytes      int64      `hcl:"max_body_bytes,optional"`
	MaxObservations   int        `hcl:"max_observations,optional"`

	Nomad     *NomadConfig     `hcl:"nomad,block"`
	Simulator *SimConfig       `hcl:"simulator,block"`
	Placement *PlacementConfig `hcl:"placement,block"`
	Preempt   *PreemptConfig   `hcl:"preemption,block"`
	Ranker    *RankerConfig    `hcl:"ranker,block"`
	Predictor *PredictorConfig `hcl:"predictor,block"`
	Gang      *GangConfig      `hcl:"gang,block"`
	HA        *HAConfig        `hcl:"ha,block"`
	Queues    []queue.Spec     `hcl:"queue,block"`
	QueueSet  *queue.Settings  `hcl:"queues,block"`

	// Parsed values (no hcl tag: gohcl ignores untagged fields).
	ReconcileD, DebounceD, ResyncD, ExplainLinkTTLD time.Duration
	// StreamStallD and LeaderProbeD are nomad.stream_stall and nomad.leader_probe (0: off).
	StreamStallD, LeaderProbeD time.Duration
	// SampleEveryD is nomad.sample_every.
	SampleEveryD time.Duration
	// QueueConfig is the queue and queues blocks, checked (no queue: not Enabled).
	QueueConfig queue.Config
	// File is where the configuration came from ("" for defaults).
	File string
}

// NomadConfig is the nomad block.
type NomadConfig struct {
	Address           string   `hcl:"address,optional"`
	Addresses         []string `hcl:"addresses,optional"`
	Token             string   `hcl:"token,optional"`
	Namespace         string   `hcl:"namespace,optional"`
	Region            string   `hcl:"region,optional"`
	CAFile            string   `hcl:"ca_file,optional"`
	CertFile          string   `hcl:"cert_file,optional"`
	KeyFile           string   `hcl:"key_file,optional"`
	TLSServerName     string   `hcl:"tls_server_name,optional"`
	TLSSkipVerify     bool     `hcl:"tls_skip_verify,optional"`
	SampleDeviceStats *bool    `hcl:"sample_device_stats,optional"`
	Topology          *bool    `hcl:"topology,optional"`
	Resync            string   `hcl:"resync,optional"`
	StreamStall       string   `hcl:"stream_stall,optional"`
	LeaderProbe       string   `hcl:"leader_probe,optional"`
	SampleEvery       string   `hcl:"sample_every,optional"`
	WaitNotes         *int     `hcl:"wait_notes,optional"`
	// RPCAddress is a server's RPC address (host:port) for writes to periodic and dispatched
	// children, which Nomad's HTTP API cannot make without cutting their link to their
	// parent; empty asks the agent for the leader's (behind the Task API socket: none);
	// "off" writes through the HTTP API only.
	RPCAddress string `hcl:"rpc_address,optional"`
}

// SimConfig is the simulator block.
type SimConfig struct {
	Cluster string  `hcl:"cluster,optional"`
	Trace   string  `hcl:"trace,optional"`
	Speed   float64 `hcl:"speed,optional"`
	Seed    int     `hcl:"seed,optional"`
}

// GangConfig is the gang block.
type GangConfig struct {
	ReserveAfter string `hcl:"reserve_after,optional"`

	// ReserveAfterD is ReserveAfter parsed (default DefaultReserveAfter; 0 never reserves).
	ReserveAfterD time.Duration
}

// DefaultReserveAfter is how long a gang waits before it reserves GPUs: long enough that the
// ordinary ranking decides most rounds, short enough that a big gang starts within hours on
// a busy cluster.
const DefaultReserveAfter = 30 * time.Minute

// PlacementConfig is the placement block.
type PlacementConfig struct {
	Preset string `hcl:"preset,optional"`
}

// PreemptConfig is the preemption block.
type PreemptConfig struct {
	Enabled      *bool   `hcl:"enabled,optional"`
	Hysteresis   float64 `hcl:"hysteresis,optional"`
	MinRun       string  `hcl:"min_run,optional"`
	LongJobGuard *bool   `hcl:"long_job_guard,optional"`
	// MinRunHistory is min_run for jobs ranked by the history of similar jobs.
	MinRunHistory string `hcl:"min_run_history,optional"`
	// MinRunFirst is the first turn of a job ranked by its history.
	MinRunFirst string `hcl:"min_run_first,optional"`

	// Parsed is the planner configuration (no hcl tag).
	Parsed preempt.Config
}

// RankerConfig is the ranker block.
type RankerConfig struct {
	// Policy forces a ranking policy: "heuristic", "bundled:default" or a checkpoint file.
	// Empty lets evidence decide: the last tuned policy that beat the heuristic, else the
	// bundled one when its held-out verdict beats the heuristic, else the heuristic.
	Policy string `hcl:"policy,optional"`
	// OnlineTuning fine-tunes the policy from finished runs (default true when the policy
	// carries its training state, as the bundled one does).
	OnlineTuning *bool  `hcl:"online_tuning,optional"`
	TuneEvery    string `hcl:"tune_every,optional"`
	TuneRuns     int    `hcl:"tune_runs,optional"`
	// EstimateError is the sigma of cluster.EstimateModel, which reads a job's hetgpu.runtime
	// once it has run (DefaultEstimateError when unset).
	EstimateError *float64 `hcl:"estimate_error,optional"`
	// CalibrateEstimates learns the model from finished runs, with EstimateError as its prior
	// (model/estimates; default true).
	CalibrateEstimates *bool `hcl:"calibrate_estimates,optional"`
	// Starvation is the starvation guard's threshold: a job that has waited more than this many
	// times its expected runtime is boosted, over the heuristic's order and a learned one
	// (rank.Heuristic.Starvation; 0, the default, off).
	Starvation float64 `hcl:"starvation,optional"`

	// History configures the runtime history jobs without hetgpu.runtime are read by.
	History *HistoryConfig `hcl:"history,block"`

	// TuneEveryD is TuneEvery parsed (no hcl tag).
	TuneEveryD time.Duration
}

// HistoryConfig is the ranker's history block: the runtime history learned from finished
// runs (model/history). Every setting is optional; history.Config's defaults apply.
type HistoryConfig struct {
	Window      int      `hcl:"window,optional"`
	PriorMedian string   `hcl:"prior_median,optional"`
	PriorSigma  *float64 `hcl:"prior_sigma,optional"`
	PriorRuns   *float64 `hcl:"prior_runs,optional"`
	LevelRuns   *float64 `hcl:"level_runs,optional"`
	MinSigma    *float64 `hcl:"min_sigma,optional"`
	Explore     *float64 `hcl:"explore,optional"`

	// Parsed is the history's configuration (no hcl tag).
	Parsed history.Config
}

// MaxHistoryWindow bounds ranker.history.window: the window is saved in the state file
// (and shared with replicas) after every finished run, about 150 bytes a run.
const MaxHistoryWindow = 20000

// finish checks the history block into h.Parsed.
func (h *HistoryConfig) finish(bad func(string, any, string) error) error {
	var hc history.Config
	if h.Window < 0 || h.Window > MaxHistoryWindow {
		return bad("ranker.history.window", h.Window, fmt.Sprintf("a number of finished runs from 1 to %d (default %d)", MaxHistoryWindow, history.DefaultWindow))
	}
	hc.Window = h.Window
	if h.PriorMedian != "" {
		d, err := time.ParseDuration(h.PriorMedian)
		if err != nil || d < time.Second || d > 365*24*time.Hour {
			return bad("ranker.history.prior_median", h.PriorMedian, fmt.Sprintf("a duration from 1s to 8760h, e.g. \"1h\" (default %v)", history.DefaultPriorMedian))
		}
		hc.PriorMedian = d
	}
	for _, f := range []struct {
		name     string
		v        *float64
		lo, hi   float64
		def      float64
		out      *float64
		expected string
	}{
		{"prior_sigma", h.PriorSigma, 0, cluster.MaxEstimateSigma, history.DefaultPriorSigma, &hc.PriorSigma, "the spread of log runtime before any run"},
		{"prior_runs", h.PriorRuns, 0, 1e6, history.DefaultPriorRuns, &hc.PriorRuns, "how many runs the prior weighs"},
		{"level_runs", h.LevelRuns, 0, 1e6, history.DefaultLevelRuns, &hc.LevelRuns, "how many runs a broader group weighs in a narrower one"},
		{"min_sigma", h.MinSigma, 0, cluster.MaxEstimateSigma, history.DefaultMinSigma, &hc.MinSigma, "the least spread of log runtime of a group of similar jobs"},
	} {
		if f.v == nil {
			continue
		}
		if !(*f.v > f.lo && *f.v <= f.hi) {
			return bad("ranker.history."+f.name, *f.v, fmt.Sprintf("a number above %g and at most %g: %s (default %g)", f.lo, f.hi, f.expected, f.def))
		}
		*f.out = *f.v
	}
	if h.Explore != nil {
		if !(*h.Explore >= 0 && *h.Explore < 1) {
			return bad("ranker.history.explore", *h.Explore, fmt.Sprintf("a weight from 0 (off) to below 1: the most a job's rank gives the cluster-wide runtimes beside its group's (default %g)", history.DefaultExplore))
		}
		hc.Explore = *h.Explore
		if hc.Explore == 0 {
			hc.Explore = -1 // off; zero in history.Config is the default
		}
	}
	if err := hc.Validate(); err != nil {
		return bad("ranker.history", "", err.Error())
	}
	h.Parsed = hc
	return nil
}

func (r *RankerConfig) onlineTuning() bool { return r != nil && boolOr(r.OnlineTuning, true) }

func (r *RankerConfig) calibrateEstimates() bool {
	return r == nil || boolOr(r.CalibrateEstimates, true)
}

// DefaultEstimateError is ranker.estimate_error's default: the simulator's own estimate error
// (sim.DefaultEstimateSigma: half of the estimates off by more than 40 %).
const DefaultEstimateError = 0.5

// starvation is ranker.starvation (0, off, when there is no ranker block).
func (r *RankerConfig) starvation() float64 {
	if r == nil {
		return 0
	}
	return r.Starvation
}

// estimateError is ranker.estimate_error or its default.
func (r *RankerConfig) estimateError() float64 {
	if r == nil || r.EstimateError == nil {
		return DefaultEstimateError
	}
	return *r.EstimateError
}

// PredictorConfig is the predictor block.
type PredictorConfig struct {
	Window     int `hcl:"window,optional"`
	MinSamples int `hcl:"min_samples,optional"`
}

// LoadConfig reads a configuration file; path "" gives the defaults.
func LoadConfig(path string) (*Config, error) {
	c, err := ReadConfig(path)
	if err != nil {
		return nil, err
	}
	if err := c.finish(); err != nil {
		return nil, err
	}
	return c, nil
}

// ReadConfig reads a configuration file without applying defaults or checking it, so flags
// can change it before Finish (path "" gives an empty configuration).
func ReadConfig(path string) (*Config, error) {
	if path == "" {
		return &Config{}, nil
	}
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	return ParseConfig(path, src)
}

// ParseConfig parses configuration HCL (without applying defaults; LoadConfig does).
func ParseConfig(filename string, src []byte) (*Config, error) {
	f, diags := hclparse.NewParser().ParseHCL(src, filename)
	if diags.HasErrors() {
		return nil, fmt.Errorf("config: %w", diags)
	}
	var c Config
	if diags := gohcl.DecodeBody(f.Body, nil, &c); diags.HasErrors() {
		return nil, fmt.Errorf("config: %w", diags)
	}
	c.File = filename
	return &c, nil
}

// Finish applies defaults and validates; exported for tests and the CLI.
func (c *Config) Finish() error { return c.finish() }

func (c *Config) finish() error {
	bad := func(field string, v any, exp string) error {
		where := ""
		if c.File != "" {
			where = c.File + ": "
		}
		return fmt.Errorf("%sconfig %s = %q: expected %s", where, field, fmt.Sprint(v), exp)
	}
	if c.Listen == "" {
		c.Listen = server.DefaultListen
	}
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		return bad("listen", c.Listen, "host:port, e.g. 127.0.0.1:4656")
	}
	if err := c.finishSecurity(bad); err != nil {
		return err
	}
	if c.PublicURL != "" && !strings.HasPrefix(c.PublicURL, "http://") && !strings.HasPrefix(c.PublicURL, "https://") {
		return bad("public_url", c.PublicURL, "an http:// or https:// URL")
	}
	switch c.Backend {
	case "":
		c.Backend = "auto"
	case "auto", "nomad", "simulated":
	default:
		return bad("backend", c.Backend, "auto, nomad or simulated")
	}
	if c.Policy == "" {
		c.Policy = DefaultPolicy
	}
	if err := checkPolicy(c.Policy); err != nil {
		return bad("policy", c.Policy, strings.TrimPrefix(err.Error(), "expected "))
	}
	switch strings.ToLower(c.LogLevel) {
	case "":
		c.LogLevel = "info"
	case "trace", "debug", "info", "warn", "error":
	default:
		return bad("log_level", c.LogLevel, "trace, debug, info, warn or error")
	}
	var err error
	if c.ReconcileD, err = duration(c.Reconcile, 5*time.Second); err != nil || c.ReconcileD < 100*time.Millisecond {
		return bad("reconcile", c.Reconcile, "a duration of at least 100ms, e.g. \"5s\"")
	}
	if c.DebounceD, err = duration(c.Debounce, 250*time.Millisecond); err != nil || c.DebounceD < 0 || c.DebounceD > c.ReconcileD {
		return bad("debounce", c.Debounce, "a duration between 0 and the reconcile period, e.g. \"250ms\"")
	}
	if c.Nomad == nil {
		c.Nomad = &NomadConfig{}
	}
	if c.ResyncD, err = duration(c.Nomad.Resync, time.Minute); err != nil || c.ResyncD < time.Second {
		return bad("nomad.resync", c.Nomad.Resync, "a duration of at least 1s, e.g. \"1m\"")
	}
	if c.StreamStallD, err = duration(c.Nomad.StreamStall, 45*time.Second); err != nil || (c.StreamStallD != 0 && c.StreamStallD < 35*time.Second) {
		return bad("nomad.stream_stall", c.Nomad.StreamStall, "\"0\" (off) or a duration of at least 35s (Nomad heartbeats every 30s), e.g. \"45s\"")
	}
	if c.LeaderProbeD, err = duration(c.Nomad.LeaderProbe, 2*time.Second); err != nil || (c.LeaderProbeD != 0 && c.LeaderProbeD < 100*time.Millisecond) {
		return bad("nomad.leader_probe", c.Nomad.LeaderProbe, "\"0\" (off) or a duration of at least 100ms, e.g. \"2s\"")
	}
	if a := strings.TrimSpace(c.Nomad.RPCAddress); a != "" && a != "off" {
		if _, port, err := net.SplitHostPort(a); err != nil || port == "" {
			return bad("nomad.rpc_address", c.Nomad.RPCAddress, "host:port of a Nomad server's RPC listener (port 4647 by default), or \"off\"")
		}
	}
	if c.SampleEveryD, err = duration(c.Nomad.SampleEvery, 5*time.Second); err != nil || c.SampleEveryD < 500*time.Millisecond {
		return bad("nomad.sample_every", c.Nomad.SampleEvery, "a duration of at least 500ms, e.g. \"5s\"")
	}
	if c.Simulator == nil {
		c.Simulator = &SimConfig{}
	}
	if c.Simulator.Cluster == "" {
		c.Simulator.Cluster = "modern-mix"
	}
	if c.Simulator.Trace == "" {
		c.Simulator.Trace = "bundled:default"
	}
	if c.Simulator.Speed == 0 {
		c.Simulator.Speed = 300
	}
	if c.Simulator.Speed < 1 || c.Simulator.Speed > 1e6 {
		return bad("simulator.speed", c.Simulator.Speed, "simulated seconds per wall second, from 1 to 1000000")
	}
	if c.Simulator.Seed == 0 {
		c.Simulator.Seed = 1
	}
	if c.Placement == nil {
		c.Placement = &PlacementConfig{}
	}
	switch c.Placement.Preset {
	case "":
		c.Placement.Preset = "hetgpu"
	case "hetgpu", "rltune", "gogh":
	default:
		return bad("placement.preset", c.Placement.Preset, "hetgpu, rltune or gogh")
	}
	if c.Preempt == nil {
		c.Preempt = &PreemptConfig{}
	}
	pc := preempt.Default()
	if c.Preempt.Hysteresis != 0 {
		if !(c.Preempt.Hysteresis >= 1) {
			return bad("preemption.hysteresis", c.Preempt.Hysteresis, "a speed-up factor >= 1 (default 1.3)")
		}
		pc.Hysteresis = c.Preempt.Hysteresis
	}
	if pc.MinRun, err = duration(c.Preempt.MinRun, pc.MinRun); err != nil || pc.MinRun < 0 {
		return bad("preemption.min_run", c.Preempt.MinRun, "a non-negative duration, e.g. \"30m\"")
	}
	if pc.MinRunHistory, err = duration(c.Preempt.MinRunHistory, pc.MinRunHistory); err != nil || pc.MinRunHistory < 0 {
		return bad("preemption.min_run_history", c.Preempt.MinRunHistory, "a non-negative duration, e.g. \"1h\"")
	}
	if pc.MinRunFirst, err = duration(c.Preempt.MinRunFirst, pc.MinRunFirst); err != nil || pc.MinRunFirst < 0 {
		return bad("preemption.min_run_first", c.Preempt.MinRunFirst, "a non-negative duration, e.g. \"6m\" (\"0\": every turn is min_run_history)")
	}
	pc.LongJobGuard = boolOr(c.Preempt.LongJobGuard, pc.LongJobGuard)
	c.Preempt.Parsed = pc
	if c.Ranker == nil {
		c.Ranker = &RankerConfig{}
	}
	if c.Ranker.TuneEveryD, err = duration(c.Ranker.TuneEvery, time.Minute); err != nil || c.Ranker.TuneEveryD < time.Second {
		return bad("ranker.tune_every", c.Ranker.TuneEvery, "a duration of at least 1s, e.g. \"1m\"")
	}
	if c.Ranker.TuneRuns < 0 {
		return bad("ranker.tune_runs", c.Ranker.TuneRuns, "a positive number of finished runs between tuning steps (default 200)")
	}
	if e := c.Ranker.estimateError(); !(e >= 0 && e <= cluster.MaxEstimateSigma) {
		return bad("ranker.estimate_error", e, fmt.Sprintf("a number from 0 to %d (the sigma of log(true runtime / hetgpu.runtime); 0 trusts the estimates)", cluster.MaxEstimateSigma))
	}
	if rank.ValidStarvation(c.Ranker.Starvation) != nil {
		return bad("ranker.starvation", c.Ranker.Starvation, "0 (off) or a finite slowdown above 1: a job that waited that many times its expected runtime is boosted")
	}
	if c.Ranker.History == nil {
		c.Ranker.History = &HistoryConfig{}
	}
	if err := c.Ranker.History.finish(bad); err != nil {
		return err
	}
	if c.Predictor == nil {
		c.Predictor = &PredictorConfig{}
	}
	if c.Predictor.Window < 0 {
		return bad("predictor.window", c.Predictor.Window, "a positive number of runs (default 1000)")
	}
	if c.Predictor.MinSamples < 0 {
		return bad("predictor.min_samples", c.Predictor.MinSamples, "a positive number of runs (default 3)")
	}
	if c.Gang == nil {
		c.Gang = &GangConfig{}
	}
	if c.Gang.ReserveAfterD, err = duration(c.Gang.ReserveAfter, DefaultReserveAfter); err != nil || c.Gang.ReserveAfterD < 0 {
		return bad("gang.reserve_after", c.Gang.ReserveAfter, "a non-negative duration, e.g. \"30m\" (\"0\" never reserves)")
	}
	if err := c.finishQueues(); err != nil {
		return err
	}
	if c.StateDir == "" {
		c.StateDir = filepath.Dir(store.DefaultPath())
	}
	return c.finishHA(bad)
}

func duration(s string, def time.Duration) (time.Duration, error) {
	if s == "" {
		return def, nil
	}
	return time.ParseDuration(s)
}

// UseNomad decides the backend: explicit, or auto = a Nomad address is configured (the
// nomad block or NOMAD_ADDR).
func (c *Config) UseNomad() bool {
	switch c.Backend {
	case "nomad":
		return true
	case "simulated":
		return false
	}
	return c.Nomad.Address != "" || os.Getenv("NOMAD_ADDR") != ""
}
