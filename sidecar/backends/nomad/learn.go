package nomad

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/hetgpu/hetgpu/internal/parallel"
	"github.com/hetgpu/hetgpu/model/annot"
	"github.com/hetgpu/hetgpu/model/cluster"
	"github.com/hetgpu/hetgpu/model/gpuspec"
)

// hetgpuDriver is the hetgpu task driver's name (driver.Name): its tasks report their own run
// records, measured on the GPUs; runs of every other driver (docker, podman, exec, raw_exec,
// ...) the sidecar records itself.
const hetgpuDriver = "hetgpu"

// reportedByDriver reports whether the hetgpu task driver runs one of the group's GPU tasks
// and so reports the run itself: the sidecar then waits LearnGrace before its own record and
// leaves stopped runs to the driver.
func reportedByDriver(tg *api.TaskGroup) bool {
	for _, t := range tg.Tasks {
		if t == nil || t.Driver != hetgpuDriver || t.Resources == nil {
			continue
		}
		for _, d := range t.Resources.Devices {
			if d != nil && annot.IsGPU(d.Name) {
				return true
			}
		}
	}
	return false
}

// gpuTask is the name of the group's only task asking for GPUs ("" when none or several).
func gpuTask(tg *api.TaskGroup) string {
	name := ""
	for _, t := range tg.Tasks {
		if t == nil || t.Resources == nil || t.Name == "" {
			continue
		}
		for _, d := range t.Resources.Devices {
			if d != nil && annot.IsGPU(d.Name) {
				if name != "" && name != t.Name {
					return ""
				}
				name = t.Name
			}
		}
	}
	return name
}

// sampleEnergy reads the GPUs of running allocations: their energy counters (the hetgpu
// device plugin's "energy" stat, joules since the driver loaded) and their power draw. It
// reads each node's device stats once (one call per node holding such allocations, side by
// side, StatsParallel at a time) and sums each allocation's own instances, rather than
// asking for every allocation's stats: the calls per cycle are bounded by the nodes, not
// the allocations (1,280 nodes x 8 GPUs can run thousands of allocations).
func (b *Backend) sampleEnergy(ctx context.Context) {
	b.mu.Lock()
	now := b.now()
	if now.Sub(b.lastStats) < b.cfg.SampleEvery {
		b.mu.Unlock()
		return
	}
	b.lastStats = now
	byNode := map[string][]*allocRec{}
	for _, a := range b.allocs {
		if a.ClientStatus == api.AllocClientStatusRunning && !terminal(a) && len(a.Devices) > 0 {
			if _, ok := b.jobs[jobKey(a.Namespace, a.JobID)]; ok {
				byNode[a.NodeID] = append(byNode[a.NodeID], a)
			}
		}
	}
	b.mu.Unlock()
	nodes := make([]string, 0, len(byNode))
	for n := range byNode {
		nodes = append(nodes, n)
	}
	sort.Strings(nodes)
	parallel.For(len(nodes), b.cfg.StatsParallel, func(i int) {
		if ctx.Err() != nil {
			return
		}
		sctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		hs, err := b.c.Nodes().Stats(nodes[i], (&api.QueryOptions{}).WithContext(sctx))
		cancel()
		if err != nil || hs == nil {
			b.log.Debug("node device stats unavailable; no energy sample", "node", nodes[i], "error", err)
			return
		}
		power := map[string]float64{}
		energy := map[string]float64{}
		var at time.Time
		eachInstance(hs, func(id string, st *api.DeviceStats) {
			if p, ok := powerW(st.Stats); ok {
				power[id] = p
			}
			if e, ok := energyJ(st.Stats); ok {
				energy[id] = e
			}
			if st.Timestamp.After(at) {
				at = st.Timestamp
			}
		})
		t := b.now()
		// The counter is read against the plugin's own clock (the stats' timestamp): the
		// client caches stats for its collection interval, so the call's time is not when
		// the counter was read.
		if at.IsZero() {
			at = t
		}
		b.mu.Lock()
		defer b.mu.Unlock()
		for _, a := range byNode[nodes[i]] {
			total, n, joules, nj := 0.0, 0, 0.0, 0
			seen := map[string]bool{}
			ids := a.deviceIDs()
			for _, id := range ids {
				if seen[id] {
					continue // an instance listed twice counts once
				}
				seen[id] = true
				if p, ok := power[id]; ok {
					total += p
					n++
				}
				if e, ok := energy[id]; ok {
					joules += e
					nj++
				}
			}
			if n == 0 && nj == 0 {
				continue
			}
			acc := b.energy[a.ID]
			if acc == nil {
				acc = &energyAcc{}
				b.energy[a.ID] = acc
			}
			if n > 0 {
				if !acc.last.IsZero() {
					acc.joules += (acc.lastW + total) / 2 * t.Sub(acc.last).Seconds()
				} else if !a.Start.IsZero() && a.Start.Before(t) {
					// First sample: assume the draw since the task started was the same.
					acc.joules += total * t.Sub(a.Start).Seconds()
				}
				acc.last, acc.lastW = t, total
				acc.peak = max(acc.peak, total)
				acc.samples++
			}
			acc.counter(joules, nj == len(seen), at)
		}
	})
}

