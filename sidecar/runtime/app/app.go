package app

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/hetgpu/hetgpu/model/cluster"
	"github.com/hetgpu/hetgpu/model/estimates"
	"github.com/hetgpu/hetgpu/model/history"
	"github.com/hetgpu/hetgpu/model/throughput"
	"github.com/hetgpu/hetgpu/sidecar/backends/nomad"
	"github.com/hetgpu/hetgpu/sidecar/backends/sim"
	"github.com/hetgpu/hetgpu/sidecar/learning/ppo"
	"github.com/hetgpu/hetgpu/sidecar/learning/rlsim"
	"github.com/hetgpu/hetgpu/sidecar/policies"
	"github.com/hetgpu/hetgpu/sidecar/runtime/server"
	"github.com/hetgpu/hetgpu/sidecar/runtime/service"
	"github.com/hetgpu/hetgpu/sidecar/runtime/store"
	"github.com/hetgpu/hetgpu/sidecar/sched"
	"github.com/hetgpu/hetgpu/sidecar/stages/place"
	"github.com/hetgpu/hetgpu/sidecar/stages/predict"
	"github.com/hetgpu/hetgpu/sidecar/stages/rank"
)

// Sidecar is an assembled sidecar, ready to Run.
type Sidecar struct {
	Config  *Config
	Log     hclog.Logger
	Backend cluster.Backend
	Service *service.Service
	Server  *server.Server
	Store   *store.Store
	// Addr is the API's bound address once Run is listening.
	Addr chan string
	// repl is the replica's election and shared state (ha block); nil for one replica.
	repl *replication
}

// Stages builds the production pipeline stages: the ranker (sidecar/stages/rank; see
// StagesWithRanker for which policy), the GOGH predictor (sidecar/stages/predict, catalog in stateDir)
// and the MILP placer (sidecar/stages/place). It returns the reference of the ranking policy it chose.
func Stages(c *Config, stateDir string, log hclog.Logger) (service.Stages, string, error) {
	st, rs, err := StagesWithRanker(c, stateDir, log)
	if err != nil {
		return st, "", err
	}
	return st, rs.Status().Policy, nil
}

// Ranking policy references (besides a checkpoint file and "tuned:PATH").
const (
	// PolicyHeuristic is the ranker's fallback order (rank.Heuristic); as ranker.policy it
	// forces it.
	PolicyHeuristic = "heuristic"
	// PolicyBundled is the policy embedded in the build; as ranker.policy it forces it
	// whatever its held-out verdict.
	PolicyBundled = "bundled:default"
)

// RankerState is the ranking policy the sidecar uses and why; online tuning updates it when it
// adopts a policy. Safe for concurrent use.
type RankerState struct {
	mu       sync.Mutex
	status   service.RankerStatus
	onChange func(service.RankerStatus)
	// sw reads the live estimate regime (nil for a baseline policy).
	sw *rank.RegimeSwitch
}

// Status is the ranking policy in use and why, with the live estimate regime.
func (r *RankerState) Status() service.RankerStatus {
	r.mu.Lock()
	s, sw := r.status, r.sw
	r.mu.Unlock()
	if sw != nil {
		if st := sw.State(); st.Regime != "" {
			share := st.Share
			s.Regime, s.UserEstimateShare, s.RegimeJobs = st.Regime, &share, st.Jobs
		}
	}
	return s
}

// OnChange sets a function called after every later change of the policy in use.
func (r *RankerState) OnChange(f func(service.RankerStatus)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.onChange = f
}

func (r *RankerState) set(s service.RankerStatus) {
	r.mu.Lock()
	r.status = s
	f := r.onChange
	r.mu.Unlock()
	if f != nil {
		f(s)
	}
}

// StagesWithRanker is Stages, returning the ranker's state. The ranking policy is, in order:
// the one ranker.policy names ("heuristic", "bundled:default" or a checkpoint file: forced);
// else the last policy online tuning adopted (state_dir/ranker-tuned.json) when it records
// that it beat the heuristic; else the bundled policy when its held-out verdict says it beats
// the heuristic; else the heuristic. Online tuning (when on) continues from the learned
// checkpoint even while the heuristic ranks, and switches to a tuned policy only when it beats
// both the last good policy and the heuristic on the newest runs.
func StagesWithRanker(c *Config, stateDir string, log hclog.Logger) (service.Stages, *RankerState, error) {
	return stagesWithRanker(c, stateDir, nil, log)
}

