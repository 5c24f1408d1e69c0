// Package server is the sidecar's HTTP API (default 127.0.0.1:4656):
//
//	GET  /v1/health                      service state (no token needed)
//	GET  /v1/queue                       ranked pending jobs with scores and features
//	GET  /v1/decisions?limit=N&after=S   decision records, newest first
//	GET  /v1/jobs/{ns}/{id}/explain      why a job runs where it runs, or why it waits;
//	                                     HTML with Accept: text/html or ?format=html
//	POST /v1/observations                measured runs (cluster.Observation JSON, one object or
//	                                     an array), as the task driver posts them
//	GET  /v1/fleet, /v1/energy, /v1/learning  the dashboard's data (sidecar/runtime/dashboard)
//	GET  /ui/fleet, queue, decisions, learning, energy  the GPU fleet dashboard (HTML)
//	GET  /metrics                        Prometheus metrics
//
// With several replicas (sidecar/runtime/ha) a standby answers every GET itself and sends every POST
// to the leader with 307 Temporary Redirect (method and body kept), 503 while none leads.
//
// Tokens (auth.go): token grants everything; read_token the GET endpoints, write_token the
// POSTs; /v1/health is open. A signed explain link (sidecar/runtime/explainlink) opens one job's
// explain page without a token. TLS and mTLS: tls.go (clientcert.go: mTLS but for the health
// check). Request limits: limits.go.
// Handlers recover from panics: bad input never takes the sidecar down.
package server

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/hetgpu/hetgpu/internal/httpjson"
	"github.com/hetgpu/hetgpu/model/cluster"
	"github.com/hetgpu/hetgpu/sidecar/runtime/dashboard"
	"github.com/hetgpu/hetgpu/sidecar/runtime/explainlink"
	"github.com/hetgpu/hetgpu/sidecar/runtime/service"
	"github.com/hetgpu/hetgpu/sidecar/runtime/store"
)

// DefaultListen is the API's default address.
const DefaultListen = "127.0.0.1:4656"

// Config configures the server.
type Config struct {
	Listen string
	// Token, when set, is required as a bearer token and grants everything (admin);
	// ReadToken grants the read endpoints, WriteToken the POSTs (auth.go).
	Token, ReadToken, WriteToken string
	// TLS serves HTTPS (and mTLS with a client CA); Insecure lets a non-loopback listener
	// run without TLS or tokens (CheckExposure).
	TLS      TLSFiles
	Insecure bool
	// Links verifies signed explain links; PublicExplain opens every job's explain page
	// (read-only) without a token.
	Links         *explainlink.Signer
	PublicExplain bool
	// MaxBodyBytes bounds request bodies (default DefaultMaxBody), MaxObservations the run
	// records of one POST (default DefaultMaxObservations, at most service.MaxBatch).
	MaxBodyBytes    int64
	MaxObservations int
	Logger          hclog.Logger
	// NomadURL, when set, is the Nomad UI's address the dashboard links jobs to.
	NomadURL string
}

// Service is what the API reads and writes of the sidecar's service (*service.Service): the
// dashboard's reads and the API's own.
type Service interface {
	dashboard.Service
	Health() service.Health
	Queues() service.QueuesView
	Explain(ns, id string) (*service.Explanation, error)
	ObserveBatch(ctx context.Context, obs []cluster.Observation, source, idemKey string) (*service.ObserveResult, error)
	// Standby reports whether this replica is a standby and the leader's address; LastRound
	// is when it last decided.
	Standby() (standby bool, leader string)
	LastRound() time.Time
}

// Server serves the API for a service.
type Server struct {
	cfg Config
	svc Service
	log hclog.Logger
	mux *http.ServeMux
}