// counter adds one reading of the sum of an allocation's energy counters taken at at; all
// says every GPU of the allocation had one. A GPU without one, or a counter that went back
// (a driver reload), leaves the power integral as the run's energy.
func (acc *energyAcc) counter(joules float64, all bool, at time.Time) {
	switch {
	case acc.counterBad:
		return
	case !all || (acc.counters > 0 && joules < acc.lastJ):
		acc.counterBad = true
		return
	case acc.counters > 0 && !at.After(acc.lastJT):
		return // the client's cached reading, seen before
	}
	if acc.counters == 0 {
		acc.firstJ, acc.firstJT = joules, at
	}
	acc.lastJ, acc.lastJT = joules, at
	acc.counters++
}

// runEnergy is the energy of a run of runtime seconds: from the energy counters when they
// were read at least twice during the run (their average power over the run's whole
// runtime: the reads bracket most of it, never its first and last seconds), else the
// integral of the sampled power. source says which ("counter", "power", "" for none).
func (acc *energyAcc) runEnergy(runtime float64) (joules float64, source string) {
	if acc == nil {
		return 0, ""
	}
	if !acc.counterBad && acc.counters >= 2 && runtime > 0 {
		if dt := acc.lastJT.Sub(acc.firstJT).Seconds(); dt > 0 {
			return (acc.lastJ - acc.firstJ) / dt * runtime, "counter"
		}
	}
	if acc.joules > 0 {
		return acc.joules, "power"
	}
	return 0, ""
}

// energyJ finds the energy counter in a device's stats, in joules.
func energyJ(s *api.StatObject) (float64, bool) {
	if s == nil {
		return 0, false
	}
	for k, v := range s.Attributes {
		if v == nil || !strings.EqualFold(strings.ReplaceAll(k, " ", "_"), "energy") {
			continue
		}
		f, ok := statNumber(v)
		if !ok || f < 0 {
			return 0, false
		}
		switch v.Unit {
		case "mJ":
			f /= 1000
		case "kJ":
			f *= 1000
		case "MJ":
			f *= 1e6
		}
		return f, true
	}
	return 0, false
}

// runDraft is a run found under the lock, finished outside it (progress files are read
// through the API).
type runDraft struct {
	fr cluster.FinishedRun
	// allocs are the run's allocations and nodes; progress says to read their progress
	// files (a run the sidecar records itself).
	allocs, nodes []string
	progress      bool
	steps         float64 // hetgpu.steps, 0 when unknown or a resumed run
}