// stagesWithRanker is StagesWithRanker around the sidecar's runtime history (nil: the
// estimates step gets one of its own, which nothing teaches).
func stagesWithRanker(c *Config, stateDir string, hist *history.Model, log hclog.Logger) (service.Stages, *RankerState, error) {
	var st service.Stages
	pred, err := predict.New(predict.Options{
		CatalogPath: filepath.Join(stateDir, "catalog.jsonl"),
		Catalog:     predict.CatalogOptions{Window: c.Predictor.Window, MinSamples: c.Predictor.MinSamples},
		ClipFactor:  predict.ClipFactor,
		Logger:      log.Named("predict"),
	})
	if err != nil {
		return st, nil, fmt.Errorf("predictor: %w", err)
	}
	if c.Policy != "" && c.Policy != DefaultPolicy {
		bst, status, err := policyStages(c, pred, hist, log)
		if err != nil {
			return st, nil, err
		}
		return bst, &RankerState{status: status}, nil
	}
	tunedPath := filepath.Join(stateDir, TunedPolicyFile)
	ch, err := chooseRanker(c, tunedPath, rank.DefaultCheckpoint)
	if err != nil {
		return st, nil, err
	}
	logRanker(log, ch)
	ch.starvation = c.Ranker.starvation()
	rk, sw, rs, err := rankerFor(ch, log)
	if err != nil {
		return st, nil, err
	}
	// The registry's hetgpu policy, as every baseline (policyStages), around this ranker and
	// the placement, preemption and queue settings.
	o := policies.Options{Predictor: pred, Ranker: sw, Logger: log, Placement: c.Placement.Preset, Queues: c.QueueConfig,
		History: hist}
	if c.Preempt != nil {
		o.Preempt, o.NoPreempt = &c.Preempt.Parsed, !boolOr(c.Preempt.Enabled, true)
	}
	stages, err := policies.Live(DefaultPolicy, o)
	if err != nil {
		return st, nil, err
	}
	if c.Ranker.onlineTuning() && ch.ck != nil && ch.ck.Training != nil {
		if stages.Tuner, err = liveTuner(c, ch.ck, rk, sw, tunedPath, rs, log); err != nil {
			return st, nil, err
		}
	}
	return stages, rs, nil
}

// rankerFor builds the ranker of a choice and the switch that reads the live estimate regime:
// chosen by evidence (ch.auto), the learned policy ranks only in a regime whose held-out
// verdict beats the heuristic; otherwise the choice is pinned.
func rankerFor(ch rankerChoice, log hclog.Logger) (*rank.Ranker, *rank.RegimeSwitch, *RankerState, error) {
	// learned is the policy the verdicts judge; p the one ranking at start.
	var learned, p *rank.Policy
	var err error
	if ch.use || ch.auto && ch.winsSomewhere() {
		if learned, err = ch.ck.Policy(); err != nil {
			return nil, nil, nil, fmt.Errorf("ranking policy %s: %w", ch.learned, err)
		}
	}
	if ch.use {
		p = learned
	}
	rk, err := rank.New(p, rank.WithHeuristic(rank.Heuristic{Starvation: ch.starvation}))
	if err != nil {
		return nil, nil, nil, err
	}
	sw := &rank.RegimeSwitch{Ranker: rk, Learned: learned, Verdicts: ch.verdicts}
	rs := &RankerState{status: ch.status, sw: sw}
	if ch.auto {
		sw.OnChange = func(r rank.RegimeState) {
			s := ch.regimeStatus(r)
			log.Info("ranking policy for the live estimate regime", "regime", r.Regime, "user_estimate_share", r.Share,
				"jobs", r.Jobs, "policy", s.Policy, "reason", r.Reason)
			rs.set(s)
		}
	} else if err := sw.Pin(p, ch.status.Reason); err != nil {
		return nil, nil, nil, err
	}
	return rk, sw, rs, nil
}

