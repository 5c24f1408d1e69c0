// Package livebench measures the live sidecar path at fleet scale: the real Nomad backend
// (sidecar/backends/nomad) and service (sidecar/runtime/service) with the production stages, against the
// in-process fake Nomad HTTP API (sidecar/backends/nomad/nomadtest) with injected per-call latency.
// Each measured round starts with a batch of held groups waiting on a cluster that already
// runs the given allocations, and runs maintenance, snapshot, rank, predict, place and pin
// exactly as the sidecar does; the fake counts every API call.
package livebench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"

	"github.com/hetgpu/hetgpu/model/cluster"
	"github.com/hetgpu/hetgpu/sidecar/backends/nomad"
	"github.com/hetgpu/hetgpu/sidecar/backends/nomad/nomadtest"
	"github.com/hetgpu/hetgpu/sidecar/runtime/app"
	"github.com/hetgpu/hetgpu/sidecar/runtime/service"
	"github.com/hetgpu/hetgpu/sidecar/runtime/store"
	"github.com/hetgpu/hetgpu/sidecar/sched"
	"github.com/hetgpu/hetgpu/sidecar/stages/place"
)

// Config sizes the measured cluster.
type Config struct {
	Nodes, GPUsPerNode, GPUTypes int
	// Pending is the held groups submitted before each round, Running the one-GPU
	// allocations (of pinned hetgpu jobs) the cluster runs throughout.
	Pending, Running int
	// Latency is added to every API call during the rounds and the watcher's catch-up after
	// each (setup and clean-up between rounds run without it).
	Latency time.Duration
	Rounds  int
	Seed    uint64
	// Dir holds the sidecar's state (store, catalog); empty: a temporary directory.
	Dir    string
	Logger hclog.Logger
	// Progress, when set, is called after each round.
	Progress func(round int, r RoundStats)
	// HeapProfile, when set, gets a heap profile after the last round (the fake still live).
	HeapProfile io.Writer
}

// GPUNames are the GPU models nodes get, one type per node in turn (--gpu-types N takes the
// first N).
var GPUNames = []string{"Tesla T4", "NVIDIA A10", "NVIDIA A100-SXM4-40GB", "NVIDIA H100 80GB HBM3",
	"Tesla V100-SXM2-16GB", "Tesla P100-PCIE-16GB", "Tesla K80", "NVIDIA A100-SXM4-80GB"}

var models = []string{"resnet/ResNet-50", "resnet/ResNet-18", "transformer/BERT-base", "lstm/LM", "Recommendation"}

// Validate names the first setting out of range.
func (c *Config) Validate() error {
	switch {
	case c.Nodes < 1 || c.Nodes > 100000:
		return fmt.Errorf("nodes = %d, expected 1 … 100000", c.Nodes)
	case c.GPUsPerNode < 1 || c.GPUsPerNode > 64:
		return fmt.Errorf("gpus per node = %d, expected 1 … 64", c.GPUsPerNode)
	case c.GPUTypes < 1 || c.GPUTypes > len(GPUNames):
		return fmt.Errorf("gpu types = %d, expected 1 … %d", c.GPUTypes, len(GPUNames))
	case c.Pending < 0 || c.Running < 0:
		return fmt.Errorf("pending = %d, running = %d, expected >= 0", c.Pending, c.Running)
	case c.Running > c.Nodes*c.GPUsPerNode:
		return fmt.Errorf("running = %d allocations of one GPU each do not fit %d GPUs", c.Running, c.Nodes*c.GPUsPerNode)
	case c.Latency < 0 || c.Latency > 10*time.Second:
		return fmt.Errorf("latency = %v, expected 0 … 10s", c.Latency)
	case c.Rounds < 1:
		return fmt.Errorf("rounds = %d, expected >= 1", c.Rounds)
	}
	return nil
}