// finishedRuns reports the runs of groups whose allocations all ended, at least one of them
// having finished its work (finishedOK). A run of the hetgpu task driver is reported once
// LearnGrace has passed since its last allocation ended (the driver's record, measured on
// the GPUs, usually comes first); any other driver's at once, with the throughput of its
// progress file. Stopped, failed and lost allocations are never a finished run: the hetgpu
// driver reports what they did, marked partial; for other drivers the sidecar records them
// partial itself, with the steps of their progress file. Each run's record claims its
// allocations, so whichever of the task driver and the sidecar reports it first is the one
// stored and learned.
func (b *Backend) finishedRuns(ctx context.Context) []cluster.FinishedRun {
	drafts := b.draftRuns()
	if len(drafts) == 0 {
		return nil
	}
	// Progress files, side by side (one client RPC each through the servers).
	type job struct{ d, a int }
	var reads []job
	for i, d := range drafts {
		if d.progress {
			for j := range d.allocs {
				reads = append(reads, job{i, j})
			}
		}
	}
	got := make([]*Progress, len(reads))
	parallel.For(len(reads), b.cfg.StatsParallel, func(k int) {
		d := drafts[reads[k].d]
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		p, err := b.readProgress(rctx, d.allocs[reads[k].a], d.nodes[reads[k].a])
		switch {
		case errors.Is(err, errNoProgress):
			b.log.Debug("no progress file; throughput from hetgpu.steps", "run", d.fr.Key, "alloc", d.allocs[reads[k].a])
		case err != nil:
			b.log.Warn("progress file unreadable; throughput from hetgpu.steps", "run", d.fr.Key, "error", err)
		default:
			got[k] = &p
		}
	})
	steps := make([]float64, len(drafts))
	samples := make([]float64, len(drafts))
	read := make([]int, len(drafts))
	for k, p := range got {
		if p != nil {
			i := reads[k].d
			steps[i] += p.Steps
			samples[i] += p.SamplesPerSec
			read[i]++
		}
	}
	out := make([]cluster.FinishedRun, 0, len(drafts))
	for i, d := range drafts {
		fr := d.fr
		o := &fr.Obs
		switch {
		case d.progress && read[i] == len(d.allocs):
			// Every allocation said how far it got: the run's own count.
			o.Steps = steps[i]
			if samples[i] > 0 {
				o.SamplesPerSec = samples[i]
			}
			if !o.Partial && o.RuntimeS > 0 {
				o.Throughput = o.Steps / o.RuntimeS
			}
			fr.Progress = true
		case !o.Partial && d.steps > 0 && o.RuntimeS > 0:
			o.Throughput = d.steps / o.RuntimeS
		}
		out = append(out, fr)
	}
	return out
}

// draftRuns finds, under the lock, the runs to report and marks their allocations
// reported.
func (b *Backend) draftRuns() []runDraft {
	b.mu.Lock()
	defer b.mu.Unlock()
	type run struct {
		live     int
		complete []*allocRec
	}
	runs := map[string]*run{}
	var stopped []*allocRec
	for _, a := range b.allocs {
		gk := groupKey(a.Namespace, a.JobID, a.Group)
		r := runs[gk]
		if r == nil {
			r = &run{}
			runs[gk] = r
		}
		switch {
		case !terminal(a):
			r.live++
		case b.learned[a.ID] || len(a.Devices) == 0:
		case finishedOK(a):
			r.complete = append(r.complete, a)
		case !holdsDevices(a) && !a.Start.IsZero():
			stopped = append(stopped, a) // ended on the client without finishing its work
		}
	}
	keys := slices.Sorted(maps.Keys(runs))
	var out []runDraft
	for _, gk := range keys {
		r := runs[gk]
		if r.live > 0 || len(r.complete) == 0 {
			continue
		}
		sort.Slice(r.complete, func(i, j int) bool { return r.complete[i].ID < r.complete[j].ID })
		if d, ok := b.draftRun(gk, r.complete, false); ok {
			out = append(out, d)
		}
	}
	sort.Slice(stopped, func(i, j int) bool { return stopped[i].ID < stopped[j].ID })
	for _, a := range stopped {
		gk := groupKey(a.Namespace, a.JobID, a.Group)
		if d, ok := b.draftRun(gk, []*allocRec{a}, true); ok {
			out = append(out, d)
		}
	}
	return out
}

