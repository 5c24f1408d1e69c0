package service

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/hetgpu/hetgpu/model/cluster"
	"github.com/hetgpu/hetgpu/model/gpuspec"
	"github.com/hetgpu/hetgpu/sidecar/runtime/store"
	"github.com/hetgpu/hetgpu/sidecar/sched"
	"github.com/hetgpu/hetgpu/sidecar/stages/estimate"
)

// finite maps NaN and ±Inf (which JSON cannot carry) to 0: a predictor or ranker may produce
// them for an unknown workload, and one must never keep a round's records from being stored.
func finite(x float64) float64 {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return 0
	}
	return x
}

func finiteMap(m map[string]float64) map[string]float64 {
	if m == nil {
		return nil
	}
	out := make(map[string]float64, len(m))
	for k, v := range m {
		out[k] = finite(v)
	}
	return out
}

// capacity is the free GPUs per type and node in a snapshot.
type capacity struct {
	types  []string
	free   map[string]int            // per type
	byNode map[string]map[string]int // type -> node -> free
	names  map[string]string
	// desc and nodes are, per type, the nodes' free counts from most to least and the node
	// IDs sorted: built once a round, read for every decided job of it.
	desc  map[string][]int
	nodes map[string][]string
}

func freeCapacity(snap *cluster.Snapshot) capacity {
	c := capacity{free: map[string]int{}, byNode: map[string]map[string]int{}, names: map[string]string{}}
	gpu := func(g *cluster.DeviceGroup) bool { return g.Type == "gpu" && g.GPUType != "" }
	seen := map[string]bool{}
	for i := range snap.Nodes {
		n := &snap.Nodes[i]
		c.names[n.ID] = n.Name
		for k := range n.Devices {
			if g := &n.Devices[k]; gpu(g) && !seen[g.GPUType] {
				seen[g.GPUType] = true
				c.types = append(c.types, g.GPUType)
			}
		}
	}
	for _, fg := range snap.Free().Groups() {
		if !gpu(fg.Group) {
			continue
		}
		t := fg.Group.GPUType
		c.free[t] += len(fg.IDs)
		if c.byNode[t] == nil {
			c.byNode[t] = map[string]int{}
		}
		c.byNode[t][fg.Node.ID] += len(fg.IDs)
	}
	sort.Strings(c.types)
	c.desc, c.nodes = make(map[string][]int, len(c.byNode)), make(map[string][]string, len(c.byNode))
	for t, m := range c.byNode {
		frees := make([]int, 0, len(m))
		for _, f := range m {
			frees = append(frees, f)
		}
		sort.Sort(sort.Reverse(sort.IntSlice(frees)))
		c.desc[t] = frees
		c.nodes[t] = slices.Sorted(maps.Keys(m))
	}
	return c
}

// fits reports whether the job's GPU count fits the free GPUs of one type now (capacity only:
// constraints are the placer's business).
func (c capacity) fits(job *cluster.Job, typ string) bool {
	return job.FitsFree(c.desc[typ]) // each type's free counts, sorted fullest first once a round
}

// typeEstimates predicts the job on every GPU type of the cluster.
func typeEstimates(c capacity, job *cluster.Job, pred sched.Predictor, chosen *cluster.Decision) []store.Estimate {
	var ref sched.Estimate
	if job.Hetgpu.EstRuntime > 0 {
		ref = pred.Predict(job, gpuspec.ReferenceGPU, job.GPUs)
	}
	out := make([]store.Estimate, 0, len(c.types))
	for _, t := range c.types {
		e := pred.Predict(job, t, job.GPUs)
		thr, pw := finite(e.Throughput), finite(e.PowerW)
		est := store.Estimate{GPUType: t, GPUs: job.GPUs, Throughput: thr, PowerW: pw,
			Uncertainty: finite(e.Uncertainty), Source: e.Source, FreeGPUs: c.free[t], FitsNow: c.fits(job, t),
			MeetsTMin: thr >= job.Hetgpu.MinThroughput && thr > 0}
		if thr > 0 && pw > 0 {
			est.EnergyPerStepJ = finite(pw / thr)
		}
		if r := finite(ref.Throughput); r > 0 && thr > 0 {
			est.RuntimeS = finite(gpuspec.RuntimeOn(job.Hetgpu.EstRuntime.Seconds(), r, thr))
			est.EnergyJ = finite(est.RuntimeS * pw)
		}
		if chosen != nil && chosen.GPUType == t {
			est.Chosen = true
		}
		out = append(out, est)
	}
	return out
}

