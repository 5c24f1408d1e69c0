package app

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"

	"github.com/hetgpu/hetgpu/sidecar/nomad"
	"github.com/hetgpu/hetgpu/sidecar/place"
	"github.com/hetgpu/hetgpu/sidecar/policies"
	"github.com/hetgpu/hetgpu/sidecar/predict"
	"github.com/hetgpu/hetgpu/sidecar/preempt"
	"github.com/hetgpu/hetgpu/sidecar/rank"
	"github.com/hetgpu/hetgpu/sidecar/rank/rlsim"
	"github.com/hetgpu/hetgpu/sidecar/rank/rltrain"
	"github.com/hetgpu/hetgpu/sidecar/sched"
	"github.com/hetgpu/hetgpu/sidecar/server"
	"github.com/hetgpu/hetgpu/sidecar/service"
	"github.com/hetgpu/hetgpu/sidecar/sim"
	"github.com/hetgpu/hetgpu/sidecar/store"
	"github.com/hetgpu/hetgpu/sidecar/throughput"
)

// Sidecar is an assembled sidecar, ready to Run.
type Sidecar struct {
	Config  *Config
	Log     hclog.Logger
	Backend service.Backend
	Service *service.Service
	Server  *server.Server
	Store   *store.Store
	// Addr is the API's bound address once Run is listening.
	Addr chan string
}

// Stages builds the production pipeline stages: the learned ranker (sidecar/rank, bundled
// policy unless a checkpoint is configured), the GOGH predictor (sidecar/predict, catalog in
// stateDir) and the MILP placer (sidecar/place). It returns the policy reference it used.
func Stages(c *Config, stateDir string, log hclog.Logger) (service.Stages, string, error) {
	var st service.Stages
	pred, err := predict.New(predict.Options{
		CatalogPath: filepath.Join(stateDir, "catalog.jsonl"),
		Catalog:     predict.CatalogOptions{Window: c.Predictor.Window, MinSamples: c.Predictor.MinSamples},
		ClipFactor:  predict.ClipFactor,
		Logger:      log.Named("predict"),
	})
	if err != nil {
		return st, "", fmt.Errorf("predictor: %w", err)
	}
	policyRef := "bundled:default"
	tunedPath := filepath.Join(stateDir, TunedPolicyFile)
	var ck *rank.Checkpoint
	switch {
	case c.Ranker.Policy != "":
		if ck, err = rank.LoadCheckpoint(c.Ranker.Policy); err != nil {
			return st, "", fmt.Errorf("config ranker.policy = %q: %w", c.Ranker.Policy, err)
		}
		policyRef = c.Ranker.Policy
	case c.Ranker.onlineTuning() && fileExists(tunedPath):
		// The last policy online tuning adopted (it only ever adopts one that did not regress).
		if ck, err = rank.LoadCheckpoint(tunedPath); err != nil {
			return st, "", fmt.Errorf("tuned policy %s: %w (delete it to start again from the bundled policy)", tunedPath, err)
		}
		policyRef = "tuned:" + tunedPath
	default:
		if ck, err = rank.DefaultCheckpoint(); err != nil {
			return st, "", fmt.Errorf("ranker: %w", err)
		}
		if ck == nil {
			policyRef = "heuristic (no bundled policy)"
		}
	}
	var p *rank.Policy
	if ck != nil {
		if p, err = ck.Policy(); err != nil {
			return st, "", fmt.Errorf("ranking policy %s: %w", policyRef, err)
		}
	}
	rk, err := rank.New(p)
	if err != nil {
		return st, "", err
	}
	pcfg, err := place.Preset(c.Placement.Preset)
	if err != nil {
		return st, "", err
	}
	pl, err := place.New(pcfg, log)
	if err != nil {
		return st, "", fmt.Errorf("placer: %w", err)
	}
	stages := service.Stages{Ranker: rk, Predictor: pred, Placer: pl, Learner: pred}
	if c.Ranker.onlineTuning() && ck != nil && ck.Training != nil {
		if stages.Tuner, err = liveTuner(c, ck, rk, tunedPath, log); err != nil {
			return st, "", err
		}
	}
	pc, enabled := preempt.Default(), true
	if c.Preempt != nil {
		pc, enabled = c.Preempt.Parsed, boolOr(c.Preempt.Enabled, true)
	}
	if enabled {
		if stages.Preemptor, err = preempt.New(pc); err != nil {
			return st, "", err
		}
	}
	return stages, policyRef, nil
}