// rankerChoice is the ranking policy chosen at start.
type rankerChoice struct {
	// ck is the learned checkpoint online tuning continues from; nil for none.
	ck *rank.Checkpoint
	// use: the ranker starts with ck's policy (else with the heuristic).
	use bool
	// auto: the choice follows the evidence, so the live estimate regime decides each round
	// (regimeStatus); else it is fixed (configured, or adopted by online tuning).
	auto bool
	// learned names ck ("bundled:default", a file, "tuned:PATH"); verdicts are its held-out
	// verdicts per estimate regime.
	learned  string
	verdicts rank.Verdicts
	status   service.RankerStatus
	// starvation is ranker.starvation, the guard over whichever order ranks.
	starvation float64
}

// winsSomewhere reports whether the learned policy's verdict beats the heuristic in any regime.
func (ch rankerChoice) winsSomewhere() bool { return len(ch.winning()) > 0 }

// winning are the regimes whose verdict beats the heuristic, in rank.Regimes order.
func (ch rankerChoice) winning() []string {
	var out []string
	for _, r := range rank.Regimes() {
		if ok, _ := ch.verdicts.Wins(r); ok {
			out = append(out, r)
		}
	}
	return out
}

// regimeStatus is the status of an evidence-based choice in the live regime r: the learned
// policy where its verdict in that regime beats the heuristic, the heuristic elsewhere.
func (ch rankerChoice) regimeStatus(r rank.RegimeState) service.RankerStatus {
	s := ch.status
	s.Verdict = ch.verdicts[r.Regime]
	s.Policy, s.Checkpoint = PolicyHeuristic, nil
	if r.Learned {
		s.Policy, s.Checkpoint = ch.learned, ch.ck
	}
	s.Reason = fmt.Sprintf("live estimate regime %s (%.0f %% of %d pending jobs carry hetgpu.runtime; held-out verdicts %s): %s",
		r.Regime, 100*r.Share, r.Jobs, ch.verdicts.Summary(), r.Reason)
	if !r.Learned && ch.learned == PolicyBundled && ch.ck != nil {
		s.Reason += `; ranker { policy = "bundled:default" } forces it`
	}
	return s
}

