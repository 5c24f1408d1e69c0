package sim

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"sort"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/hetgpu/hetgpu/model/estimates"
	"github.com/hetgpu/hetgpu/model/gpuspec"
	"github.com/hetgpu/hetgpu/model/throughput"
	"github.com/hetgpu/hetgpu/model/trace"
)

// BoundedSlowdownFloorS is the runtime floor of bounded slowdown (short jobs do not dominate).
const BoundedSlowdownFloorS = 10.0

// JobResult is one finished job.
type JobResult struct {
	ID          string  `json:"id"`
	Namespace   string  `json:"namespace,omitempty"`
	JobType     string  `json:"job_type"`
	GPUs        int     `json:"gpus"`
	ArrivalS    float64 `json:"arrival_s"`
	StartS      float64 `json:"start_s"`
	FinishS     float64 `json:"finish_s"`
	JCTS        float64 `json:"jct_s"`
	QueueS      float64 `json:"queue_s"`
	IdealS      float64 `json:"ideal_s"`
	GPUType     string  `json:"gpu_type"`
	Preemptions int     `json:"preemptions"`
	EnergyJ     float64 `json:"energy_j"`
}

// QueueResult is one queue's outcome of a run (hetgpu sim with queues).
type QueueResult struct {
	Name      string  `json:"name"`
	Weight    float64 `json:"weight"`
	Guarantee int     `json:"guarantee"`
	Jobs      int     `json:"jobs"`
	// GPUHours is what the queue's jobs held over the run; GuaranteeGPUHours the guarantee
	// times the run's span.
	GPUHours          float64 `json:"gpu_hours"`
	GuaranteeGPUHours float64 `json:"guarantee_gpu_hours"`
	// BelowGuaranteeS is the time the queue held fewer GPUs than its guarantee while it had
	// pending work the guarantee admits (a waiting job that would not take it above its
	// guarantee, queue.Admitted), after each round's decisions; BelowGuaranteePct that over the
	// span. BelowAnyS counts any pending work (jobs larger than what the guarantee has left
	// too, which start on borrowed GPUs).
	BelowGuaranteeS   float64 `json:"below_guarantee_s"`
	BelowGuaranteePct float64 `json:"below_guarantee_pct"`
	BelowAnyS         float64 `json:"below_any_s"`
	// PendingS is the time it had pending work at all.
	PendingS float64 `json:"pending_s"`
	AvgJCTS  float64 `json:"avg_jct_s"`
	// Share is GPU-hours over weight, normalised so that the queues' mean is 1.
	Share float64 `json:"share"`
}

// Result is what one policy achieved on one trace and cluster. JSON keys are the CLI's
// contract (hetgpu sim --json).
type Result struct {
	Policy  string `json:"policy"`
	Cluster string `json:"cluster"`
	Trace   string `json:"trace"`
	// Jobs is the number of finished jobs; the averages are over them.
	Jobs          int     `json:"jobs"`
	Unfinished    int     `json:"unfinished"`
	Unschedulable int     `json:"unschedulable"`
	AvgJCTS       float64 `json:"avg_jct_s"`
	P50JCTS       float64 `json:"p50_jct_s"`
	P95JCTS       float64 `json:"p95_jct_s"`
	P99JCTS       float64 `json:"p99_jct_s"`
	AvgQueueS     float64 `json:"avg_queue_s"`
	MakespanS     float64 `json:"makespan_s"`
	// GPUUtil is busy GPU time / (GPUs x makespan).
	GPUUtil float64 `json:"gpu_util"`
	// EnergyKWh is every GPU's energy, busy or idle, over EnergyWindowS from the first arrival:
	// the run's own makespan, or after CommonEnergyWindow the longest makespan of the runs
	// compared, the rest at the cluster's idle draw IdlePowerW.
	EnergyKWh     float64 `json:"energy_kwh"`
	EnergyWindowS float64 `json:"energy_window_s"`
	IdlePowerW    float64 `json:"idle_power_w"`
	// EnergyPerWork is kWh per V100 GPU-hour of work (the jobs' work measured on gpuspec.ReferenceGPU).
	EnergyPerWork float64 `json:"energy_per_work_kwh"`
	// BoundedSlowdown is the mean of max(1, JCT / max(ideal runtime, 10 s)), P99BoundedSlowdown
	// its 99th percentile (the starving few).
	BoundedSlowdown    float64 `json:"bounded_slowdown"`
	P99BoundedSlowdown float64 `json:"p99_bounded_slowdown"`
	// JainFairness is Jain's index of finish-time fairness rho = JCT / ideal runtime.
	JainFairness  float64 `json:"jain_fairness"`
	Preemptions   int     `json:"preemptions"`
	Rounds        int     `json:"rounds"`
	DecisionP50Ms float64 `json:"decision_p50_ms"`
	DecisionP95Ms float64 `json:"decision_p95_ms"`
	DecisionP99Ms float64 `json:"decision_p99_ms"`
	// WallS is how long the simulation took (not deterministic; left out of golden files).
	WallS float64 `json:"wall_s"`
	// TMinJobs counts the finished jobs that set a T_min, TMinMet those whose average rate
	// while running met it.
	TMinJobs int `json:"tmin_jobs,omitempty"`
	TMinMet  int `json:"tmin_met,omitempty"`

	// Queues are the per-queue outcomes of a policy run with queues (policies.QueueMeter), and
	// QueueJain Jain's index over their shares (GPU-hours over weight).
	Queues    []QueueResult `json:"queues,omitempty"`
	QueueJain float64       `json:"queue_jain,omitempty"`
	// PartialGangPins counts gangs a pipeline pinned in part over the run (must be 0; counted
	// by the pipeline).
	PartialGangPins int `json:"partial_gang_pins,omitempty"`
	// Estimates is what users told in this run (EstimateReplay.Regime: "scaled", "none",
	// "partial:0.3", ... with "+steps"), the same for every policy of a comparison.
	Estimates string `json:"estimates"`
	// EstimateModel is what the run's calibrated estimates learned (EstimateReplay.CalibrateEstimates).
	EstimateModel *estimates.Stats `json:"estimate_model,omitempty"`

	JobResults []JobResult `json:"-"`
	Series     []Sample    `json:"-"`
}

