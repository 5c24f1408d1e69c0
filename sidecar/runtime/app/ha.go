package app

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/hetgpu/hetgpu/internal/tick"
	"github.com/hetgpu/hetgpu/model/cluster"
	"github.com/hetgpu/hetgpu/sidecar/runtime/ha"
	"github.com/hetgpu/hetgpu/sidecar/runtime/service"
	"github.com/hetgpu/hetgpu/sidecar/runtime/store"
	"github.com/hetgpu/hetgpu/sidecar/stages/rank"
)

// replication is one replica's election and shared state (the ha block). Its methods are
// no-ops on a nil receiver, so the single-replica path stays as it was.
type replication struct {
	elector   *ha.Elector
	shared    *ha.Shared
	tunedPath string
	stages    service.Stages
	ranker    *RankerState
	log       hclog.Logger
	svc       *service.Service
}

// SeqPublishEvery is how often the leader shares the decision sequence when decisions were
// recorded since (runs are shared with every request).
const SeqPublishEvery = 5 * time.Second

func newReplication(c *Config, st *store.Store, tunedPath string, stages service.Stages, rs *RankerState, log hclog.Logger) (*replication, error) {
	h := c.HA
	// Every lock and state request is bounded by the renew interval: a Nomad that stops
	// answering cannot hold a renewal past the lease.
	client, _, _, err := nomadClient(c.Nomad, h.RenewD)
	if err != nil {
		return nil, err
	}
	addr := h.Advertise
	if addr == "" {
		addr = c.PublicURL
	}
	if addr == "" {
		addr = "http://" + c.Listen
		if c.TLSFiles().Enabled() {
			addr = "https://" + c.Listen
		}
	}
	if u, err := url.Parse(addr); err == nil && net.ParseIP(u.Hostname()).IsUnspecified() {
		log.Warn("this replica advertises an unspecified address: standbys cannot redirect writers to it and fast takeover is off; set ha.advertise or public_url",
			"address", addr)
	}
	probe, err := probeClient(c)
	if err != nil {
		return nil, err
	}
	r := &replication{tunedPath: tunedPath, stages: stages, ranker: rs, log: log.Named("ha")}
	r.elector, err = ha.New(ha.Config{Client: client, Namespace: h.Namespace, LockPath: h.LockPath, TTL: h.TTLD,
		LockDelay: h.LockDelayD, Renew: h.RenewD, Margin: h.MarginD, Address: addr, FastTakeover: boolOr(h.FastTakeover, true),
		OnLead: r.takeOver, Logger: log, Probe: probe})
	if err != nil {
		return nil, err
	}
	window := 0
	if c.Predictor != nil {
		window = c.Predictor.Window
	}
	r.shared = &ha.Shared{Blobs: &ha.Blobs{Client: client, Namespace: h.Namespace, Prefix: h.StatePath, Fence: r.elector},
		Store: st, Window: window, ID: r.elector.ID(), Logger: r.log}
	return r, nil
}

// probeClient is the standby's liveness probe client: with TLS on it trusts ha.probe_ca_file
// (else tls.client_ca_file, else the system roots) and, when the replicas require client
// certificates, presents this replica's own, so that it can read which replica answers at
// the leader's address; nil (plain HTTP, the default client) without TLS.
func probeClient(c *Config) (*http.Client, error) {
	f := c.TLSFiles()
	if !f.Enabled() {
		return nil, nil
	}
	ca := c.HA.ProbeCAFile
	if ca == "" {
		ca = f.ClientCAFile
	}
	return ha.ProbeClient(ha.ProbeTLS{CAFile: ca, CertFile: f.CertFile, KeyFile: f.KeyFile, ClientCert: f.ClientCAFile != ""})
}

func (r *replication) fence() cluster.Fence {
	if r == nil {
		return nil
	}
	return r.elector
}

func (r *replication) configure(c *service.Config) {
	if r == nil {
		return
	}
	c.Leadership = r.elector
	c.Share = r.shared.Publish
}

func (r *replication) setService(svc *service.Service) {
	if r != nil {
		r.svc = svc
	}
}

// takeOver runs when this replica won the lock, before it writes anything: the runs the
// old leader learned go into the local store and are learned here once; the policy online
// tuning adopted last replaces the local one.
func (r *replication) takeOver(ctx context.Context) error {
	n, err := r.shared.Load(ctx)
	if err != nil {
		return fmt.Errorf("load the shared runs: %w", err)
	}
	if n > 0 {
		if err := r.svc.CatchUp(ctx); err != nil {
			r.log.Warn("learning the shared runs failed; the store keeps them for the next start", "error", err)
		}
	}
	r.svc.RestoreEstimates()
	r.svc.RestoreHistory()
	wrote, err := r.shared.LoadFile(ctx, ha.BlobPolicy, r.tunedPath)
	if err != nil {
		r.log.Warn("loading the shared tuned policy failed; the local one stays", "error", err)
	} else if wrote {
		r.useTuned()
	}
	r.log.Info("took over as leader", "runs_loaded", n, "tuned_policy_loaded", wrote)
	return nil
}

// useTuned switches the ranker to the tuned checkpoint just loaded, when it records that it
// beats the heuristic (as at start).
func (r *replication) useTuned() {
	var setPolicy func(*rank.Policy) error
	switch rk := r.stages.Ranker.(type) {
	case *rank.Ranker:
		setPolicy = rk.SetPolicy
	case *rank.RegimeSwitch:
		// A tuned policy ranks in every estimate regime (its evidence is the live runs').
		setPolicy = func(p *rank.Policy) error { return rk.Pin(p, "online tuning adopted it (shared by the leader)") }
	default:
		return
	}
	ck, err := rank.LoadCheckpoint(r.tunedPath)
	if err != nil || ck.Meta[rank.MetaTunedBeatsBaseline] != "true" {
		return
	}
	p, err := ck.Policy()
	if err == nil {
		err = setPolicy(p)
	}
	if err != nil {
		r.log.Warn("the shared tuned policy cannot rank; the local one stays", "error", err)
		return
	}
	r.ranker.set(service.RankerStatus{Policy: "tuned:" + r.tunedPath, Learned: "tuned:" + r.tunedPath, Reason: tunedReason(ck), Checkpoint: ck})
}

// policyAdopted shares the tuned policy online tuning just saved.
func (r *replication) policyAdopted() {
	if r == nil {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := r.shared.PublishFile(ctx, ha.BlobPolicy, r.tunedPath); err != nil {
			r.log.Warn("sharing the tuned policy failed; a new leader keeps its own", "error", err)
		}
	}()
}

// start campaigns and shares the decision sequence until ctx ends; the channel closes when
// both stopped (the lock released).
func (r *replication) start(ctx context.Context) <-chan struct{} {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		_ = r.elector.Run(ctx)
	}()
	go func() {
		defer wg.Done()
		tick.Every(ctx, SeqPublishEvery, func() {
			if role, _ := r.elector.Role(); role != ha.RoleLeader {
				return
			}
			if err := r.shared.PublishIfNewer(ctx); err != nil && ctx.Err() == nil {
				r.log.Debug("sharing the decision sequence failed", "error", err)
			}
		})
	}()
	go func() {
		wg.Wait()
		close(done)
	}()
	return done
}
