package service

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Metrics are the sidecar's Prometheus metrics, on a registry of their own (served at /metrics).
type Metrics struct {
	Registry *prometheus.Registry

	QueueLength prometheus.Gauge
	InvalidJobs prometheus.Gauge
	// InfeasibleGroups and WaitingGroups{wait} describe the last round's undecided groups.
	InfeasibleGroups prometheus.Gauge
	WaitingGroups    *prometheus.GaugeVec
	DecisionLatency  prometheus.Histogram
	Rounds           *prometheus.CounterVec
	SolverOutcomes   *prometheus.CounterVec
	Pins             *prometheus.CounterVec
	Conflicts        prometheus.Counter
	Preemptions      *prometheus.CounterVec
	Tuning           *prometheus.CounterVec
	Reheld           prometheus.Counter
	Observations     *prometheus.CounterVec
	Rejected         prometheus.Counter
	PredictionError  *prometheus.HistogramVec
	Shadow           *prometheus.CounterVec
	// GangsDeferred counts gangs a placement decided in part and the round held back whole;
	// GangPartialPins counts gangs pinned in part, which must stay 0.
	GangsDeferred   prometheus.Counter
	GangPartialPins prometheus.Counter
	// GangReservedGPUs is what the last round's gang reservation holds (0: none).
	GangReservedGPUs prometheus.Gauge
	// EstimateModel{param} is the model runtime estimates are read with (bias, sigma) and
	// how many finished runs it is learned from (runs).
	EstimateModel *prometheus.GaugeVec
	// NamespaceEstimateModel{namespace,param} is each namespace's.
	NamespaceEstimateModel *prometheus.GaugeVec
	// RuntimeHistory{param} is the runtime history jobs without hetgpu.runtime are read by
	// (model/history): runs in its window, the cluster-wide median_s and sigma, and how many
	// runs it was given (observed), did not count (skipped) and namespaces with runs.
	RuntimeHistory *prometheus.GaugeVec
}

func newMetrics() *Metrics {
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		QueueLength: prometheus.NewGauge(prometheus.GaugeOpts{Name: "hetgpu_queue_length",
			Help: "Pending task groups waiting for a hetgpu decision, as of the last round."}),
		InvalidJobs: prometheus.NewGauge(prometheus.GaugeOpts{Name: "hetgpu_invalid_jobs",
			Help: "Held task groups hetgpu cannot decide for (malformed annotations or request)."}),
		InfeasibleGroups: prometheus.NewGauge(prometheus.GaugeOpts{Name: "hetgpu_infeasible_groups",
			Help: "Pending task groups that can never run on the cluster as it stands (every ready node, all GPUs free), as of the last round."}),
		WaitingGroups: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "hetgpu_waiting_groups",
			Help: "Pending task groups not placed in the last round, by why: infeasible, capacity, behind, invalid (malformed annotations or a request hetgpu cannot evaluate)."}, []string{"wait"}),
		DecisionLatency: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "hetgpu_decision_latency_seconds",
			Help:    "Wall time of a decision round from snapshot to pins issued (rounds with pending jobs).",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}}),
		Rounds: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hetgpu_rounds_total",
			Help: "Decision rounds by outcome (ok, error)."}, []string{"outcome"}),
		SolverOutcomes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hetgpu_solver_outcomes_total",
			Help: "Placement solves by solver (milp, greedy, decomposed) and whether the greedy fallback was used."}, []string{"solver", "fallback"}),
		Pins: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hetgpu_pins_total",
			Help: "Pins issued by result (applied, conflict, error, shadow)."}, []string{"result"}),
		Conflicts: prometheus.NewCounter(prometheus.CounterOpts{Name: "hetgpu_pin_conflicts_total",
			Help: "Pins refused because the job changed underneath (JobModifyIndex); decided again next round."}),
		Preemptions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hetgpu_preemptions_total",
			Help: "Preemptible jobs stopped to be placed again, by result (applied, conflict, error)."}, []string{"result"}),
		Tuning: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hetgpu_policy_tuning_total",
			Help: "Online fine-tuning steps of the ranking policy by result (adopted, kept, error)."}, []string{"result"}),
		Reheld: prometheus.NewCounter(prometheus.CounterOpts{Name: "hetgpu_reheld_total",
			Help: "Pinned jobs put back on hold because their node or GPUs failed."}),
		Observations: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hetgpu_observations_total",
			Help: "Measured runs recorded, by source (driver, sidecar)."}, []string{"source"}),
		Rejected: prometheus.NewCounter(prometheus.CounterOpts{Name: "hetgpu_observations_rejected_total",
			Help: "Observations rejected as malformed."}),
		PredictionError: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "hetgpu_prediction_relative_error",
			Help:    "|predicted - measured| / measured for each observed run, by quantity (throughput, power).",
			Buckets: []float64{.01, .025, .05, .1, .15, .2, .3, .5, .75, 1, 2}}, []string{"quantity"}),
		Shadow: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hetgpu_shadow_comparisons_total",
			Help: "Shadow decisions compared with Nomad's own placement, by whether the GPU type matched."}, []string{"same_gpu_type"}),
		GangsDeferred: prometheus.NewCounter(prometheus.CounterOpts{Name: "hetgpu_gangs_deferred_total",
			Help: "Gangs (the waiting groups of one job) a placement could place only in part; none of their groups was decided that round."}),
		GangPartialPins: prometheus.NewCounter(prometheus.CounterOpts{Name: "hetgpu_gang_partial_pins_total",
			Help: "Gangs of which some but not all waiting groups were pinned; hetgpu never decides a gang in part, so anything but 0 is a bug."}),
		GangReservedGPUs: prometheus.NewGauge(prometheus.GaugeOpts{Name: "hetgpu_gang_reserved_gpus",
			Help: "GPUs the last round reserved for a gang that waited past gang.reserve_after and could not be placed (0: no reservation)."}),
		EstimateModel: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "hetgpu_estimate_model",
			Help: "How users' hetgpu.runtime estimates are read: bias (mean log of true runtime over estimate) and sigma (its spread), learned from runs (finished runs in the window) with ranker.calibrate_estimates."}, []string{"param"}),
		NamespaceEstimateModel: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "hetgpu_namespace_estimate_model",
			Help: "How one namespace's hetgpu.runtime estimates are read: bias, sigma, and runs (its finished runs in the window); its own runs shrunk towards hetgpu_estimate_model."}, []string{"namespace", "param"}),
		RuntimeHistory: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "hetgpu_runtime_history",
			Help: "The runtime history jobs without hetgpu.runtime are read by: runs (finished runs in its window), median_s and sigma (the cluster-wide log-normal on the reference GPU type), observed and skipped (runs given to it, and those not counted: already counted or out of bounds), namespaces (with runs of their own)."}, []string{"param"}),
	}
	m.Registry.MustRegister(m.QueueLength, m.InvalidJobs, m.InfeasibleGroups, m.WaitingGroups, m.DecisionLatency, m.Rounds, m.SolverOutcomes, m.Pins,
		m.Conflicts, m.Preemptions, m.Tuning, m.Reheld, m.Observations, m.Rejected, m.PredictionError, m.Shadow,
		m.GangsDeferred, m.GangPartialPins, m.GangReservedGPUs, m.EstimateModel, m.NamespaceEstimateModel, m.RuntimeHistory,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}