// alternatives says why each other GPU type, and other nodes of the chosen type, lost.
func alternatives(c capacity, job *cluster.Job, d *cluster.Decision, ests []store.Estimate) []store.Alternative {
	var chosen store.Estimate
	for _, e := range ests {
		if e.Chosen {
			chosen = e
		}
	}
	var out []store.Alternative
	for _, e := range ests {
		if e.Chosen {
			continue
		}
		var why string
		switch {
		case e.Throughput <= 0:
			why = "the predictor expects the job not to run on this type (unknown or out of memory)"
		case !e.MeetsTMin:
			why = fmt.Sprintf("predicted %.4g steps/s is below the job's T_min %.4g", e.Throughput, job.Hetgpu.MinThroughput)
		case !e.FitsNow:
			why = fmt.Sprintf("only %d free GPU(s) of this type, not enough for %d now", e.FreeGPUs, job.GPUs)
		case chosen.Throughput > 0 && e.Throughput < chosen.Throughput:
			why = fmt.Sprintf("slower: %.2f× the chosen type's predicted throughput", e.Throughput/chosen.Throughput)
			if chosen.EnergyPerStepJ > 0 && e.EnergyPerStepJ > chosen.EnergyPerStepJ {
				why += fmt.Sprintf(", %.2f× its energy per step", e.EnergyPerStepJ/chosen.EnergyPerStepJ)
			}
		case chosen.EnergyPerStepJ > 0 && e.EnergyPerStepJ > chosen.EnergyPerStepJ:
			why = fmt.Sprintf("faster (%.2f×) but %.2f× the energy per step; the energy weight favoured the chosen type",
				e.Throughput/math.Max(chosen.Throughput, 1e-12), e.EnergyPerStepJ/chosen.EnergyPerStepJ)
		default:
			why = "lower placement objective: the jobs ranked ahead needed it more, or it left more fragmentation"
		}
		out = append(out, store.Alternative{GPUType: e.GPUType, Why: why})
	}
	// Other nodes of the chosen type that had room.
	pinned := map[string]bool{}
	for _, a := range d.Assign {
		pinned[a.NodeID] = true
	}
	var nodes []string
	for _, n := range c.nodes[d.GPUType] {
		if f := c.byNode[d.GPUType][n]; !pinned[n] && f > 0 && (f >= job.GPUs || job.MaxNodes() > 1) {
			nodes = append(nodes, n)
			if len(nodes) == 3 {
				break
			}
		}
	}
	for _, n := range nodes {
		out = append(out, store.Alternative{GPUType: d.GPUType, NodeIDs: []string{n}, NodeName: c.names[n],
			Why: fmt.Sprintf("same GPU type with %d free; the placement preferred the chosen node (tighter packing, NVLink-connected GPUs, less fragmentation)", c.byNode[d.GPUType][n])})
	}
	return out
}