// RoundStats is what one measured round took.
type RoundStats struct {
	// Round is snapshot to every pin issued (the pipeline's latency, as
	// hetgpu_decision_latency_seconds); Service the whole service round (maintenance,
	// pipeline, records).
	Round, Service time.Duration
	Phases         map[string]time.Duration
	// Calls is every API call the fake served during the service round (the watcher's
	// included), CatchUpCalls those until the watcher had applied every event it caused.
	Calls, CatchUpCalls int
	CallsByRoute        map[string]int
	CatchUp             time.Duration
	MaintenanceCalls    int
	Pins, Applied       int
	CPU                 time.Duration
}

// Phases measured in every round. predict is the time spent inside the predictor (called by
// rank and place, so also part of those, and summed over concurrent calls).
var Phases = []string{"maintenance", "snapshot", "rank", "predict", "place", "pin"}

// Result is the summary the command prints.
type Result struct {
	Nodes       int     `json:"nodes"`
	GPUs        int     `json:"gpus"`
	GPUTypes    int     `json:"gpu_types"`
	Pending     int     `json:"pending"`
	Running     int     `json:"running"`
	LatencyMS   float64 `json:"api_latency_ms"`
	Rounds      int     `json:"rounds"`
	RoundP50MS  float64 `json:"round_p50_ms"`
	RoundP99MS  float64 `json:"round_p99_ms"`
	ServiceP50  float64 `json:"service_round_p50_ms"`
	ServiceP99  float64 `json:"service_round_p99_ms"`
	MaintP99MS  float64 `json:"maintenance_p99_ms"`
	CallsPerRnd float64 `json:"calls_per_round"`
	// MaintenanceCalls is the calls of one maintenance cycle (energy sampling included).
	MaintenanceCalls float64            `json:"maintenance_calls"`
	CatchUpCalls     float64            `json:"catchup_calls_per_round"`
	CatchUpP99MS     float64            `json:"catchup_p99_ms"`
	CallsByRoute     map[string]float64 `json:"calls_by_route"`
	Phases           map[string]Quant   `json:"phases"`
	PinsPerRound     float64            `json:"pins_per_round"`
	PinsPerSec       float64            `json:"pins_per_s"`
	CPUPerRoundS     float64            `json:"cpu_s_per_round"`
	RSSMB            float64            `json:"rss_mb"`
	PeakRSSMB        float64            `json:"peak_rss_mb"`
	HeapMB           float64            `json:"heap_mb"`
	SetupS           float64            `json:"setup_s"`
	// ResyncMS and ResyncCalls are one full resync through the list APIs after the rounds.
	ResyncMS    float64 `json:"resync_ms"`
	ResyncCalls int     `json:"resync_calls"`
}

// Quant is a phase's p50 and p99 in milliseconds.
type Quant struct {
	P50 float64 `json:"p50_ms"`
	P99 float64 `json:"p99_ms"`
}