// draftRun builds the record of one run from its allocations (sorted by ID); partial marks a
// stopped, failed or lost allocation's. Called with b.mu held; ok is false for a run not to
// report (yet).
func (b *Backend) draftRun(gk string, allocs []*allocRec, partial bool) (runDraft, bool) {
	first := allocs[0]
	jr, ok := b.jobs[jobKey(first.Namespace, first.JobID)]
	if !ok {
		return runDraft{}, false
	}
	tg := findGroup(jr.job, first.Group)
	if tg == nil {
		return runDraft{}, false
	}
	byDriver := reportedByDriver(tg)
	if partial && byDriver {
		b.learned[first.ID] = true // the hetgpu driver reports it, marked partial
		return runDraft{}, false
	}
	last := time.Time{}
	for _, al := range allocs {
		if al.End.After(last) {
			last = al.End
		}
	}
	if byDriver && b.now().Sub(last) < b.cfg.LearnGrace {
		return runDraft{}, false // the task driver's record, measured on the GPUs, usually comes first
	}
	a, _ := annot.Parse(jr.job.Meta, tg.Meta, first.Group)
	obs := cluster.Observation{
		Namespace: first.Namespace, JobID: first.JobID, Group: first.Group,
		ModelFamily: a.ModelFamily, ModelName: a.ModelName, BatchSize: a.BatchSize, ParamCount: a.ParamCount,
		Framework: a.Framework, Partial: partial, Task: gpuTask(tg),
	}
	var start, end time.Time
	nodes := map[string]bool{}
	d := runDraft{progress: !byDriver}
	samples := 0
	accs := make([]*energyAcc, 0, len(allocs))
	for _, al := range allocs {
		b.learned[al.ID] = true
		d.allocs = append(d.allocs, al.ID)
		d.nodes = append(d.nodes, al.NodeID)
		nodes[al.NodeID] = true
		obs.GPUs += len(al.deviceIDs())
		if obs.GPUName == "" {
			obs.GPUName = al.Devices[0].Name
			obs.GPUType = gpuspec.Canonical(obs.GPUName)
		}
		if !al.Start.IsZero() && (start.IsZero() || al.Start.Before(start)) {
			start = al.Start
		}
		if al.End.After(end) {
			end = al.End
		}
		if e := b.energy[al.ID]; e != nil {
			accs = append(accs, e)
			obs.PeakPowerW = max(obs.PeakPowerW, e.peak)
			samples += e.samples
			delete(b.energy, al.ID)
		}
	}
	if len(allocs) == 1 {
		obs.AllocID = first.ID
	}
	obs.Nodes = len(nodes)
	if !start.IsZero() && end.After(start) {
		obs.RuntimeS = end.Sub(start).Seconds()
	}
	obs.Time = end
	source := ""
	for _, e := range accs {
		j, src := e.runEnergy(obs.RuntimeS)
		obs.EnergyJ += j
		if source == "" || src == "power" {
			source = src // one allocation without counters makes the whole figure "power"
		}
	}
	if obs.EnergyJ > 0 && obs.RuntimeS > 0 {
		obs.AvgPowerW = obs.EnergyJ / obs.RuntimeS
	}
	// A run resumed after a preemption (hetgpu.ran) did only the rest of the steps, how
	// many is not known here: steps over its runtime would overstate its throughput.
	if w := annot.Steps(jr.job.Meta, tg.Meta, first.Group); w > 0 && a.Ran == 0 {
		d.steps = w
	}
	key := gk + "@" + runHash(d.allocs)
	d.fr = cluster.FinishedRun{Key: key, AllocIDs: d.allocs, Obs: obs, Start: start, Samples: samples,
		EstRuntime: a.EstRuntime, Ran: a.Ran, EnergySource: source, ParentID: jr.parent}
	return d, true
}

func runHash(ids []string) string {
	sum := sha256.Sum256([]byte(strings.Join(ids, ",")))
	return hex.EncodeToString(sum[:8])
}