// New builds the server (not yet listening).
func New(cfg Config, svc Service) *Server {
	if cfg.Listen == "" {
		cfg.Listen = DefaultListen
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = DefaultMaxBody
	}
	s := &Server{cfg: cfg, svc: svc, log: cfg.Logger.Named("api"), mux: http.NewServeMux()}
	s.mux.HandleFunc("GET /v1/health", s.health)
	s.mux.HandleFunc("GET /v1/queue", s.queue)
	s.mux.HandleFunc("GET /v1/queues", func(w http.ResponseWriter, _ *http.Request) { httpjson.Write(w, http.StatusOK, svc.Queues()) })
	s.mux.HandleFunc("GET /v1/decisions", s.decisions)
	s.mux.HandleFunc(explainPattern, s.explain)
	s.mux.HandleFunc("POST /v1/observations", s.observations)
	s.mux.HandleFunc("GET /v1/observations", s.listObservations)
	s.mux.Handle("GET /metrics", promhttp.HandlerFor(svc.Metrics().Registry, promhttp.HandlerOpts{}))
	s.mux.HandleFunc("GET /{$}", s.index)
	// The GPU fleet dashboard (/ui/…) and its JSON data (/v1/fleet, /v1/energy, /v1/learning).
	dashboard.New(svc, dashboard.Options{NomadURL: cfg.NomadURL, Logger: s.log}).Register(s.mux)
	return s
}

// Handler returns the API's handler with authentication and panic recovery.
func (s *Server) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				s.log.Error("handler panicked; request failed, sidecar keeps running", "path", r.URL.Path, "panic", v)
				httpjson.Error(w, http.StatusInternalServerError, fmt.Errorf("internal error"))
			}
		}()
		if s.refuseWithoutClientCert(w, r) || s.authorize(w, r) {
			return
		}
		if r.Body != nil {
			r.Body = http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes)
		}
		if _, pattern := s.mux.Handler(r); pattern == "" {
			s.noRoute(w, r)
			return
		}
		if r.Method == http.MethodPost && toLeader(w, r, s.svc) {
			return
		}
		s.mux.ServeHTTP(w, r)
	})
}

// noRoute answers unknown paths and methods with a JSON error.
func (s *Server) noRoute(w http.ResponseWriter, r *http.Request) {
	var allow []string
	for _, m := range []string{http.MethodGet, http.MethodPost} {
		probe := r.Clone(r.Context())
		probe.Method = m
		if _, p := s.mux.Handler(probe); p != "" {
			allow = append(allow, m)
		}
	}
	if len(allow) > 0 {
		w.Header().Set("Allow", strings.Join(allow, ", "))
		httpjson.Error(w, http.StatusMethodNotAllowed, fmt.Errorf("%s %s: method not allowed; use %s", r.Method, r.URL.Path, strings.Join(allow, " or ")))
		return
	}
	httpjson.Error(w, http.StatusNotFound, fmt.Errorf("no such endpoint %s %s; see GET / for the list", r.Method, r.URL.Path))
}

// Serve listens until ctx ends, then shuts down gracefully. ready, when set, receives the
// bound address (useful with ":0").
func (s *Server) Serve(ctx context.Context, ready func(addr string)) error {
	warn, err := CheckExposure(s.cfg)
	if err != nil {
		s.log.Error("refusing to serve the API", "reason", err)
		return err
	}
	if warn != "" {
		s.log.Warn("API exposed without protection", "reason", warn)
	}
	ln, err := net.Listen("tcp", s.cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", s.cfg.Listen, err)
	}
	scheme := "http"
	if s.cfg.TLS.Enabled() {
		tc, err := LoadTLS(s.cfg.TLS)
		if err != nil {
			ln.Close()
			return err
		}
		ln, scheme = tls.NewListener(ln, tc), "https"
	}
	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second, MaxHeaderBytes: maxHeaderBytes}
	if ready != nil {
		ready(ln.Addr().String())
	}
	s.log.Info("API listening", "address", ln.Addr().String(), "tls", scheme == "https", "mtls", s.cfg.TLS.ClientCAFile != "",
		"health_without_client_cert", s.cfg.TLS.HealthWithoutClientCert,
		"token", s.cfg.Token != "", "read_token", s.cfg.ReadToken != "", "write_token", s.cfg.WriteToken != "",
		"public_explain", s.cfg.PublicExplain, "dashboard", scheme+"://"+ln.Addr().String()+"/ui/fleet")
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		return nil
	case err := <-errc:
		if errors.Is(err, http.ErrServerClosed) {
			return nil
		}
		return err
	}
}

func (s *Server) health(w http.ResponseWriter, _ *http.Request) {
	h := s.svc.Health()
	code := http.StatusOK
	if h.Status != "ok" {
		code = http.StatusServiceUnavailable
	}
	httpjson.Write(w, code, h)
}