// Run builds the fake cluster, the backend and service, and measures cfg.Rounds rounds.
func Run(ctx context.Context, cfg Config) (*Result, []RoundStats, error) {
	if err := cfg.Validate(); err != nil {
		return nil, nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	dir := cfg.Dir
	if dir == "" {
		d, err := os.MkdirTemp("", "hetgpu-bench-live-")
		if err != nil {
			return nil, nil, fmt.Errorf("state directory: %w", err)
		}
		defer os.RemoveAll(d)
		dir = d
	}
	t0 := time.Now()
	h, err := newHarness(ctx, cfg, dir)
	if err != nil {
		return nil, nil, err
	}
	defer h.close()
	setup := time.Since(t0)
	var rounds []RoundStats
	// Round 0 is a warm-up with a full batch (first predictions of each kind, first solve of
	// this size); it is not counted.
	for i := 0; i <= cfg.Rounds; i++ {
		rs, err := h.round(ctx, i)
		if err != nil {
			return nil, rounds, fmt.Errorf("round %d: %w", i, err)
		}
		if i == 0 {
			continue
		}
		rounds = append(rounds, rs)
		if cfg.Progress != nil {
			cfg.Progress(i, rs)
		}
	}
	// One full resync as the watcher does on every reconnect and every ResyncEvery, with
	// nothing changed since the last round.
	h.srv.SetLatency(cfg.Latency)
	resync, resyncCalls, err := h.sc.Resync(ctx)
	if err != nil {
		return nil, rounds, err
	}
	h.srv.SetLatency(0)
	if cfg.HeapProfile != nil {
		runtime.GC()
		if err := pprof.WriteHeapProfile(cfg.HeapProfile); err != nil {
			return nil, rounds, fmt.Errorf("heap profile: %w", err)
		}
	}
	res := Summarise(cfg, rounds)
	res.SetupS = setup.Seconds()
	res.ResyncMS, res.ResyncCalls = ms(resync), resyncCalls
	res.RSSMB, res.PeakRSSMB = rss()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	res.HeapMB = float64(ms.HeapInuse) / (1 << 20)
	return res, rounds, nil
}

// Summarise turns the rounds into the summary (p50 and p99 over rounds, means of counts).
func Summarise(cfg Config, rounds []RoundStats) *Result {
	res := &Result{Nodes: cfg.Nodes, GPUs: cfg.Nodes * cfg.GPUsPerNode, GPUTypes: cfg.GPUTypes, Pending: cfg.Pending,
		Running: cfg.Running, LatencyMS: ms(cfg.Latency), Rounds: len(rounds), Phases: map[string]Quant{},
		CallsByRoute: map[string]float64{}}
	pick := func(f func(RoundStats) time.Duration) []time.Duration {
		out := make([]time.Duration, len(rounds))
		for i, r := range rounds {
			out[i] = f(r)
		}
		return out
	}
	rd := pick(func(r RoundStats) time.Duration { return r.Round })
	sv := pick(func(r RoundStats) time.Duration { return r.Service })
	res.RoundP50MS, res.RoundP99MS = ms(quantile(rd, 0.5)), ms(quantile(rd, 0.99))
	res.ServiceP50, res.ServiceP99 = ms(quantile(sv, 0.5)), ms(quantile(sv, 0.99))
	for _, p := range Phases {
		d := pick(func(r RoundStats) time.Duration { return r.Phases[p] })
		res.Phases[p] = Quant{P50: ms(quantile(d, 0.5)), P99: ms(quantile(d, 0.99))}
	}
	res.MaintP99MS = res.Phases["maintenance"].P99
	res.CatchUpP99MS = ms(quantile(pick(func(r RoundStats) time.Duration { return r.CatchUp }), 0.99))
	var pinTime time.Duration
	var applied int
	n := float64(max(1, len(rounds)))
	for _, r := range rounds {
		res.CallsPerRnd += float64(r.Calls) / n
		res.CatchUpCalls += float64(r.CatchUpCalls) / n
		res.MaintenanceCalls += float64(r.MaintenanceCalls) / n
		res.PinsPerRound += float64(r.Applied) / n
		res.CPUPerRoundS += r.CPU.Seconds() / n
		for k, v := range r.CallsByRoute {
			res.CallsByRoute[k] += float64(v) / n
		}
		pinTime += r.Phases["pin"]
		applied += r.Applied
	}
	if pinTime > 0 {
		res.PinsPerSec = float64(applied) / pinTime.Seconds()
	}
	for _, p := range []*float64{&res.CallsPerRnd, &res.CatchUpCalls, &res.MaintenanceCalls, &res.PinsPerRound, &res.PinsPerSec} {
		*p = math.Round(*p*10) / 10
	}
	res.CPUPerRoundS = math.Round(res.CPUPerRoundS*1000) / 1000
	for k, v := range res.CallsByRoute {
		res.CallsByRoute[k] = math.Round(v*10) / 10
	}
	return res
}

func ms(d time.Duration) float64 { return math.Round(float64(d)/float64(time.Microsecond)) / 1000 }

func quantile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[int(math.Ceil(p*float64(len(s))))-1]
}