// Result summarises the run so far.
func (e *Engine) Result(policy string) *Result {
	e.mu.Lock()
	defer e.mu.Unlock()
	r := &Result{Policy: policy, Cluster: e.cfg.Spec.Name, Unschedulable: e.unschedulble, IdlePowerW: e.idleW,
		Estimates: e.cfg.EstimateReplay.Regime()}
	if e.calib != nil && e.calibrated > 0 {
		st := e.calib.Stats()
		r.EstimateModel = &st
	}
	var jcts, ratios, bslds []float64
	var queue, bsld, refHours float64
	for _, j := range e.jobs {
		switch j.Status {
		case StatusDone:
		case StatusUnschedulable:
			continue
		default:
			r.Unfinished++
			continue
		}
		jct := j.Finish - j.ArrivalS
		jcts = append(jcts, jct)
		queue += j.FirstStart - j.ArrivalS
		b := math.Max(1, jct/math.Max(j.IdealS, BoundedSlowdownFloorS))
		bsld += b
		bslds = append(bslds, b)
		ratios = append(ratios, jct/j.IdealS)
		refHours += j.RefGPUHours
		r.Preemptions += j.Preemptions
		r.JobResults = append(r.JobResults, JobResult{ID: j.ID, Namespace: j.Namespace, JobType: j.JobType, GPUs: j.GPUs, ArrivalS: j.ArrivalS,
			StartS: j.FirstStart, FinishS: j.Finish, JCTS: jct, QueueS: j.FirstStart - j.ArrivalS, IdealS: j.IdealS,
			GPUType: j.lastType, Preemptions: j.Preemptions, EnergyJ: j.energyJ})
		if j.MinThroughput > 0 {
			r.TMinJobs++
			if tminMet(j) {
				r.TMinMet++
			}
		}
	}
	r.Jobs = len(jcts)
	if r.Jobs > 0 {
		n := float64(r.Jobs)
		sum := 0.0
		for _, v := range jcts {
			sum += v
		}
		r.AvgJCTS = sum / n
		r.AvgQueueS = queue / n
		r.BoundedSlowdown = bsld / n
		sort.Float64s(jcts)
		r.P50JCTS, r.P95JCTS, r.P99JCTS = Percentile(jcts, 50), Percentile(jcts, 95), Percentile(jcts, 99)
		r.JainFairness = Jain(ratios)
		sort.Float64s(bslds)
		r.P99BoundedSlowdown = Percentile(bslds, 99)
		r.MakespanS = e.lastFinish - e.firstArrival
		if r.MakespanS > 0 {
			r.GPUUtil = e.busyAtFinish / (float64(e.totalGPUs) * r.MakespanS)
		}
		r.EnergyKWh, r.EnergyWindowS = e.energyAtFinish/3.6e6, r.MakespanS
		if refHours > 0 {
			r.EnergyPerWork = r.EnergyKWh / refHours
		}
	}
	lat := make([]float64, len(e.latencies))
	for i, d := range e.latencies {
		lat[i] = float64(d) / float64(time.Millisecond)
	}
	sort.Float64s(lat)
	r.Rounds = len(lat)
	r.DecisionP50Ms, r.DecisionP95Ms, r.DecisionP99Ms = Percentile(lat, 50), Percentile(lat, 95), Percentile(lat, 99)
	r.Series = append([]Sample(nil), e.series...)
	return r
}

