package app

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/hetgpu/hetgpu/model/cluster"
	"github.com/hetgpu/hetgpu/model/throughput"
	"github.com/hetgpu/hetgpu/model/trace"
	"github.com/hetgpu/hetgpu/sidecar/backends/sim"
)

// SimBackend runs the simulator's engine in accelerated wall-clock time as a cluster.Backend:
// the same service, pipeline and API as with Nomad, on a simulated cluster whose jobs arrive
// from a trace. Speed simulated seconds pass per wall-clock second.
type SimBackend struct {
	e     *sim.Engine
	speed float64
	tick  time.Duration
	log   hclog.Logger

	mu       sync.Mutex
	start    time.Time
	finished []cluster.FinishedRun
	done     bool
}

// SimOptions configure the simulated backend.
type SimOptions struct {
	Cluster string
	Trace   string
	Seed    uint64
	Speed   float64
	// Tick is the wall-clock step of the simulated clock (default 200 ms).
	Tick   time.Duration
	Logger hclog.Logger
}

// NewSimBackend loads the cluster spec and the trace and submits every job.
func NewSimBackend(o SimOptions) (*SimBackend, error) {
	if o.Logger == nil {
		o.Logger = hclog.NewNullLogger()
	}
	if o.Tick <= 0 {
		o.Tick = 200 * time.Millisecond
	}
	if o.Speed <= 0 {
		o.Speed = 1
	}
	spec, err := sim.LoadSpec(o.Cluster)
	if err != nil {
		return nil, fmt.Errorf("simulated cluster: %w", err)
	}
	tab, err := throughput.Bundled()
	if err != nil {
		return nil, fmt.Errorf("simulated cluster: %w", err)
	}
	tr, err := trace.Load(o.Trace, sim.TraceOptions(tab, o.Seed))
	if err != nil {
		return nil, fmt.Errorf("simulated workload: %w", err)
	}
	e, err := sim.New(sim.Config{Spec: spec, Throughput: tab, Logger: o.Logger.Named("sim"), NoSeries: true})
	if err != nil {
		return nil, err
	}
	b := WrapEngine(e, o.Speed, o.Tick, o.Logger)
	if err := e.Submit(tr.Jobs...); err != nil {
		return nil, fmt.Errorf("simulated workload %s: %w", o.Trace, err)
	}
	b.log.Info("simulated cluster ready", "cluster", spec.Name, "gpus", spec.TotalGPUs(), "trace", o.Trace, "jobs", len(tr.Jobs), "speed", o.Speed)
	return b, nil
}

// WrapEngine makes a backend of an engine the caller built and fills.
func WrapEngine(e *sim.Engine, speed float64, tick time.Duration, log hclog.Logger) *SimBackend {
	if log == nil {
		log = hclog.NewNullLogger()
	}
	if tick <= 0 {
		tick = 200 * time.Millisecond
	}
	if speed <= 0 {
		speed = 1
	}
	b := &SimBackend{e: e, speed: speed, tick: tick, log: log.Named("simulated")}
	e.AddObserver(b)
	return b
}

// Engine returns the engine (tests, benchmarks).
func (b *SimBackend) Engine() *sim.Engine { return b.e }

// Observe receives the engine's finished allocations (sched.Learner).
func (b *SimBackend) Observe(_ context.Context, o cluster.Observation) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	start := o.Time.Add(-time.Duration(o.RuntimeS * float64(time.Second)))
	b.finished = append(b.finished, cluster.FinishedRun{
		Key: fmt.Sprintf("%s@%d", cluster.GroupKey(o.Namespace, o.JobID, o.Group), o.Time.UnixNano()), Obs: o, Start: start, Samples: 1})
	return nil
}

// Snapshot implements cluster.Cluster.
func (b *SimBackend) Snapshot(ctx context.Context) (*cluster.Snapshot, error) {
	return b.e.Snapshot(ctx)
}

// Pin implements cluster.Cluster: the engine starts the jobs.
func (b *SimBackend) Pin(ctx context.Context, ds []cluster.Decision) ([]cluster.PinResult, error) {
	return b.e.Pin(ctx, ds)
}

// Preempt stops running simulated jobs (cluster.Preempter).
func (b *SimBackend) Preempt(ctx context.Context, ps []cluster.Preemption) ([]cluster.PinResult, error) {
	return b.e.Preempt(ctx, ps)
}

// Watch advances the simulated clock with the wall clock until ctx ends.
func (b *SimBackend) Watch(ctx context.Context, changed func()) error {
	b.mu.Lock()
	b.start = time.Now()
	b.mu.Unlock()
	t := time.NewTicker(b.tick)
	defer t.Stop()
	changed()
	for {
		select {
		case <-ctx.Done():
			return nil
		case now := <-t.C:
			simT := b.speed * now.Sub(b.start).Seconds()
			b.e.AdvanceTo(simT)
			changed()
			if b.e.Done() {
				b.mu.Lock()
				first := !b.done
				b.done = true
				b.mu.Unlock()
				if first {
					b.log.Info("simulated workload finished; the API keeps serving", "sim_time_s", b.e.Now())
				}
			}
		}
	}
}

// Maintain hands over the runs that finished since the last call.
func (b *SimBackend) Maintain(context.Context) (*cluster.Maintenance, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	m := &cluster.Maintenance{Finished: b.finished}
	b.finished = nil
	return m, nil
}

var _ cluster.Backend = (*SimBackend)(nil)

// DeviceStats reports every simulated GPU's utilisation and power under the cluster's power
// model (cluster.DeviceStatsReader). The simulator models neither memory use nor temperature,
// so those stay unreported.
func (b *SimBackend) DeviceStats(context.Context) (map[string]cluster.DeviceStats, error) {
	rs, at := b.e.GPUReadings()
	out := make(map[string]cluster.DeviceStats, len(rs))
	for id, r := range rs {
		util, power, limit, mem := 100*r.Util, r.PowerW, r.TDPW, r.MemoryGiB*1024
		out[id] = cluster.DeviceStats{PowerW: &power, PowerLimitW: &limit, UtilPct: &util, MemTotalMiB: &mem, Time: at}
	}
	return out, nil
}

var _ cluster.DeviceStatsReader = (*SimBackend)(nil)