func (s *Server) queue(w http.ResponseWriter, _ *http.Request) {
	q := s.svc.Queue()
	if m := standbyRead(w, s.svc); m != nil {
		httpjson.Write(w, http.StatusOK, struct {
			service.QueueView
			*staleMark
		}{q, m})
		return
	}
	httpjson.Write(w, http.StatusOK, q)
}

func (s *Server) decisions(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit, after := 100, uint64(0)
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			httpjson.Error(w, http.StatusBadRequest, fmt.Errorf("limit = %q: expected an integer from 1 to 1000", v))
			return
		}
		limit = n
	}
	if v := q.Get("after"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			httpjson.Error(w, http.StatusBadRequest, fmt.Errorf("after = %q: expected a decision sequence number", v))
			return
		}
		after = n
	}
	out := map[string]any{"decisions": s.svc.Decisions(limit, after)}
	if m := standbyRead(w, s.svc); m != nil {
		out["role"], out["leader"], out["stale_since"] = m.Role, m.Leader, m.StaleSince
	}
	httpjson.Write(w, http.StatusOK, out)
}

func wantsHTML(r *http.Request) bool {
	if f := r.URL.Query().Get("format"); f != "" {
		return f == "html"
	}
	return strings.Contains(r.Header.Get("Accept"), "text/html")
}

func (s *Server) explain(w http.ResponseWriter, r *http.Request) {
	ns, id := r.PathValue("ns"), r.PathValue("id")
	if f := r.URL.Query().Get("format"); f != "" && f != "html" && f != "json" {
		httpjson.Error(w, http.StatusBadRequest, fmt.Errorf("format = %q: expected html or json", f))
		return
	}
	ex, err := s.svc.Explain(ns, id)
	if errors.Is(err, service.ErrNotFound) {
		if wantsHTML(r) {
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			w.WriteHeader(http.StatusNotFound)
			_ = explainTmpl.Execute(w, explainPage{Namespace: ns, JobID: id, NotFound: true})
			return
		}
		httpjson.Error(w, http.StatusNotFound, fmt.Errorf("job %s/%s: %w", ns, id, err))
		return
	}
	if err != nil {
		httpjson.Error(w, http.StatusInternalServerError, err)
		return
	}
	if wantsHTML(r) {
		var buf bytes.Buffer
		if err := explainTmpl.Execute(&buf, explainPage{Namespace: ns, JobID: id, Ex: ex, Signed: template.URL(signedQuery(r))}); err != nil {
			httpjson.Error(w, http.StatusInternalServerError, err)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write(buf.Bytes())
		return
	}
	httpjson.Write(w, http.StatusOK, ex)
}

// observations stores a request's run records in one transaction and answers exactly what
// was stored: {"accepted": N, "duplicates": M, "learned": L, "partial": P, "records": [...]}.
// Malformed records are 400, implausible ones 422 (field, value and bound named), more than
// service.MaxBatch records 413; in each case nothing is stored.
func (s *Server) observations(w http.ResponseWriter, r *http.Request) {
	body, ok := s.readBody(w, r)
	if !ok {
		return
	}
	obs, err := DecodeObservations(body)
	if err != nil {
		httpjson.Error(w, http.StatusBadRequest, err)
		return
	}
	if n := s.maxObservations(); len(obs) > n {
		httpjson.Error(w, http.StatusRequestEntityTooLarge, fmt.Errorf("%d observations in one request exceed max_observations = %d; post them in several requests", len(obs), n))
		return
	}
	res, err := s.svc.ObserveBatch(r.Context(), obs, service.SourceDriver, r.Header.Get("Idempotency-Key"))
	if err != nil {
		code := http.StatusInternalServerError
		if errors.Is(err, service.ErrStandby) {
			// Leadership moved while the request ran: nothing was stored; retry.
			code = http.StatusServiceUnavailable
		}
		var ve *service.ValidationError
		if errors.As(err, &ve) {
			code = http.StatusBadRequest
			if ve.OutOfRange {
				code = http.StatusUnprocessableEntity
			}
		}
		msg := err.Error()
		var be *service.BatchError
		if len(obs) == 1 && errors.As(err, &be) {
			msg = be.Err.Error()
		}
		httpjson.Write(w, code, map[string]any{"error": msg, "accepted": 0})
		return
	}
	httpjson.Write(w, http.StatusAccepted, res)
}

// DecodeObservations reads one cluster.Observation JSON object or an array of them; unknown
// fields, wrong types and trailing data are errors naming the field.
func DecodeObservations(body []byte) ([]cluster.Observation, error) {
	var obs []cluster.Observation
	trimmed := bytes.TrimSpace(body)
	dec := json.NewDecoder(bytes.NewReader(trimmed))
	dec.DisallowUnknownFields()
	var err error
	if len(trimmed) > 0 && trimmed[0] == '[' {
		err = dec.Decode(&obs)
	} else {
		var o cluster.Observation
		err = dec.Decode(&o)
		obs = []cluster.Observation{o}
	}
	if err != nil {
		return nil, fmt.Errorf("observation JSON: %w (fields: namespace, job_id, group, task, alloc_id, model_family, model_name, batch_size, param_count, framework, gpu_type, gpu_name, gpus, nodes, throughput, samples_per_sec, energy_j, avg_power_w, peak_power_w, runtime_s, exit_code, co_runner, time, partial)", jsonErr(err))
	}
	if dec.More() {
		return nil, errors.New("observation JSON: trailing data after the object")
	}
	return obs, nil
}

// maxListed bounds GET /v1/observations' limit.
const maxListed = 10000

// listObservations lists stored run records, newest first, optionally of one job
// (?namespace=&job=&group=), at most ?limit= (default 100).
func (s *Server) listObservations(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit := 100
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxListed {
			httpjson.Error(w, http.StatusBadRequest, fmt.Errorf("limit = %q: expected an integer from 1 to %d", v, maxListed))
			return
		}
		limit = n
	}
	ns, job, group := q.Get("namespace"), q.Get("job"), q.Get("group")
	if ns == "" && job != "" {
		ns = "default"
	}
	out := []store.ObservationRecord{}
	err := s.svc.Store().ObservationsNewest(func(rec store.ObservationRecord) error {
		o := rec.Obs
		if (ns != "" && o.Namespace != ns) || (job != "" && o.JobID != job) || (group != "" && o.Group != group) {
			return nil
		}
		out = append(out, rec)
		if len(out) == limit {
			return store.ErrStop
		}
		return nil
	})
	if err != nil {
		httpjson.Error(w, http.StatusInternalServerError, fmt.Errorf("read stored observations: %w", err))
		return
	}
	httpjson.Write(w, http.StatusOK, map[string]any{"observations": out})
}