// Percentile is the nearest-rank percentile of sorted values (0 for none).
func Percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	k := int(math.Ceil(p/100*float64(len(sorted)))) - 1
	return sorted[min(max(k, 0), len(sorted)-1)]
}

// Jain is Jain's fairness index (sum x)^2 / (n sum x^2): 1 when all equal, 1/n at worst.
func Jain(xs []float64) float64 {
	var s, s2 float64
	for _, x := range xs {
		s += x
		s2 += x * x
	}
	if s2 == 0 {
		return 0
	}
	return s * s / (float64(len(xs)) * s2)
}

// Setup is what every run of a comparison shares.
type Setup struct {
	Spec       *Spec
	Throughput *throughput.Table
	Trace      *trace.Trace
	Logger     hclog.Logger
	// RestartPenaltyS, NoSeries, EstimateReplay: see Config.
	RestartPenaltyS float64
	NoSeries        bool
	EstimateReplay
}

// Simulate replays the setup's trace under one policy on a fresh engine.
func Simulate(ctx context.Context, su Setup, p *PipelinePolicy, progress func(done int)) (*Result, error) {
	e, err := New(Config{Spec: su.Spec, Throughput: su.Throughput, Oracle: p.NeedsOracle(), Logger: su.Logger,
		RestartPenaltyS: su.RestartPenaltyS, NoSeries: su.NoSeries, EstimateReplay: su.EstimateReplay})
	if err != nil {
		return nil, err
	}
	if err := e.Submit(su.Trace.Jobs...); err != nil {
		return nil, err
	}
	t0 := time.Now()
	if err := e.Run(ctx, p, progress); err != nil {
		return nil, err
	}
	r := e.Result(p.Name())
	r.Trace = su.Trace.Name
	r.PartialGangPins = p.PartialGangPins()
	if p.Meter != nil {
		p.Meter.Report(r)
	}
	r.WallS = time.Since(t0).Seconds()
	return r, nil
}

// SimulateAll runs each policy on its own engine, up to parallel at a time (GOMAXPROCS when <=
// 0), and returns results in the policies' order. progress gets (policy index, finished jobs).
func SimulateAll(ctx context.Context, su Setup, policies []*PipelinePolicy, parallel int, progress func(i, done int)) ([]*Result, error) {
	if parallel <= 0 {
		parallel = runtime.GOMAXPROCS(0)
	}
	out := make([]*Result, len(policies))
	errs := make([]error, len(policies))
	sem := make(chan struct{}, parallel)
	var wg sync.WaitGroup
	for i, p := range policies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			var pf func(int)
			if progress != nil {
				pf = func(d int) { progress(i, d) }
			}
			r, err := Simulate(ctx, su, p, pf)
			if err != nil {
				errs[i] = fmt.Errorf("policy %s: %w", p.Name(), err)
				return
			}
			out[i] = r
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return out, err
		}
	}
	CommonEnergyWindow(out)
	return out, nil
}

// CommonEnergyWindow puts the energy of runs of one trace (so one first arrival) on one
// window: from the first arrival to the last completion of any of them. A run that finished
// earlier is charged its cluster's idle draw for the rest, as its GPUs would draw it; else a
// policy whose last job ends late would pay for idle time another policy simply leaves out.
func CommonEnergyWindow(rs []*Result) {
	window := 0.0
	for _, r := range rs {
		window = math.Max(window, r.EnergyWindowS)
	}
	for _, r := range rs {
		if r.Jobs == 0 || r.EnergyWindowS >= window || r.EnergyKWh <= 0 {
			continue
		}
		kwh := r.EnergyKWh + r.IdlePowerW*(window-r.EnergyWindowS)/3.6e6
		// The work is the same: energy per work grows with the energy.
		r.EnergyPerWork *= kwh / r.EnergyKWh
		r.EnergyKWh, r.EnergyWindowS = kwh, window
	}
}

// TraceOptions adapts a throughput table for trace loading: durations become steps on the
// trace's reference GPU type, and job types measured at 2 GPUs count as distributed.
func TraceOptions(tab *throughput.Table, seed uint64) trace.LoadOptions {
	return trace.LoadOptions{
		Seed: seed,
		Throughput: func(jt, g string, n int) (float64, bool) {
			v, _, ok := tab.Throughput(jt, g, n)
			return v, ok && v > 0
		},
		Measured: func(jt, g string, n int) bool {
			v, ok := tab.Measured(jt, g, n)
			return ok && v > 0
		},
		JobTypes:  trace.DefaultJobTypes(),
		Shareable: func(jt string) bool { return ShareableJobType(tab, jt, gpuspec.ReferenceGPU) },
	}
}