// QueueEntry is one pending task group in the ranked queue.
type QueueEntry struct {
	Rank        int                `json:"rank"`
	JobKey      string             `json:"job_key"`
	Namespace   string             `json:"namespace"`
	JobID       string             `json:"job_id"`
	Group       string             `json:"group"`
	Score       float64            `json:"score"`
	Features    map[string]float64 `json:"features,omitempty"`
	GPUs        int                `json:"gpus"`
	GPUsPerNode int                `json:"gpus_per_node,omitempty"`
	Device      string             `json:"device"`
	Priority    int                `json:"priority"`
	SubmitTime  time.Time          `json:"submit_time"`
	WaitS       float64            `json:"wait_s"`
	Model       string             `json:"model,omitempty"`
	BatchSize   int                `json:"batch_size,omitempty"`
	MinThr      float64            `json:"min_throughput,omitempty"`
	MaxNodes    int                `json:"max_nodes"`
	Class       string             `json:"priority_class,omitempty"`
	Sharing     bool               `json:"allow_sharing,omitempty"`
	// Status: "waiting" (not placed this round), "decided" (placed this round), "infeasible"
	// (can never run on the cluster as it stands; not ranked, Rank 0) or "invalid" (its
	// request cannot be evaluated; not ranked).
	Status string `json:"status"`
	// Wait says why a group that was not decided waits: "infeasible", "capacity" (it fits the
	// cluster, not the GPUs free now), "behind" (it fit the free GPUs; jobs ranked ahead came
	// first), "queue" (its queue's maximum or another queue's guarantee keeps it out) or
	// "invalid"; Reason says it in words.
	Wait       string `json:"wait,omitempty"`
	Infeasible bool   `json:"infeasible,omitempty"`
	Reason     string `json:"reason,omitempty"`
	// Gang is "namespace/id" when the group is one of several waiting groups of its job that
	// are placed all or nothing.
	Gang string `json:"gang,omitempty"`
	// FreeInS, for a group that waits for GPUs (capacity, behind), is the estimate in seconds
	// of when enough GPUs of a type it can use are free (cluster.NextFree; 0 unknown);
	// PreferredTypes are the GPU types it runs best on (cluster.PreferredTypes).
	FreeInS        float64  `json:"free_in_s,omitempty"`
	PreferredTypes []string `json:"preferred_types,omitempty"`
}

func queueEntry(rank int, r sched.Ranked, now time.Time) QueueEntry {
	j := r.Job
	model := j.Hetgpu.ModelName
	if j.Hetgpu.ModelFamily != "" {
		model = j.Hetgpu.ModelFamily + "/" + model
	}
	return QueueEntry{Rank: rank, JobKey: j.Key(), Namespace: j.Namespace, JobID: j.ID, Group: j.Group, Score: finite(r.Score),
		Features: finiteMap(r.Features), GPUs: j.GPUs, GPUsPerNode: j.GPUsPerNode, Device: j.DeviceName, Priority: j.Priority,
		SubmitTime: j.SubmitTime, WaitS: math.Max(0, now.Sub(j.SubmitTime).Seconds()), Model: model,
		BatchSize: j.Hetgpu.BatchSize, MinThr: finite(j.Hetgpu.MinThroughput), MaxNodes: j.MaxNodes(),
		Class: j.Hetgpu.PriorityClass, Sharing: j.Hetgpu.AllowSharing, Status: "waiting"}
}

// QueueView is GET /v1/queue.
type QueueView struct {
	Round   uint64         `json:"round"`
	Time    time.Time      `json:"time"`
	Jobs    []QueueEntry   `json:"jobs"`
	Invalid []InvalidEntry `json:"invalid"`
}

// InvalidEntry is a held job hetgpu cannot decide for.
type InvalidEntry struct {
	JobKey string `json:"job_key"`
	Error  string `json:"error"`
}

// Queue returns the last round's ranked queue and the invalid jobs.
func (s *Service) Queue() QueueView {
	s.mu.RLock()
	defer s.mu.RUnlock()
	v := QueueView{Round: s.round, Time: s.lastRound, Jobs: append([]QueueEntry{}, s.queue...), Invalid: []InvalidEntry{}}
	for k, e := range s.invalid {
		v.Invalid = append(v.Invalid, InvalidEntry{JobKey: k, Error: e})
	}
	sort.Slice(v.Invalid, func(i, j int) bool { return v.Invalid[i].JobKey < v.Invalid[j].JobKey })
	return v
}

// Decisions returns recent decision records, newest first.
func (s *Service) Decisions(limit int, after uint64) []store.DecisionRecord {
	if limit <= 0 || limit > 1000 {
		limit = 100
	}
	out := s.store.Recent(limit, after)
	if out == nil {
		out = []store.DecisionRecord{}
	}
	return out
}

// ErrNotFound is returned by Explain for a job hetgpu knows nothing about.
var ErrNotFound = errors.New("hetgpu has no record of this job")

// Explanation is GET /v1/jobs/{ns}/{id}/explain.
type Explanation struct {
	Namespace string             `json:"namespace"`
	JobID     string             `json:"job_id"`
	Groups    []GroupExplanation `json:"groups"`
}