// chooseRanker picks the policy (see StagesWithRanker); bundled returns the build's policy.
func chooseRanker(c *Config, tunedPath string, bundled func() (*rank.Checkpoint, error)) (rankerChoice, error) {
	verdictsOf := func(ref string, ck *rank.Checkpoint) (rank.Verdicts, error) {
		vs, err := rank.VerdictsFromMeta(ck.Meta)
		if err != nil {
			return nil, fmt.Errorf("ranking policy %s: %w", ref, err)
		}
		return vs, nil
	}
	forced := func(ref string, ck *rank.Checkpoint) (rankerChoice, error) {
		vs, err := verdictsOf(ref, ck)
		if err != nil {
			return rankerChoice{}, err
		}
		v := vs[rank.RegimeEstimates]
		return rankerChoice{ck: ck, use: true, learned: ref, verdicts: vs, status: service.RankerStatus{Policy: ref, Verdict: v,
			Learned: ref, Verdicts: vs, Checkpoint: ck,
			Reason: fmt.Sprintf("configured: ranker.policy = %q forces it; held-out verdict %s (per regime: %s)", ref, v, vs.Summary())}}, nil
	}
	switch ref := c.Ranker.Policy; ref {
	case "":
	case PolicyHeuristic:
		return rankerChoice{status: service.RankerStatus{Policy: PolicyHeuristic, Reason: `configured: ranker.policy = "heuristic"`}}, nil
	case PolicyBundled:
		ck, err := bundled()
		if err != nil {
			return rankerChoice{}, fmt.Errorf("config ranker.policy = %q: %w", ref, err)
		}
		if ck == nil {
			return rankerChoice{}, fmt.Errorf("config ranker.policy = %q: this build has no bundled policy; expected %q or a checkpoint file", ref, PolicyHeuristic)
		}
		return forced(ref, ck)
	default:
		ck, err := rank.LoadCheckpoint(ref)
		if err != nil {
			return rankerChoice{}, fmt.Errorf("config ranker.policy = %q: %w", ref, err)
		}
		return forced(ref, ck)
	}
	if c.Ranker.onlineTuning() && fileExists(tunedPath) {
		ck, err := rank.LoadCheckpoint(tunedPath)
		if err != nil {
			return rankerChoice{}, fmt.Errorf("tuned policy %s: %w (delete it to start again from the bundled policy)", tunedPath, err)
		}
		if ck.Meta[rank.MetaTunedBeatsBaseline] == "true" {
			return rankerChoice{ck: ck, use: true, learned: "tuned:" + tunedPath, status: service.RankerStatus{Policy: "tuned:" + tunedPath,
				Learned: "tuned:" + tunedPath, Reason: tunedReason(ck), Checkpoint: ck}}, nil
		}
		// Adopted by a build whose tuning only had to match the last good policy.
		return rankerChoice{ck: ck, status: service.RankerStatus{Policy: PolicyHeuristic,
			Reason: fmt.Sprintf("the tuned policy %s records no evidence that it beats the heuristic; online tuning continues from it and switches to it once it does (delete the file to start from the bundled policy)", tunedPath)}}, nil
	}
	ck, err := bundled()
	if err != nil {
		return rankerChoice{}, fmt.Errorf("ranker: %w", err)
	}
	if ck == nil {
		return rankerChoice{status: service.RankerStatus{Policy: PolicyHeuristic, Reason: "this build has no bundled policy"}}, nil
	}
	vs, err := verdictsOf(PolicyBundled, ck)
	if err != nil {
		return rankerChoice{}, err
	}
	// Until a round shows the live regime, the verdict with estimates decides (as before
	// regimes); from then on the regime's own (regimeStatus).
	v := vs[rank.RegimeEstimates]
	ch := rankerChoice{ck: ck, auto: true, learned: PolicyBundled, verdicts: vs}
	base := service.RankerStatus{Policy: PolicyHeuristic, Verdict: v, Learned: PolicyBundled, Verdicts: vs}
	if v.Beats() {
		ch.use, base.Policy, base.Checkpoint = true, PolicyBundled, ck
		base.Reason = "the bundled policy beats the heuristic on held-out traces: " + v.String()
		ch.status = base
		return ch, nil
	}
	why := "the bundled policy has no held-out verdict"
	if v != nil {
		why = "the bundled policy does not beat the heuristic on held-out traces: " + v.String()
	}
	if w := ch.winning(); len(w) > 0 {
		why = fmt.Sprintf("the bundled policy beats the heuristic on held-out traces only in the %s estimate regime (%s); it ranks once the live cluster is there", strings.Join(w, " and "), vs.Summary())
	}
	base.Reason = why + `; ranker { policy = "bundled:default" } forces it`
	ch.status = base
	return ch, nil
}

// tunedReason is why a tuned policy ranks: the evidence its adoption recorded.
func tunedReason(ck *rank.Checkpoint) string {
	m := ck.Meta
	return fmt.Sprintf("online tuning adopted it: mean reward %s against the heuristic (ln of the heuristic's bounded slowdown over the policy's) on %s episodes of the newest runs, the last good policy's %s",
		m[rank.MetaTunedReward], m[rank.MetaTunedEpisodes], m[rank.MetaTunedRewardBefore])
}

// logRanker says which ranking policy the sidecar starts with and why, with the verdict's
// numbers; a forced learned policy that did not beat the heuristic is a warning.
func logRanker(log hclog.Logger, ch rankerChoice) {
	args := []any{"policy", ch.status.Policy, "reason", ch.status.Reason}
	if v := ch.status.Verdict; v != nil {
		args = append(args, "verdict", v.Result, "worst_pooled_ratio", v.WorstPooled, "worst_pooled_at", v.WorstPooledAt,
			"worst_window_ratio", v.WorstWindow, "worst_window_at", v.WorstWindowAt, "pooled_max", v.PooledMax, "window_max", v.WindowMax)
	}
	switch {
	case ch.use && ch.status.Verdict != nil && !ch.status.Verdict.Beats():
		log.Warn("ranking with a learned policy that does not beat the heuristic on held-out traces", args...)
	case ch.use:
		log.Info("ranking with a learned policy", args...)
	default:
		log.Info("ranking with the fallback heuristic", args...)
	}
}

