// Package dashboard is the sidecar's GPU fleet dashboard: HTML pages (Fleet, Queue,
// Decisions, Learning, Energy) rendered on the server with inline SVG plots, and the JSON
// endpoints they are built from (GET /v1/fleet, /v1/energy, /v1/learning). It reads only
// what the service already knows (the last snapshot, the queue, stored decisions and
// observations) plus live device readings where the backend reports them, so it works the
// same against Nomad and the embedded simulated cluster. Pages and assets are embedded; the
// pages need no JavaScript and nothing from the network. Authentication is the server's: the
// routes sit behind the same bearer-token check as every other read endpoint.
package dashboard

import (
	"context"
	"embed"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/hetgpu/hetgpu/internal/httpjson"
	"github.com/hetgpu/hetgpu/model/cluster"
	"github.com/hetgpu/hetgpu/model/history"
	"github.com/hetgpu/hetgpu/sidecar/runtime/service"
	"github.com/hetgpu/hetgpu/sidecar/runtime/store"
)

//go:embed assets
var assets embed.FS

// Options configure the dashboard.
type Options struct {
	// NomadURL is the Nomad UI's base address ("http://nomad:4646"); jobs link to their Nomad
	// page when set.
	NomadURL string
	Logger   hclog.Logger
}

// Service is what the dashboard reads of the sidecar's service (*service.Service), in its own
// types: the pages use the values as the service holds them, with no JSON in between.
type Service interface {
	// FleetSnapshot is the last round's snapshot with its pins counted as held; nil before
	// the first round.
	FleetSnapshot() *cluster.Snapshot
	DeviceStats(ctx context.Context) (map[string]cluster.DeviceStats, error)
	BackendName() string
	Queue() service.QueueView
	Decisions(limit int, after uint64) []store.DecisionRecord
	Store() *store.Store
	Metrics() *service.Metrics
	RuntimeHistory() *history.Stats
	// Ranker is the ranking policy in use with the checkpoint it was loaded from.
	Ranker() (service.RankerStatus, bool)
}

// Dashboard serves the pages and their JSON data.
type Dashboard struct {
	svc  Service
	opts Options
	log  hclog.Logger
}

// New builds the dashboard of a service.
func New(svc Service, opts Options) *Dashboard {
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	opts.NomadURL = strings.TrimRight(opts.NomadURL, "/")
	return &Dashboard{svc: svc, opts: opts, log: opts.Logger.Named("dashboard")}
}

// Register adds the dashboard's routes to a mux.
func (d *Dashboard) Register(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/fleet", d.fleetJSON)
	mux.HandleFunc("GET /v1/energy", viewJSON(d.Energy))
	mux.HandleFunc("GET /v1/learning", viewJSON(d.Learning))
	mux.HandleFunc("GET /ui/{$}", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/ui/fleet", http.StatusFound)
	})
	mux.HandleFunc("GET /ui/fleet", d.fleetPage)
	mux.HandleFunc("GET /ui/queue", d.queuePage)
	mux.HandleFunc("GET /ui/decisions", d.decisionsPage)
	mux.HandleFunc("GET /ui/learning", d.learningPage)
	mux.HandleFunc("GET /ui/energy", d.energyPage)
	// Browsers ask every page's origin for an icon; answering keeps their consoles clean.
	mux.HandleFunc("GET /favicon.ico", func(w http.ResponseWriter, _ *http.Request) {
		icon, err := assets.ReadFile("assets/favicon.svg")
		if err != nil {
			httpjson.Error(w, http.StatusInternalServerError, err)
			return
		}
		w.Header().Set("Content-Type", "image/svg+xml")
		w.Header().Set("Cache-Control", "max-age=86400")
		_, _ = w.Write(icon)
	})
}

// readingsTimeout bounds how long a page waits for live device readings (Nomad answers one
// request per node); a page without them still renders.
const readingsTimeout = 3 * time.Second