// harness is the fake cluster with the sidecar on it.
type harness struct {
	cfg   Config
	srv   *nomadtest.Server
	sc    *Sidecar
	rng   *rand.Rand
	nodes []string
	// batch: the job IDs submitted for the current round.
	batch []string
}

func nodeID(i int) string { return fmt.Sprintf("%08x-0000-4000-8000-%012x", i+1, i+1) }

func newHarness(ctx context.Context, cfg Config, dir string) (*harness, error) {
	srv := nomadtest.New()
	srv.RecordRequests(false)
	h := &harness{cfg: cfg, srv: srv, rng: rand.New(rand.NewPCG(cfg.Seed, 19))}
	fail := func(err error) (*harness, error) {
		h.close()
		return nil, err
	}
	for i := 0; i < cfg.Nodes; i++ {
		id := nodeID(i)
		srv.AddNode(id, fmt.Sprintf("gpu-%05d", i), GPUNames[i%cfg.GPUTypes], cfg.GPUsPerNode)
		h.nodes = append(h.nodes, id)
	}
	// Running allocations: one-GPU pinned hetgpu jobs packed onto about 78 % of the nodes
	// (so each has free GPUs and a fifth stay empty for 8-GPU groups).
	used := max(1, cfg.Nodes*25/32)
	per := max(1, (cfg.Running+used-1)/used)
	per = min(per, cfg.GPUsPerNode)
	for j := 0; j < cfg.Running; j++ {
		n, slot := j/per, j%per // n < Nodes: Running <= Nodes x GPUsPerNode
		job := heldJob(fmt.Sprintf("running-%05d", j), 1, models[j%len(models)])
		dev := fmt.Sprintf("GPU-gpu-%05d-%d", n, slot)
		if err := nomad.PinJob(job, []nomad.GroupPin{{Group: "train", NodeIDs: []string{h.nodes[n]}, DeviceIDs: []string{dev},
			Line: nomad.GroupLine("train", "pinned by the benchmark")}}, nomad.UI{}); err != nil {
			return fail(fmt.Errorf("running job %d: %w", j, err))
		}
		srv.Register(job)
		srv.SetPower(dev, 150)
	}
	sc, err := NewSidecar(ctx, srv.URL, dir, cfg.Logger)
	if err != nil {
		return fail(err)
	}
	h.sc = sc
	if err := h.caughtUp(ctx); err != nil {
		return fail(err)
	}
	// One unmeasured round: heap growth, first solves, the running jobs' first records.
	if _, err := sc.Service.Round(ctx); err != nil {
		return fail(fmt.Errorf("first round: %w", err))
	}
	return h, nil
}

func (h *harness) close() {
	if h.sc != nil {
		h.sc.Close()
	}
	h.srv.Close()
}