// TunedPolicyFile is where online fine-tuning keeps its last adopted policy, in the state
// directory; the sidecar starts from it when the configuration names no policy.
const TunedPolicyFile = "ranker-tuned.json"

// liveTuner is online fine-tuning of the ranking policy: recent runs replayed on the cluster's
// layout with the hetgpu pipeline, rewarded against the same pipeline with the fallback
// heuristic (as `hetgpu train`), adopted only when it beats both the last good policy and the
// heuristic on the newest runs, and saved; the ranker and rs switch to it.
func liveTuner(c *Config, ck *rank.Checkpoint, rk *rank.Ranker, sw *rank.RegimeSwitch, tunedPath string, rs *RankerState, log hclog.Logger) (*rlsim.LiveTuner, error) {
	ft, err := ppo.NewFineTuner(ck)
	if err != nil {
		return nil, err
	}
	// The episodes' baseline is the heuristic: a step must beat it as well as the last good policy.
	ft.BeatBaseline = true
	ft.Save = func(c *rank.Checkpoint) error { return c.Save(tunedPath) }
	tab, err := throughput.Bundled()
	if err != nil {
		return nil, err
	}
	popts := policies.Options{Throughput: tab, Seed: 1, Logger: log.Named("tune")}
	pipeline := func(r sched.Ranker) (*sim.PipelinePolicy, error) { return policies.HetgpuPipeline(popts, r) }
	return &rlsim.LiveTuner{
		Online: &ppo.OnlineTuner{Ranker: rk, Tuner: ft, Every: c.Ranker.TuneRuns, Logger: log.Named("tune"),
			OnAdopt: func(ck *rank.Checkpoint, _ ppo.StepResult) {
				st := service.RankerStatus{Policy: "tuned:" + tunedPath, Learned: "tuned:" + tunedPath, Reason: tunedReason(ck), Checkpoint: ck}
				// Adopted on the newest live runs: it ranks in every regime, the switch stands aside.
				if p, err := ck.Policy(); err == nil {
					if err := sw.Pin(p, st.Reason); err != nil {
						log.Warn("the adopted policy cannot rank", "error", err)
					}
				}
				log.Info("ranking with the policy online tuning adopted", "policy", st.Policy, "reason", st.Reason)
				rs.set(st)
			}},
		Env: rlsim.EnvConfig{Throughput: tab, EpisodeJobs: rlsim.DefaultEpisodeJobs, Score: rank.ScoreBSLD,
			Policy: pipeline,
			Baseline: func() (*sim.PipelinePolicy, error) {
				h, err := rank.New(nil, rank.WithExplain(false))
				if err != nil {
					return nil, err
				}
				return pipeline(h)
			}},
	}, nil
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// NomadClient builds the API client: Nomad's environment variables (NOMAD_ADDR, NOMAD_TOKEN,
// NOMAD_NAMESPACE, NOMAD_REGION, NOMAD_CACERT, NOMAD_CAPATH, NOMAD_CLIENT_CERT,
// NOMAD_CLIENT_KEY, NOMAD_TLS_SERVER_NAME, NOMAD_SKIP_VERIFY), overridden by the nomad block.
func NomadClient(n *NomadConfig) (*api.Client, string, error) {
	c, ns, _, err := nomadClient(n, 0)
	return c, ns, err
}

// nomadClient is NomadClient with a bound on each request (0: none).
// The Agents returned is nil with one address (see nomad.HTTPClientFailover).
func nomadClient(n *NomadConfig, timeout time.Duration) (*api.Client, string, *nomad.Agents, error) {
	cfg := nomadAPIConfig(n)
	ns := n.Namespace
	if ns == "" {
		ns = os.Getenv("NOMAD_NAMESPACE")
	}
	if ns == "" {
		ns = "*"
	}
	var agents *nomad.Agents
	if !strings.HasPrefix(cfg.Address, "unix:") {
		// One keep-alive pool sized for the round's concurrent pins and stats reads.
		hc, ag, err := nomad.HTTPClientFailover(cfg.TLSConfig, nomadAddresses(cfg.Address, n.Addresses))
		if err != nil {
			return nil, "", nil, fmt.Errorf("nomad client for %s: %w", cfg.Address, err)
		}
		hc.Timeout, agents = timeout, ag
		cfg.HttpClient = hc
	} else if timeout > 0 {
		// The Task API socket (workload identity), with the bound.
		path := strings.TrimPrefix(strings.TrimPrefix(cfg.Address, "unix://"), "unix:")
		cfg.HttpClient = &http.Client{Timeout: timeout, Transport: &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				return (&net.Dialer{}).DialContext(ctx, "unix", path)
			}}}
	}
	c, err := api.NewClient(cfg)
	if err != nil {
		return nil, "", nil, fmt.Errorf("nomad client for %s: %w", cfg.Address, err)
	}
	return c, ns, agents, nil
}