// Fleet builds the fleet view now.
func (d *Dashboard) Fleet(ctx context.Context, f FleetFilter) Fleet {
	ctx, cancel := context.WithTimeout(ctx, readingsTimeout)
	defer cancel()
	stats, err := d.svc.DeviceStats(ctx)
	if err != nil {
		d.log.Warn("live device readings unavailable; the fleet view shows none", "error", err)
	}
	return BuildFleet(d.svc.FleetSnapshot(), stats, d.svc.BackendName(), f)
}

func fleetFilter(r *http.Request) (FleetFilter, error) {
	q := r.URL.Query()
	f := FleetFilter{GPUType: strings.ToLower(q.Get("gpu_type")), Class: q.Get("class"), Health: q.Get("health"), State: q.Get("state")}
	switch f.Health {
	case "", "healthy", "unhealthy":
	default:
		return f, fmt.Errorf("health = %q: expected healthy or unhealthy", f.Health)
	}
	switch f.State {
	case "", StateFree, StateBusy, StateShared, StateUnhealthy, StateUnavailable:
	default:
		return f, fmt.Errorf("state = %q: expected free, busy, shared, unhealthy or unavailable", f.State)
	}
	return f, nil
}

func (d *Dashboard) fleetJSON(w http.ResponseWriter, r *http.Request) {
	f, err := fleetFilter(r)
	if err != nil {
		httpjson.Error(w, http.StatusBadRequest, err)
		return
	}
	httpjson.Write(w, http.StatusOK, d.Fleet(r.Context(), f))
}

// observations reads every stored run, oldest first.
func (d *Dashboard) observations() ([]store.ObservationRecord, error) {
	var out []store.ObservationRecord
	err := d.svc.Store().Observations(func(r store.ObservationRecord) error {
		out = append(out, r)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read stored observations: %w", err)
	}
	return out, nil
}

// Energy builds the energy view now.
func (d *Dashboard) Energy() (Energy, error) {
	obs, err := d.observations()
	if err != nil {
		return Energy{}, err
	}
	return BuildEnergy(obs), nil
}

// Learning builds the learning view now.
func (d *Dashboard) Learning() (Learning, error) {
	obs, err := d.observations()
	if err != nil {
		return Learning{}, err
	}
	l := BuildLearning(obs, DecisionLookup(d.svc.Store()), d.svc.Store().PolicyCheckpoint(), d.tuning())
	// The provenance is the checkpoint the ranker holds (loaded at start, or adopted by online
	// tuning), when it is the policy the store names.
	if rs, ok := d.svc.Ranker(); ok && rs.Policy == l.Policy {
		l.PolicyInfo = policyInfo(rs.Checkpoint)
	}
	l.RuntimeHistory = d.svc.RuntimeHistory()
	return l, nil
}

// tuning reads the online tuning counters from the service's metrics.
func (d *Dashboard) tuning() map[string]float64 {
	out := map[string]float64{}
	mfs, err := d.svc.Metrics().Registry.Gather()
	if err != nil {
		return out
	}
	for _, mf := range mfs {
		if mf.GetName() != "hetgpu_policy_tuning_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "result" {
					out[l.GetValue()] += m.GetCounter().GetValue()
				}
			}
		}
	}
	return out
}

// viewJSON serves a view built at each request as JSON (500 when it cannot be built).
func viewJSON[T any](build func() (T, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		v, err := build()
		if err != nil {
			httpjson.Error(w, http.StatusInternalServerError, err)
			return
		}
		httpjson.Write(w, http.StatusOK, v)
	}
}

// explainURL is the job's explain page on this sidecar.
func explainURL(ns, id string) string {
	return "/v1/jobs/" + url.PathEscape(ns) + "/" + url.PathEscape(id) + "/explain?format=html"
}

// nomadJobURL is the job's page in the Nomad UI; "" without a Nomad address.
func (d *Dashboard) nomadJobURL(ns, id string) string {
	if d.opts.NomadURL == "" {
		return ""
	}
	return d.opts.NomadURL + "/ui/jobs/" + url.PathEscape(id+"@"+ns)
}