// TunedPolicyFile is where online fine-tuning keeps its last adopted policy, in the state
// directory; the sidecar starts from it when the configuration names no policy.
const TunedPolicyFile = "ranker-tuned.json"

// liveTuner is online fine-tuning of the ranking policy: recent runs replayed on the cluster's
// layout with the hetgpu pipeline, rewarded against the same pipeline with the fallback
// heuristic (as `hetgpu train`), adopted only when it does not regress, and saved.
func liveTuner(c *Config, ck *rank.Checkpoint, rk *rank.Ranker, tunedPath string, log hclog.Logger) (*rlsim.LiveTuner, error) {
	ft, err := rank.NewFineTuner(ck)
	if err != nil {
		return nil, err
	}
	ft.Save = func(c *rank.Checkpoint) error { return c.Save(tunedPath) }
	tab, err := throughput.Bundled()
	if err != nil {
		return nil, err
	}
	popts := policies.Options{Throughput: tab, Seed: 1, Logger: log.Named("tune")}
	pipeline := func(r sched.Ranker) (sim.Policy, error) { return policies.HetgpuPipeline(popts, r) }
	return &rlsim.LiveTuner{
		Online: &rank.OnlineTuner{Ranker: rk, Tuner: ft, Every: c.Ranker.TuneRuns, Logger: log.Named("tune")},
		Env: rlsim.EnvConfig{Throughput: tab, EpisodeJobs: rltrain.DefaultEpisodeJobs, Score: rank.ScoreBSLD,
			Policy: pipeline,
			Baseline: func() (sim.Policy, error) {
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
	ns := n.Namespace
	if ns == "" {
		ns = os.Getenv("NOMAD_NAMESPACE")
	}
	if ns == "" {
		ns = "*"
	}
	if !strings.HasPrefix(cfg.Address, "unix:") {
		// One keep-alive pool sized for the round's concurrent pins and stats reads.
		hc, err := nomad.HTTPClient(cfg.TLSConfig)
		if err != nil {
			return nil, "", fmt.Errorf("nomad client for %s: %w", cfg.Address, err)
		}
		cfg.HttpClient = hc
	}
	c, err := api.NewClient(cfg)
	if err != nil {
		return nil, "", fmt.Errorf("nomad client for %s: %w", cfg.Address, err)
	}
	return c, ns, nil
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
	stages, policyRef, err := Stages(c, stateDir, log)
	if err != nil {
		return fail(err)
	}
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
	public := c.PublicURL
	if public == "" {
		public = "http://" + c.Listen
	}
	var backend service.Backend
	var nomadURL string
	if useNomad {
		client, ns, err := NomadClient(c.Nomad)
		if err != nil {
			return fail(err)
		}
		b, err := nomad.New(nomad.Config{Client: client, Namespace: ns, Logger: log, ExplainBaseURL: public, Shadow: c.Shadow,
			SampleDeviceStats: boolOr(c.Nomad.SampleDeviceStats, true), Topology: boolOr(c.Nomad.Topology, true), ResyncEvery: c.ResyncD})
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
	svc, err := service.New(service.Config{Reconcile: c.ReconcileD, Debounce: c.DebounceD, Shadow: c.Shadow,
		BackendName: backendName, Logger: log, TuneEvery: c.Ranker.TuneEveryD, GangReserveAfter: c.Gang.ReserveAfterD}, backend, stages, st)
	if err != nil {
		return fail(err)
	}
	srv := server.New(server.Config{Listen: c.Listen, Token: c.Token, Logger: log, NomadURL: nomadURL}, svc)
	log.Info("sidecar assembled", "backend", backendName, "state", st.Path(), "policy", policyRef, "placement", c.Placement.Preset)
	return &Sidecar{Config: c, Log: log, Backend: backend, Service: svc, Server: srv, Store: st, Addr: make(chan string, 1)}, nil
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