// NomadRPC is how the backend and `hetgpu release` reach the servers' RPC for writes to
// linked children (nomad.RPCConfig): the API client's token (a workload identity's too: Nomad's
// servers take one on RPC), TLS when the API is https (Nomad's tls block covers both) or, behind
// the Task API socket, when a CA or client certificate is configured; the address
// nomad.rpc_address names or, empty, the leader's. Nil when rpc_address is "off", and behind the
// Task API socket unless rpc_address names a server (a task's network may not reach one).
func NomadRPC(n *NomadConfig) (*nomad.RPCConfig, error) {
	cfg := nomadAPIConfig(n)
	addr := strings.TrimSpace(n.RPCAddress)
	socket := strings.HasPrefix(cfg.Address, "unix:")
	if addr == "off" || socket && addr == "" {
		return nil, nil
	}
	rc := &nomad.RPCConfig{Address: addr, Token: cfg.SecretID}
	if strings.HasPrefix(cfg.Address, "https:") || socket && (n.CAFile != "" || n.CertFile != "") {
		// The api package's own reading of the CA, client certificate and skip-verify.
		tc := &tls.Config{MinVersion: tls.VersionTLS12}
		if err := api.ConfigureTLS(&http.Client{Transport: &http.Transport{TLSClientConfig: tc}}, cfg.TLSConfig); err != nil {
			return nil, fmt.Errorf("nomad RPC TLS: %w", err)
		}
		// The API's server name is the host of its URL; the RPC's is Nomad's server name.
		tc.ServerName = cfg.TLSConfig.TLSServerName
		rc.TLS = tc
	}
	return rc, nil
}

// nomadAPIConfig is the API client's configuration: Nomad's environment variables overridden
// by the nomad block.
func nomadAPIConfig(n *NomadConfig) *api.Config {
	cfg := api.DefaultConfig()
	if n.Address != "" {
		cfg.Address = n.Address
	}
	if n.Token != "" {
		cfg.SecretID = n.Token
	}
	if n.Region != "" {
		cfg.Region = n.Region
	}
	if cfg.TLSConfig == nil {
		cfg.TLSConfig = &api.TLSConfig{}
	}
	if n.CAFile != "" {
		cfg.TLSConfig.CACert = n.CAFile
	}
	if n.CertFile != "" {
		cfg.TLSConfig.ClientCert = n.CertFile
	}
	if n.KeyFile != "" {
		cfg.TLSConfig.ClientKey = n.KeyFile
	}
	if n.TLSServerName != "" {
		cfg.TLSConfig.TLSServerName = n.TLSServerName
	}
	if n.TLSSkipVerify {
		cfg.TLSConfig.Insecure = true
	}
	return cfg
}