// caughtUp waits until the watcher applied every event the fake emitted, then lets the fake
// forget them (Nomad's event buffer is bounded too; the fake's would otherwise grow by every
// round's events and count as the sidecar's memory).
func (h *harness) caughtUp(ctx context.Context) error {
	deadline := time.Now().Add(10 * time.Minute)
	for {
		if last := h.srv.LastEventIndex(); h.sc.Backend.Index() >= last {
			h.srv.TrimEvents(last)
			return nil
		}
		if time.Now().After(deadline) {
			return errors.New("the watcher did not catch up with the fake's events in 10 minutes")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// gpusOf draws a group's GPUs as Gavel's synthetic traces: 1, 2, 4, 8 with p = .70, .10,
// .15, .05.
func (h *harness) gpusOf() uint64 {
	switch x := h.rng.Float64(); {
	case x < 0.70:
		return 1
	case x < 0.80:
		return 2
	case x < 0.95:
		return 4
	}
	return 8
}

func (h *harness) round(ctx context.Context, i int) (RoundStats, error) {
	// Clean up the last round's jobs and submit this round's, without latency.
	h.srv.SetLatency(0)
	for _, id := range h.batch {
		if j := h.srv.Job("default", id); j != nil {
			j.Stop = ptr(true)
			h.srv.Register(j)
			h.srv.Deregister("default", id)
		}
	}
	h.batch = h.batch[:0]
	for k := 0; k < h.cfg.Pending; k++ {
		id := fmt.Sprintf("r%04d-%05d", i, k)
		h.srv.Register(heldJob(id, h.gpusOf(), models[h.rng.IntN(len(models))]))
		h.batch = append(h.batch, id)
	}
	if err := h.caughtUp(ctx); err != nil {
		return RoundStats{}, err
	}
	// The measured round.
	h.srv.SetLatency(h.cfg.Latency)
	rs, err := h.sc.Round(ctx)
	if err != nil {
		return RoundStats{}, err
	}
	if rs.Applied < rs.Pins {
		h.cfg.Logger.Warn("pins not applied", "round", i, "pins", rs.Pins, "applied", rs.Applied)
	}
	// The watcher reads what the pins changed; that is the round's cost too.
	c0 := h.sc.Calls.Total()
	t1 := time.Now()
	if err := h.caughtUp(ctx); err != nil {
		return RoundStats{}, err
	}
	rs.CatchUp = time.Since(t1)
	rs.CatchUpCalls = h.sc.Calls.Total() - c0
	h.srv.SetLatency(0)
	return rs, nil
}

func ptr[T any](v T) *T { return &v }

// heldJob is a one-group batch job waiting for hetgpu.
func heldJob(id string, gpus uint64, model string) *api.Job {
	return &api.Job{
		ID: ptr(id), Name: ptr(id), Namespace: ptr("default"), Type: ptr("batch"),
		Constraints: []*api.Constraint{api.NewConstraint("${meta.hetgpu.queue}", "=", "waiting-for-hetgpu")},
		Meta: map[string]string{"hetgpu.enable": "true", "hetgpu.model": model, "hetgpu.batch_size": "64",
			"hetgpu.runtime": "2h"},
		TaskGroups: []*api.TaskGroup{{
			Name: ptr("train"), Count: ptr(1),
			Tasks: []*api.Task{{Name: "train", Driver: "hetgpu", Config: map[string]any{"command": "train"},
				Resources: &api.Resources{Devices: []*api.RequestedDevice{{Name: "nvidia/gpu", Count: ptr(gpus)}}}}},
		}},
	}
}

// stageTimes accumulates the time spent in each stage of a round.
type stageTimes struct {
	mu        sync.Mutex
	d         map[string]time.Duration
	predictNS atomic.Int64
	maintCall int
}

func (s *stageTimes) reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.d = map[string]time.Duration{}
	s.predictNS.Store(0)
	s.maintCall = 0
}

func (s *stageTimes) add(phase string, d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.d == nil {
		s.d = map[string]time.Duration{}
	}
	s.d[phase] += d
}

func (s *stageTimes) snapshot() (map[string]time.Duration, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]time.Duration{}
	for k, v := range s.d {
		out[k] = v
	}
	out["predict"] = time.Duration(s.predictNS.Load())
	return out, s.maintCall
}

func (s *stageTimes) wrap(st service.Stages) service.Stages {
	st.Ranker = timedRanker{st.Ranker, s}
	st.Predictor = timedPredictor{st.Predictor, s}
	st.Placer = timedPlacer{st.Placer, s}
	return st
}

type timedRanker struct {
	sched.Ranker
	t *stageTimes
}

func (r timedRanker) Rank(ctx context.Context, snap *cluster.Snapshot, pred sched.Predictor) ([]sched.Ranked, error) {
	t0 := time.Now()
	defer func() { r.t.add("rank", time.Since(t0)) }()
	return r.Ranker.Rank(ctx, snap, pred)
}

type timedPredictor struct {
	sched.Predictor
	t *stageTimes
}

func (p timedPredictor) Predict(job *cluster.Job, gpuType string, gpus int) sched.Estimate {
	t0 := time.Now()
	defer func() { p.t.predictNS.Add(int64(time.Since(t0))) }()
	return p.Predictor.Predict(job, gpuType, gpus)
}

type timedPlacer struct {
	sched.Placer
	t *stageTimes
}

func (p timedPlacer) Place(ctx context.Context, st *sched.RoundState, snap *cluster.Snapshot, ranked []sched.Ranked, pred sched.Predictor) ([]cluster.Decision, sched.PlaceStats, error) {
	t0 := time.Now()
	defer func() { p.t.add("place", time.Since(t0)) }()
	return p.Placer.Place(ctx, st, snap, ranked, pred)
}

// HonorsMinThroughput forwards the placer's answer, so the service's feasibility check is the
// one it would use without the timing wrapper.
func (p timedPlacer) HonorsMinThroughput() bool {
	if m, ok := p.Placer.(interface{ HonorsMinThroughput() bool }); ok {
		return m.HonorsMinThroughput()
	}
	return true
}

// timedBackend times the backend's parts of a round; every other method (Watch, Preempt,
// ShowWaits, DeviceStats, AllocLifetime) is the Nomad backend's own.
type timedBackend struct {
	*nomad.Backend
	t     *stageTimes
	calls *CallCounter
}

func (b *timedBackend) Snapshot(ctx context.Context) (*cluster.Snapshot, error) {
	t0 := time.Now()
	defer func() { b.t.add("snapshot", time.Since(t0)) }()
	return b.Backend.Snapshot(ctx)
}

func (b *timedBackend) Pin(ctx context.Context, ds []cluster.Decision) ([]cluster.PinResult, error) {
	t0 := time.Now()
	defer func() { b.t.add("pin", time.Since(t0)) }()
	return b.Backend.Pin(ctx, ds)
}

func (b *timedBackend) Maintain(ctx context.Context) (*cluster.Maintenance, error) {
	t0 := time.Now()
	c0 := b.calls.Total()
	defer func() {
		b.t.add("maintenance", time.Since(t0))
		b.t.mu.Lock()
		b.t.maintCall += b.calls.Total() - c0
		b.t.mu.Unlock()
	}()
	return b.Backend.Maintain(ctx)
}

// Sidecar is the sidecar's Nomad backend and service with the production stages, each stage
// timed and every API call counted, on any Nomad HTTP API (the fake or a real agent).
type Sidecar struct {
	Backend *nomad.Backend
	Service *service.Service
	Calls   *CallCounter
	st      *store.Store
	times   *stageTimes
	cancel  context.CancelFunc
	done    chan struct{}
}

// NewSidecar builds the backend and service on the Nomad API at addr, with state in dir,
// starts watching, and waits for the first resync. Energy is sampled every round (as every
// 5 s, the default, would at rounds that far apart); the periodic resync is off (Resync
// measures one).
func NewSidecar(ctx context.Context, addr, dir string, log hclog.Logger) (*Sidecar, error) {
	hc, err := nomad.HTTPClient(nil)
	if err != nil {
		return nil, err
	}
	calls := &CallCounter{next: hc.Transport, byRoute: map[string]int{}}
	hc.Transport = calls
	client, err := api.NewClient(&api.Config{Address: addr, HttpClient: hc})
	if err != nil {
		return nil, fmt.Errorf("nomad client for %s: %w", addr, err)
	}
	b, err := nomad.New(nomad.Config{Client: client, Logger: log, ExplainBaseURL: "http://127.0.0.1:4656",
		SampleDeviceStats: true, SampleEvery: time.Nanosecond, Topology: true, ResyncEvery: -1, RetryBackoff: 10 * time.Millisecond})
	if err != nil {
		return nil, err
	}
	acfg, err := app.LoadConfig("")
	if err != nil {
		return nil, err
	}
	stages, _, err := app.Stages(acfg, dir, log)
	if err != nil {
		return nil, err
	}
	if pl, ok := stages.Placer.(*place.Placer); ok {
		if err := pl.Warm(ctx, 256, 1024); err != nil {
			log.Warn("placement warm-up failed", "error", err)
		}
	}
	stages.Tuner = nil
	times := &stageTimes{}
	stages = times.wrap(stages)
	st, err := store.Open(filepath.Join(dir, "sidecar.db"), store.Options{})
	if err != nil {
		return nil, err
	}
	svc, err := service.New(service.Config{BackendName: "nomad", Logger: log}, &timedBackend{Backend: b, t: times, calls: calls}, stages, st)
	if err != nil {
		st.Close()
		return nil, err
	}
	sc := &Sidecar{Backend: b, Service: svc, Calls: calls, st: st, times: times, done: make(chan struct{})}
	wctx, cancel := context.WithCancel(ctx)
	sc.cancel = cancel
	first := make(chan struct{})
	var once sync.Once
	go func() {
		defer close(sc.done)
		_ = b.Watch(wctx, func() { once.Do(func() { close(first) }) })
	}()
	select {
	case <-first:
	case <-ctx.Done():
		sc.Close()
		return nil, ctx.Err()
	}
	return sc, nil
}

// Close stops watching and closes the store.
func (s *Sidecar) Close() {
	s.cancel()
	<-s.done
	s.st.Close()
}

// Round runs one service round and reports what it took.
func (s *Sidecar) Round(ctx context.Context) (RoundStats, error) {
	s.Calls.Reset()
	s.times.reset()
	cpu0 := cpuTime()
	t0 := time.Now()
	r, err := s.Service.Round(ctx)
	if err != nil {
		return RoundStats{}, err
	}
	rs := RoundStats{Service: time.Since(t0), Round: r.Latency, CPU: cpuTime() - cpu0, Pins: len(r.Pins)}
	rs.CallsByRoute = s.Calls.ByRoute()
	rs.Calls = s.Calls.Total()
	rs.Phases, rs.MaintenanceCalls = s.times.snapshot()
	for _, p := range r.Pins {
		if p.Applied {
			rs.Applied++
		}
	}
	return rs, nil
}

// Resync runs one full resync and reports its time and calls.
func (s *Sidecar) Resync(ctx context.Context) (time.Duration, int, error) {
	c0 := s.Calls.Total()
	t0 := time.Now()
	if err := s.Backend.Resync(ctx); err != nil {
		return 0, 0, fmt.Errorf("resync: %w", err)
	}
	return time.Since(t0), s.Calls.Total() - c0, nil
}

// CallCounter is an http.RoundTripper that counts requests by route (nomadtest.Route).
type CallCounter struct {
	next    http.RoundTripper
	mu      sync.Mutex
	byRoute map[string]int
	total   int
}

// RoundTrip counts the request and passes it on.
func (c *CallCounter) RoundTrip(r *http.Request) (*http.Response, error) {
	c.mu.Lock()
	c.byRoute[nomadtest.Route(r.Method, r.URL.Path)]++
	c.total++
	c.mu.Unlock()
	return c.next.RoundTrip(r)
}

// Total is the requests since the last Reset.
func (c *CallCounter) Total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.total
}

// ByRoute is the requests per route since the last Reset.
func (c *CallCounter) ByRoute() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.byRoute)
}

// Reset zeroes the counts.
func (c *CallCounter) Reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.byRoute, c.total = map[string]int{}, 0
}

// cpuTime is the process's user and system CPU time (the fake's handlers included).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// rss reads the resident and peak resident set size in MiB from /proc (0 elsewhere).
func rss() (cur, peak float64) {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		kb, err := strconv.ParseFloat(f[1], 64)
		if err != nil {
			continue
		}
		switch f[0] {
		case "VmRSS:":
			cur = kb / 1024
		case "VmHWM:":
			peak = kb / 1024
		}
	}
	return cur, peak
}