// jsonErr makes encoding/json's errors name the field.
func jsonErr(err error) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return fmt.Errorf("field %s: got a JSON %s, expected %s", te.Field, te.Value, te.Type)
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Errorf("syntax error at byte %d: %v", se.Offset, err)
	}
	return err
}

func (s *Server) index(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = io.WriteString(w, indexHTML)
}

const indexHTML = `<!doctype html><html><head><meta charset="utf-8"><title>hetgpu sidecar</title></head>
<body style="font-family:sans-serif;max-width:50em;margin:2em auto">
<h1>hetgpu sidecar</h1>
<p><a href="/ui/fleet"><b>GPU fleet dashboard</b></a>: fleet, queue, decisions, learning, energy</p>
<ul>
<li><a href="/v1/health">GET /v1/health</a>: service state</li>
<li><a href="/v1/queue">GET /v1/queue</a>: ranked pending jobs with scores and features</li>
<li><a href="/v1/queues">GET /v1/queues</a>: queues with guarantee, maximum, usage, borrowed GPUs, pending work and fair share</li>
<li><a href="/v1/decisions">GET /v1/decisions</a>: decisions, newest first (?limit=N&amp;after=SEQ)</li>
<li>GET /v1/jobs/{namespace}/{job}/explain: why a job runs where it runs (?format=html)</li>
<li><a href="/v1/fleet">GET /v1/fleet</a>: nodes and GPUs with health, readings and holders; totals per GPU type (?gpu_type=&amp;class=&amp;health=&amp;state=)</li>
<li><a href="/v1/energy">GET /v1/energy</a>: energy of measured runs per GPU type and namespace, over time and per unit of work</li>
<li><a href="/v1/learning">GET /v1/learning</a>: measured runs against their predictions, errors per GPU type, ranking policy</li>
<li>POST /v1/observations: measured runs (cluster.Observation JSON)</li>
<li><a href="/metrics">GET /metrics</a>: Prometheus metrics</li>
</ul></body></html>`