// offIfZero maps a configured 0 (off) to the backend's negative (off; its 0 is the default).
func offIfZero(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

// nomadAddresses is the agent address followed by the others configured, each once.
func nomadAddresses(first string, more []string) []string {
	out := []string{first}
	for _, a := range more {
		if !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	return out
}

// reconnectCollector exposes the Nomad backend's event stream reconnects.
type reconnectCollector struct {
	b    *nomad.Backend
	desc *prometheus.Desc
}

func newReconnectCollector(b *nomad.Backend) reconnectCollector {
	return reconnectCollector{b: b, desc: prometheus.NewDesc("hetgpu_nomad_stream_reconnects_total",
		"Nomad event streams ended and opened again after a full resync, by reason: closed (EOF), stalled (no event or heartbeat in time), leader (the cluster's leader changed), unreachable (the agent stopped answering), open (could not be opened), error.",
		[]string{"reason"}, nil)}
}

func (c reconnectCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c reconnectCollector) Collect(ch chan<- prometheus.Metric) {
	for reason, n := range c.b.Reconnects() {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, float64(n), reason)
	}
}

// New assembles a sidecar from a finished configuration.
func New(c *Config, logOut io.Writer) (*Sidecar, error) {
	log := hclog.New(&hclog.LoggerOptions{Name: "hetgpu", Level: hclog.LevelFromString(c.LogLevel), Output: logOut})
	useNomad := c.UseNomad()
	stateDir := c.StateDir
	backendName := "nomad"
	if !useNomad {
		// Simulated jobs must never mix with a real cluster's state.
		stateDir = filepath.Join(c.StateDir, "simulated")
		backendName = "simulated"
	}
	if c.Shadow && !useNomad {
		return nil, fmt.Errorf("config shadow = true: shadow mode compares with Nomad's own placements and needs the Nomad backend (set nomad.address or NOMAD_ADDR)")
	}
	if err := os.MkdirAll(stateDir, 0o755); err != nil {
		return nil, fmt.Errorf("config state_dir = %q: %w", c.StateDir, err)
	}
	dbPath := filepath.Join(stateDir, "sidecar.db")
	if fi, err := os.Stat(filepath.Join(stateDir, "catalog.jsonl")); err == nil && fi.Size() > 0 && !fileExists(dbPath) {
		// The catalog is only ever written after the store: a store missing beside it was
		// deleted or lost.
		log.Warn("state file missing although the catalog holds runs: its observations, decisions and keys are lost; starting a new one",
			"path", dbPath)
	}
	st, err := store.Open(dbPath, store.Options{Logger: log.Named("store")})
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*Sidecar, error) {
		st.Close()
		return nil, err
	}
	// The runtime history of finished runs: the estimates step reads jobs without
	// hetgpu.runtime by it, the service teaches it and keeps it in the store.
	hist, err := history.New(c.Ranker.History.Parsed)
	if err != nil {
		return fail(fmt.Errorf("config ranker.history: %w", err))
	}
	stages, ranker, err := stagesWithRanker(c, stateDir, hist, log)
	if err != nil {
		return fail(err)
	}
	policyRef := ranker.Status().Policy
	// The dashboard reads the policy in use from the store; online tuning may change it.
	var repl *replication
	if c.HA.Enabled {
		if repl, err = newReplication(c, st, filepath.Join(stateDir, TunedPolicyFile), stages, ranker, log); err != nil {
			return fail(err)
		}
	}
	ranker.OnChange(func(rs service.RankerStatus) {
		if err := st.SetPolicyCheckpoint(rs.Policy); err != nil {
			log.Warn("recording the ranking policy failed", "policy", rs.Policy, "error", err)
		}
		repl.policyAdopted()
	})
	// One untimed synthetic round, so the first real round does not pay for heap growth and
	// HiGHS's first solves.
	if pl, ok := stages.Placer.(*place.Placer); ok {
		if err := pl.Warm(context.Background(), 256, 1024); err != nil {
			log.Warn("placement warm-up failed", "error", err)
		}
	}
	if prev := st.PolicyCheckpoint(); prev != policyRef {
		if prev != "" {
			log.Info("ranking policy changed", "from", prev, "to", policyRef)
		}
		if err := st.SetPolicyCheckpoint(policyRef); err != nil {
			return fail(err)
		}
	}
	public := c.publicURL()
	links, err := c.explainLinks(c.StateDir)
	if err != nil {
		return fail(err)
	}
	var backend cluster.Backend
	var nomadURL string
	var calib *estimates.Set
	if useNomad && c.Ranker.calibrateEstimates() {
		if calib, err = estimates.NewSet(estimates.Config{Prior: cluster.EstimateModel{Sigma: c.Ranker.estimateError()}}); err != nil {
			return fail(fmt.Errorf("ranker.estimate_error: %w", err))
		}
	}
	if useNomad {
		client, ns, agents, err := nomadClient(c.Nomad, 0)
		if err != nil {
			return fail(err)
		}
		rpc, err := NomadRPC(c.Nomad)
		if err != nil {
			return fail(err)
		}
		b, err := nomad.New(nomad.Config{Client: client, Namespace: ns, Logger: log, ExplainBaseURL: public, SignExplain: signQuery(links), ExplainRefresh: c.ExplainLinkTTLD / 2,
			EstimateError: c.Ranker.estimateError(), EstimateModel: calibModel(calib), Shadow: c.Shadow,
			SampleDeviceStats: boolOr(c.Nomad.SampleDeviceStats, true), SampleEvery: c.SampleEveryD, Topology: boolOr(c.Nomad.Topology, true), ResyncEvery: c.ResyncD,
			WaitNotes:   waitNotes(c.Nomad.WaitNotes),
			StreamStall: offIfZero(c.StreamStallD), LeaderProbe: offIfZero(c.LeaderProbeD), Agents: agents,
			Fence: repl.fence(), RPC: rpc})
		if err != nil {
			return fail(err)
		}
		backend = b
		nomadURL = client.Address()
		log.Info("Nomad backend", "address", client.Address(), "namespace", ns, "shadow", c.Shadow)
	} else {
		b, err := NewSimBackend(SimOptions{Cluster: c.Simulator.Cluster, Trace: c.Simulator.Trace, Seed: uint64(c.Simulator.Seed),
			Speed: c.Simulator.Speed, Logger: log})
		if err != nil {
			return fail(err)
		}
		backend = b
	}
	scfg := service.Config{Reconcile: c.ReconcileD, Debounce: c.DebounceD, Shadow: c.Shadow,
		BackendName: backendName, Logger: log, TuneEvery: c.Ranker.TuneEveryD, GangReserveAfter: c.Gang.ReserveAfterD,
		Ranker: ranker.Status, Estimates: calib, History: hist}
	repl.configure(&scfg)
	svc, err := service.New(scfg, backend, stages, st)
	if err != nil {
		return fail(err)
	}
	repl.setService(svc)
	if nb, ok := backend.(*nomad.Backend); ok {
		svc.Metrics().Registry.MustRegister(newReconnectCollector(nb))
	}
	apiCfg := c.serverConfig()
	apiCfg.Logger, apiCfg.NomadURL, apiCfg.Links = log, nomadURL, links
	srv := server.New(apiCfg, svc)
	log.Info("sidecar assembled", "backend", backendName, "state", st.Path(), "policy", policyRef, "placement", c.Placement.Preset)
	return &Sidecar{Config: c, Log: log, Backend: backend, Service: svc, Server: srv, Store: st, Addr: make(chan string, 1), repl: repl}, nil
}