// GroupExplanation explains one task group.
type GroupExplanation struct {
	Group string `json:"group"`
	// Status: waiting, infeasible, pinning, invalid, pinned, shadow, conflict, pin_failed, reheld,
	// gone.
	Status  string `json:"status"`
	Summary string `json:"summary"`
	Error   string `json:"error,omitempty"`
	// Infeasible is set for a group that can never run on the cluster as it stands (Status
	// "infeasible"); Reason names the requirement that rules it out. Wait is the kind of wait
	// of a group that was not placed (see QueueEntry.Wait).
	Infeasible   bool                  `json:"infeasible,omitempty"`
	Reason       string                `json:"reason,omitempty"`
	Wait         string                `json:"wait,omitempty"`
	Queue        *QueueEntry           `json:"queue,omitempty"`
	Decision     *store.DecisionRecord `json:"decision,omitempty"`
	Estimates    []store.Estimate      `json:"estimates,omitempty"`
	Alternatives []store.Alternative   `json:"alternatives,omitempty"`
	// Runtime is how a waiting group's runtime is read: its hetgpu.runtime, else the estimate
	// the round's estimates step made (hetgpu.steps, the history of finished runs).
	Runtime *RuntimeReading `json:"runtime,omitempty"`
}

// RuntimeReading is how the ranker reads a waiting group's runtime.
type RuntimeReading struct {
	// DeclaredS is hetgpu.runtime (on the reference GPU; 0 when the job declares none), RanS
	// the time it has run so far (hetgpu.ran), and LeftS the time the ranker expects is left.
	DeclaredS float64 `json:"declared_s"`
	RanS      float64 `json:"ran_s,omitempty"`
	LeftS     float64 `json:"left_s"`
	// RankS, for source "history", is what the job ranks as: the reciprocal of its Gittins
	// index given the time it has run (a fresh job whose peers mostly finish soon ranks short
	// even when its expected time left, LeftS, is long). Other sources rank as LeftS.
	RankS float64 `json:"rank_s,omitempty"`
	// Calibrated says the namespace's model of users' estimates is learned from finished runs
	// (ranker.calibrate_estimates): Bias and Sigma, from Runs of the namespace's own runs.
	Calibrated bool    `json:"calibrated"`
	Bias       float64 `json:"bias,omitempty"`
	Sigma      float64 `json:"sigma,omitempty"`
	// Runs is, for source "user", the namespace's runs the calibration rests on; for source
	// "history", the finished runs of the similar jobs the estimate rests on.
	Runs int `json:"runs,omitempty"`
	// Source is where LeftS comes from: "user" (hetgpu.runtime), "steps" (hetgpu.steps at the
	// predicted speed), "history" (the finished runs of similar jobs) or "none" (no estimate).
	Source string `json:"source"`
	// Level is, for source "history", the group of similar jobs whose runs it rests on: "job"
	// (the job, or a child's parent), "model" (the namespace's jobs of the same model, batch
	// size and GPU count), "gpus" (of the same GPU count), "namespace", "cluster", or "prior"
	// before any run. Confidence is the share of the estimate resting on that group's own
	// runs rather than the groups above it (0 to 1; 1 for steps).
	Level      string  `json:"level,omitempty"`
	Confidence float64 `json:"confidence,omitempty"`
	// Steps is hetgpu.steps, for source "steps".
	Steps float64 `json:"steps,omitempty"`

	// describe is the estimates step's reading in words (source steps and history).
	describe string
}

// runtimeReading explains a waiting job's estimate (source "none" when it has none).
func (s *Service) runtimeReading(j *cluster.Job) *RuntimeReading {
	a := &j.Hetgpu
	src := a.Est.Source
	if src == cluster.EstNone && a.EstRuntime > 0 {
		src = cluster.EstUser // no estimates step ran: the backend's reading of hetgpu.runtime
	}
	ran := a.Est.Ran
	if ran <= 0 {
		ran = a.Ran
	}
	r := &RuntimeReading{DeclaredS: a.DeclaredRuntime.Seconds(), RanS: ran.Seconds(), LeftS: a.EstRuntime.Seconds(), Source: src.String()}
	if a.Est.Left > 0 {
		r.LeftS, r.RankS = a.Est.Left.Seconds(), a.EstRuntime.Seconds()
	}
	switch src {
	case cluster.EstUser:
		if s.cfg.Estimates != nil {
			m, runs := s.cfg.Estimates.Namespace(j.Namespace)
			r.Calibrated, r.Bias, r.Sigma, r.Runs = true, m.Bias, m.Sigma, runs
		}
	case cluster.EstSteps:
		r.Steps, r.Confidence, r.describe = a.Steps, a.Est.Confidence, estimate.Describe(j)
	case cluster.EstHistory:
		r.Level, r.Runs, r.Confidence, r.describe = a.Est.Level, a.Est.Runs, a.Est.Confidence, estimate.Describe(j)
	}
	return r
}