func boolOr(p *bool, def bool) bool {
	if p == nil {
		return def
	}
	return *p
}

// Run serves the API and runs the service until ctx ends; the store is closed on return.
func (s *Sidecar) Run(ctx context.Context) error {
	defer s.Store.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if s.repl != nil {
		// The election ends (releasing the lock) before the store closes.
		done := s.repl.start(ctx)
		defer func() {
			cancel()
			<-done
		}()
	}
	errc := make(chan error, 2)
	go func() {
		errc <- s.Server.Serve(ctx, func(addr string) { s.Addr <- addr })
	}()
	go func() { errc <- s.Service.Run(ctx) }()
	var first error
	for i := 0; i < 2; i++ {
		err := <-errc
		if err != nil && first == nil {
			first = err
			cancel()
		}
		if i == 0 {
			cancel()
		}
	}
	if first != nil && !strings.Contains(first.Error(), context.Canceled.Error()) {
		return first
	}
	return nil
}

// calibModel is the backend's estimate models from a calibration set; nil keeps
// ranker.estimate_error's.
func calibModel(c *estimates.Set) func(string) cluster.EstimateModel {
	if c == nil {
		return nil
	}
	return c.Model
}

// waitNotes is nomad.wait_notes for the backend: unset takes its default, 0 or less none.
func waitNotes(p *int) int {
	switch {
	case p == nil:
		return 0
	case *p <= 0:
		return -1
	}
	return *p
}