// summary is the reading in words, e.g. "hetgpu.runtime 10h0m0s read as 4h12m left
// (namespace team-a's runs take 0.45x their estimate at the median, from 150 runs)", or for a
// job without hetgpu.runtime "no hetgpu.runtime; read as 3h10m left from 41 finished runs of
// namespace ml's 4-GPU jobs, has run 2h5m".
func (r *RuntimeReading) summary(ns string) string {
	if r.Source != cluster.EstUser.String() {
		if r.describe != "" {
			return r.describe
		}
		return "no hetgpu.runtime, and no estimate of it from hetgpu.steps or the runtime history"
	}
	d := func(s float64) time.Duration { return time.Duration(s * float64(time.Second)).Round(time.Second) }
	out := fmt.Sprintf("hetgpu.runtime %s read as %s left", d(r.DeclaredS), d(r.LeftS))
	if r.RanS > 0 {
		out += fmt.Sprintf(" after %s run", d(r.RanS))
	}
	if r.Calibrated {
		out += fmt.Sprintf(" (namespace %s's runs take %.2fx their estimate at the median, spread %.2f, from %d of its runs)",
			ns, math.Exp(r.Bias), r.Sigma, r.Runs)
	}
	return out
}

// Explain says, for every task group of a job, where it runs and why, or why it waits.
func (s *Service) Explain(ns, id string) (*Explanation, error) {
	ex := &Explanation{Namespace: ns, JobID: id}
	groups := map[string]*GroupExplanation{}
	get := func(g string) *GroupExplanation {
		if groups[g] == nil {
			groups[g] = &GroupExplanation{Group: g}
		}
		return groups[g]
	}
	for _, r := range s.store.LatestForJob(ns, id) {
		rec := r
		ge := get(r.Group)
		ge.Decision = &rec
		ge.Status = r.Status
		ge.Estimates, ge.Alternatives = r.Estimates, r.Alternatives
		ge.Summary = decisionSummary(&rec)
		if r.Status == store.StatusInvalid {
			ge.Error = r.Message
		}
	}
	s.mu.RLock()
	snap := s.lastSnap
	prefix := cluster.JobKey(ns, id) + "/"
	for k, d := range s.pinning {
		if strings.HasPrefix(k, prefix) {
			dd := d
			ge := get(d.Group)
			ge.Status = "pinning"
			ge.Summary = "being pinned this round: " + decisionSummary(&store.DecisionRecord{Status: store.StatusPinned, Decision: &dd})
		}
	}
	ranked := 0
	for _, q := range s.queue {
		if q.Rank > 0 {
			ranked++
		}
	}
	for _, q := range s.queue {
		if !strings.HasPrefix(q.JobKey, prefix) || q.Status == "decided" {
			continue
		}
		qe := q
		ge := get(q.Group)
		ge.Queue = &qe
		ge.Status, ge.Wait, ge.Reason = q.Status, q.Wait, q.Reason
		switch q.Status {
		case cluster.WaitInfeasible:
			ge.Infeasible = true
			ge.Summary = fmt.Sprintf("cannot run on this cluster: %s; it stays held and is checked again whenever nodes join or change (round %d)", q.Reason, s.round)
		case cluster.WaitInvalid:
			ge.Error = q.Reason
			ge.Summary = "held: hetgpu cannot decide for this group until the job is fixed and run again: " + q.Reason
		default:
			ge.Summary = fmt.Sprintf("waiting: rank %d of %d with score %.4g; not placed in round %d", q.Rank, ranked, q.Score, s.round)
			switch q.Wait {
			case cluster.WaitCapacity:
				ge.Summary += "; waits for capacity: " + q.Reason
			case cluster.WaitBehind:
				ge.Summary += "; waits behind higher-ranked jobs: " + q.Reason
			case cluster.WaitQueue:
				ge.Summary += "; waits for its queue: " + q.Reason
			}
		}
		if why, ok := s.reheldReason[q.JobKey]; ok {
			ge.Summary += "; re-held earlier because " + why
		}
	}
	for k, e := range s.invalid {
		if strings.HasPrefix(k, prefix) {
			ge := get(strings.TrimPrefix(k, prefix))
			ge.Status, ge.Error, ge.Wait, ge.Reason = store.StatusInvalid, e, cluster.WaitInvalid, e
			ge.Summary = "held: hetgpu cannot decide for this group until the job is fixed and run again: " + e
		}
	}
	s.mu.RUnlock()
	// Waiting groups get fresh per-type estimates from the last snapshot.
	if snap != nil {
		for i := range snap.Pending {
			j := &snap.Pending[i]
			if j.Namespace != ns || j.ID != id {
				continue
			}
			if ge := groups[j.Group]; ge != nil && (ge.Status == "waiting" || ge.Status == cluster.WaitInfeasible) {
				ge.Estimates = typeEstimates(freeCapacity(snap), j, s.stages.Predictor, nil)
				ge.Alternatives = nil
				// A group that can never run is not ranked, nor estimated: it reads only its own
				// hetgpu.runtime.
				if r := s.runtimeReading(j); ge.Status == "waiting" || r.Source != cluster.EstNone.String() {
					ge.Runtime = r
					ge.Summary += "; " + r.summary(ns)
				}
			}
		}
	}
	if len(groups) == 0 {
		return nil, ErrNotFound
	}
	for _, g := range slices.Sorted(maps.Keys(groups)) {
		ex.Groups = append(ex.Groups, *groups[g])
	}
	return ex, nil
}

func decisionSummary(r *store.DecisionRecord) string {
	d := r.Decision
	var where string
	if d != nil {
		var parts []string
		for _, a := range d.Assign {
			parts = append(parts, fmt.Sprintf("%d× %s on node %s [%s]", len(a.InstanceIDs), strings.ToUpper(d.GPUType), a.NodeID, strings.Join(a.InstanceIDs, ", ")))
		}
		where = strings.Join(parts, " + ")
	}
	var why string
	if d != nil && d.PredThroughput > 0 {
		why = fmt.Sprintf("predicted %.4g steps/s", d.PredThroughput)
		if d.PredPowerW > 0 {
			why += fmt.Sprintf(" at %.0f W (%.3g J/step)", d.PredPowerW, d.PredPowerW/d.PredThroughput)
		}
		best := 0.0
		for _, e := range r.Estimates {
			if !e.Chosen && e.Throughput > best && e.MeetsTMin {
				best = e.Throughput
			}
		}
		if best > 0 {
			why += fmt.Sprintf(", %.2f× the best other GPU type", d.PredThroughput/best)
		}
	}
	if r.Rank > 0 {
		why += fmt.Sprintf("; rank %d of %d, score %.4g", r.Rank, r.QueueLen, r.Score)
	}
	if d != nil && d.Explanation != "" {
		why += "; placer: " + d.Explanation
	}
	switch r.Status {
	case store.StatusPinned:
		return "pinned to " + where + ": " + why
	case store.StatusShadow:
		s := "shadow decision (not pinned): " + where + ": " + why
		if r.Shadow != nil {
			s += fmt.Sprintf("; Nomad placed it on %s (%s), same GPU type: %t", strings.Join(r.Shadow.NomadNodeIDs, ", "), r.Shadow.NomadGPUType, r.Shadow.SameGPUType)
		}
		return s
	case store.StatusReheld:
		return "re-held: " + r.Message + "; hetgpu decides again"
	case store.StatusConflict:
		return "the job changed while it was being pinned; decided again next round (" + r.Message + ")"
	case store.StatusInvalid:
		return "held: " + r.Message
	case store.StatusGone:
		return "the job is gone: " + r.Message
	default:
		return r.Status + ": " + r.Message
	}
}
