package nomad

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"sort"
	"strconv"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/hetgpu/hetgpu/internal/parallel"
	"github.com/hetgpu/hetgpu/internal/tick"
)

// Watch keeps the backend current: a full resync through the list APIs, then the event
// stream from the last index + 1, and again on every reconnect (the stream silently skips
// events older than its buffer, so only a resync is sure to be complete). A stream that
// errs, closes, stalls (no frame within Config.StreamStall) or outlives its agent or leader
// (Config.LeaderProbe) is opened again at once after the resync, so a Nomad leader change
// or a server restart costs seconds, not the 40 s a dead connection takes to time out.
func (b *Backend) Watch(ctx context.Context, changed func()) error {
	backoff := b.cfg.RetryBackoff
	var resyncC <-chan time.Time
	if b.cfg.ResyncEvery > 0 {
		t := time.NewTicker(b.cfg.ResyncEvery)
		defer t.Stop()
		resyncC = t.C
	}
	var ended time.Time // when the last stream ended (zero: none did)
	for ctx.Err() == nil {
		rctx, cancel := context.WithTimeout(ctx, resyncTimeout)
		err := b.Resync(rctx)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			b.log.Warn("resync with Nomad failed; retrying", "error", err, "in", backoff.String())
			if b.cfg.Agents != nil && errors.Is(err, context.DeadlineExceeded) {
				from, to := b.cfg.Agents.Skip()
				b.log.Warn("Nomad agent does not answer; failing over", "from", from, "to", to)
			}
			if !sleep(ctx, backoff) {
				break
			}
			backoff = min(backoff*2, MaxRetryBackoff)
			continue
		}
		if !ended.IsZero() {
			b.log.Info("resynced with Nomad after the event stream ended; streaming again", "after", time.Since(ended).Round(time.Millisecond).String(), "index", b.Index())
			ended = time.Time{}
		}
		changed()
		backoff = b.cfg.RetryBackoff
		err = b.stream(ctx, changed, resyncC)
		if ctx.Err() != nil {
			break
		}
		if err == errResync {
			continue
		}
		ended = time.Now()
		reason := "error"
		var se *streamEnd
		if errors.As(err, &se) {
			reason = se.reason
		}
		b.mu.Lock()
		b.reconnects[reason]++
		b.mu.Unlock()
		b.log.Warn("event stream ended; resyncing and resuming", "reason", reason, "error", err, "index", b.Index())
		if b.cfg.Agents != nil && (reason == reasonStalled || reason == reasonUnreachable) {
			// It accepts connections but does not answer: go to the next agent.
			from, to := b.cfg.Agents.Skip()
			b.log.Warn("Nomad agent does not answer; failing over", "from", from, "to", to)
		}
		if reason == reasonLeader {
			continue // the agent answers: resync at once
		}
		if !sleep(ctx, backoff) {
			break
		}
		backoff = min(backoff*2, MaxRetryBackoff)
	}
	return nil
}

// resyncTimeout bounds one resync: an agent that accepts connections but never answers
// must not hold the watch forever.
const resyncTimeout = 2 * time.Minute

// MaxRetryBackoff bounds the wait between reconnect attempts: a server that comes back (a
// restart, a new leader) is streamed from again within this much.
const MaxRetryBackoff = 4 * time.Second

// Reasons a stream ended (Reconnects' keys).
const (
	reasonClosed      = "closed"      // the agent closed the stream (EOF) or it failed to decode
	reasonStalled     = "stalled"     // nothing, not even a heartbeat, within StreamStall
	reasonLeader      = "leader"      // the cluster's leader changed
	reasonUnreachable = "unreachable" // the agent did not answer the leader probe
	reasonOpen        = "open"        // the stream could not be opened
)

// streamEnd is why an event stream ended.
type streamEnd struct {
	reason string
	err    error
}

func (e *streamEnd) Error() string { return e.reason + ": " + e.err.Error() }
func (e *streamEnd) Unwrap() error { return e.err }

// Reconnects counts the event streams that ended and were opened again (after a resync), by
// reason: closed, stalled, leader, unreachable, open, error.
func (b *Backend) Reconnects() map[string]uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make(map[string]uint64, len(b.reconnects))
	for k, v := range b.reconnects {
		out[k] = v
	}
	return out
}

var errResync = fmt.Errorf("periodic resync")

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// Index is the last event-stream index applied.
func (b *Backend) Index() uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.index
}

// Topics the backend subscribes to, in every namespace the token can read.
func Topics() map[api.Topic][]string {
	return map[api.Topic][]string{
		api.TopicJob:        {"*"},
		api.TopicAllocation: {"*"},
		api.TopicEvaluation: {"*"},
		api.TopicNode:       {"*"},
	}
}

// openStream opens Nomad's event stream from index from. Unlike api.EventStream.Stream it
// passes the heartbeat frames ({} every 30 s) on, so a stream that stopped sending is told
// from a quiet cluster. The channel closes after a frame with Err set.
func (b *Backend) openStream(ctx context.Context, from uint64) (<-chan *api.Events, error) {
	v := url.Values{}
	for topic, keys := range Topics() {
		for _, k := range keys {
			v.Add("topic", string(topic)+":"+k)
		}
	}
	v.Set("index", strconv.FormatUint(from, 10))
	body, err := b.c.Raw().Response("/v1/event/stream?"+v.Encode(), (&api.QueryOptions{Namespace: b.cfg.Namespace}).WithContext(ctx))
	if err != nil {
		return nil, err
	}
	ch := make(chan *api.Events, 10)
	go func() {
		defer close(ch)
		defer body.Close()
		dec := json.NewDecoder(body)
		for {
			evs, err := decodeFrame(dec)
			if err != nil {
				evs = &api.Events{Err: err}
			}
			select {
			case ch <- evs:
			case <-ctx.Done():
				return
			}
			if evs.Err != nil {
				return
			}
		}
	}()
	return ch, nil
}

// streamFrame is one frame of the event stream, its payloads decoded in the same pass: the
// payload keys of the topics the watcher subscribes to (Topics), one per topic.
type streamFrame struct {
	Index  uint64
	Events []struct {
		Topic      api.Topic
		Type, Key  string
		FilterKeys []string
		Index      uint64
		Payload    struct {
			// Allocation is decoded into the api type at once (decodeAlloc).
			Allocation *allocPayload
			// Job is a hint (apply reads the job itself when it needs more): the fields the
			// watcher reads; the whole job decoded into generic values costs several times
			// as much, and a pin causes two job events.
			Job *jobHint
			// Evaluation and Node are generic JSON values, as api.EventStream decodes them
			// (the api's payload helpers read them).
			Evaluation, Node any
		}
	}
}

// allocPayload is an allocation event's payload: allocation events carry no Job, and the
// version is in the stub-compatible field (api.Allocation has none of that name).
type allocPayload struct {
	api.Allocation
	JobVersion uint64
}

// decodeFrame reads the next frame as api.Events, but for the payloads (streamFrame): an
// allocation's is an *allocPayload, a job's the generic values of its jobHint fields.
func decodeFrame(dec *json.Decoder) (*api.Events, error) {
	var f streamFrame
	if err := dec.Decode(&f); err != nil {
		return nil, err
	}
	evs := &api.Events{Index: f.Index}
	if len(f.Events) > 0 {
		evs.Events = make([]api.Event, len(f.Events))
	}
	for i, e := range f.Events {
		ev := api.Event{Topic: e.Topic, Type: e.Type, Key: e.Key, FilterKeys: e.FilterKeys, Index: e.Index, Payload: map[string]any{}}
		p := &e.Payload
		if p.Allocation != nil {
			ev.Payload["Allocation"] = p.Allocation
		}
		if p.Job != nil {
			ev.Payload["Job"] = p.Job.generic()
		}
		if p.Evaluation != nil {
			ev.Payload["Evaluation"] = p.Evaluation
		}
		if p.Node != nil {
			ev.Payload["Node"] = p.Node
		}
		evs.Events[i] = ev
	}
	return evs, nil
}

// jobHint is what the watcher reads of a job event's payload (the whole job decodes into
// generic values at many times the cost, and a pin causes two such events).
type jobHint struct {
	ID, Namespace, Status       *string
	ModifyIndex, JobModifyIndex *float64
}

// generic is the hint as a generic JSON value would hold it: only the fields present.
func (h *jobHint) generic() map[string]any {
	m := make(map[string]any, 5)
	put := func(k string, v any, ok bool) {
		if ok {
			m[k] = v
		}
	}
	put("ID", deref(h.ID, ""), h.ID != nil)
	put("Namespace", deref(h.Namespace, ""), h.Namespace != nil)
	put("Status", deref(h.Status, ""), h.Status != nil)
	put("ModifyIndex", deref(h.ModifyIndex, 0), h.ModifyIndex != nil)
	put("JobModifyIndex", deref(h.JobModifyIndex, 0), h.JobModifyIndex != nil)
	return m
}

// leaderProbe asks the agent for the cluster's leader every LeaderProbe and sends what it
// said: the leader's address, "" while there is none (the agent answers with an error
// status during an election), or an error when the agent does not answer at all.
func (b *Backend) leaderProbe(ctx context.Context, out chan<- probeResult) {
	tick.Every(ctx, b.cfg.LeaderProbe, func() {
		r := b.askLeader(ctx)
		select {
		case out <- r:
		case <-ctx.Done():
		}
	})
}

type probeResult struct {
	leader string
	err    error // the agent did not answer
}

func (b *Backend) askLeader(ctx context.Context) probeResult {
	// A busy agent may take a while; a hung one never answers.
	pctx, cancel := context.WithTimeout(ctx, max(b.cfg.LeaderProbe, 3*time.Second))
	defer cancel()
	var leader string
	_, err := b.c.Raw().Query("/v1/status/leader", &leader, (&api.QueryOptions{}).WithContext(pctx))
	if err == nil {
		return probeResult{leader: leader}
	}
	if statusCode(err) != 0 {
		return probeResult{} // it answers, without a leader (an election) or the endpoint
	}
	return probeResult{err: err}
}

func (b *Backend) stream(ctx context.Context, changed func(), resync <-chan time.Time) error {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	from := b.Index() + 1
	var leader string
	if b.cfg.LeaderProbe > 0 {
		// Also a guard: opening a stream on an agent that accepts but never answers would hang.
		p := b.askLeader(sctx)
		if p.err != nil {
			return &streamEnd{reasonUnreachable, fmt.Errorf("the agent does not answer: %w", p.err)}
		}
		leader = p.leader
	}
	ch, err := b.openStream(sctx, from)
	if err != nil {
		return &streamEnd{reasonOpen, fmt.Errorf("open event stream at index %d: %w", from, err)}
	}
	b.log.Debug("event stream open", "from", from, "leader", leader)
	var probes chan probeResult
	if b.cfg.LeaderProbe > 0 {
		probes = make(chan probeResult)
		go b.leaderProbe(sctx, probes)
	}
	var stallC <-chan time.Time
	var stall *time.Timer
	if b.cfg.StreamStall > 0 {
		stall = time.NewTimer(b.cfg.StreamStall)
		defer stall.Stop()
		stallC = stall.C
	}
	last := time.Now()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-resync:
			return errResync
		case <-stallC:
			return &streamEnd{reasonStalled, fmt.Errorf("no event or heartbeat for %s (Nomad sends one every 30 s)", time.Since(last).Round(time.Millisecond))}
		case p := <-probes:
			switch {
			case p.err != nil:
				return &streamEnd{reasonUnreachable, fmt.Errorf("the agent does not answer: %w", p.err)}
			case p.leader != "" && leader != "" && p.leader != leader:
				return &streamEnd{reasonLeader, fmt.Errorf("leader %s replaced by %s", leader, p.leader)}
			case p.leader != "":
				leader = p.leader
			}
		case evs, ok := <-ch:
			if !ok {
				return &streamEnd{reasonClosed, fmt.Errorf("event stream closed")}
			}
			if evs.Err != nil {
				return &streamEnd{reasonClosed, fmt.Errorf("event stream: %w", evs.Err)}
			}
			last = time.Now()
			if stall != nil {
				stall.Reset(b.cfg.StreamStall)
			}
			if evs.IsHeartbeat() {
				b.log.Trace("event stream heartbeat")
				continue
			}
			b.log.Trace("events", "index", evs.Index, "events", len(evs.Events))
			for i := range evs.Events {
				b.apply(ctx, &evs.Events[i])
			}
			b.mu.Lock()
			if evs.Index > b.index {
				b.index = evs.Index
			}
			b.mu.Unlock()
			changed()
		}
	}
}

// apply folds one event into the state. Payloads are hints: nodes and jobs are re-read
// through their JSON APIs (event payloads lose device attributes, see the integration notes
// 7.1), allocations are taken from the payload guarded by their ModifyIndex.
func (b *Backend) apply(ctx context.Context, ev *api.Event) {
	switch ev.Topic {
	case api.TopicNode:
		if ev.Type == "NodeDeregistration" {
			b.mu.Lock()
			delete(b.nodes, ev.Key)
			b.mu.Unlock()
			return
		}
		b.refreshNode(ctx, ev.Key)
	case api.TopicJob:
		ns := payloadNamespace(ev, "Job")
		if ev.Type == "JobDeregistered" || ev.Type == "JobBatchDeregistered" {
			b.refreshJob(ctx, ns, ev.Key, true)
			return
		}
		if b.jobCurrent(ns, ev) {
			return
		}
		b.refreshJob(ctx, ns, ev.Key, false)
	case api.TopicAllocation:
		a, err := decodeAlloc(ev)
		if err != nil || a == nil {
			b.log.Debug("undecodable allocation event", "key", ev.Key, "error", err)
			return
		}
		b.putAlloc(a)
		b.mu.Lock()
		_, known := b.jobs[jobKey(a.Namespace, a.JobID)]
		b.mu.Unlock()
		if !known && len(a.Devices) > 0 && !b.knownUnmanaged(a) {
			// A GPU job we have not read yet (un-held annotated jobs are seen first here).
			b.refreshJob(ctx, a.Namespace, a.JobID, false)
		}
	case api.TopicEvaluation:
		e, err := ev.Evaluation()
		if err != nil || e == nil {
			return
		}
		k := jobKey(e.Namespace, e.JobID)
		b.mu.Lock()
		_, known := b.jobs[k]
		if e.Status == api.EvalStatusBlocked {
			b.blocked[k] = e
		} else if old, ok := b.blocked[k]; ok && old.ID == e.ID {
			delete(b.blocked, k)
		}
		b.mu.Unlock()
		if !known && (e.Status == api.EvalStatusBlocked || e.TriggeredBy == "job-register") {
			b.refreshJob(ctx, e.Namespace, e.JobID, false)
		}
	}
}

// jobCurrent handles a job event without reading the job when it can: when the tracked job
// is already as new (the sidecar's own registers, pins, re-holds and ui lines, store the job
// they wrote), or when only the job's status moved on (same JobModifyIndex: the spec is the
// one tracked; Nomad's scheduler changes Status and ModifyIndex, e.g. pending -> running
// after a pin is placed), whose status and index it takes from the payload. It reports
// whether the event is handled.
func (b *Backend) jobCurrent(ns string, ev *api.Event) bool {
	m, ok := ev.Payload["Job"].(map[string]any)
	if !ok || ns == "" {
		return false
	}
	mi, ok := m["ModifyIndex"].(float64)
	if !ok || mi <= 0 {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	jr, ok := b.jobs[jobKey(ns, ev.Key)]
	if !ok {
		return false
	}
	if float64(deref(jr.job.ModifyIndex, 0)) >= mi {
		return true
	}
	jmi, ok := m["JobModifyIndex"].(float64)
	status, sok := m["Status"].(string)
	if !ok || !sok || status == "" || jmi != float64(deref(jr.job.JobModifyIndex, 0)) {
		return false
	}
	// A shallow copy: tracked jobs are never changed in place, others may be reading this one.
	cp := *jr.job
	idx := uint64(mi)
	cp.ModifyIndex, cp.Status = &idx, &status
	b.jobs[jobKey(ns, ev.Key)] = &jobRec{job: &cp, firstSubmit: jr.firstSubmit, linkExp: jr.linkExp} // same ui block
	return true
}

// knownUnmanaged reports an allocation of a job already read and found not to be hetgpu's, at
// the job version the allocation runs: plain Nomad GPU jobs are read once per version, not
// on every allocation event and resync.
func (b *Backend) knownUnmanaged(a *allocRec) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	v, ok := b.unmanaged[jobKey(a.Namespace, a.JobID)]
	return ok && v == a.JobVersion
}

func payloadNamespace(ev *api.Event, field string) string {
	if m, ok := ev.Payload[field].(map[string]any); ok {
		if ns, ok := m["Namespace"].(string); ok && ns != "" {
			return ns
		}
	}
	return ""
}

// decodeAlloc decodes the payload with encoding/json: api.Allocation's JSON shape is the
// server's, and mapstructure would need tags the api types do not all carry. The stream
// decodes it so already (decodeFrame); one held otherwise (a generic value) is encoded and
// decoded.
func decodeAlloc(ev *api.Event) (*allocRec, error) {
	raw, ok := ev.Payload["Allocation"]
	if !ok {
		return nil, fmt.Errorf("no Allocation in payload")
	}
	a, ok := raw.(*allocPayload)
	if !ok {
		data, err := json.Marshal(raw)
		if err != nil {
			return nil, err
		}
		a = &allocPayload{}
		if err := json.Unmarshal(data, a); err != nil {
			return nil, err
		}
	}
	r := allocFromFull(&a.Allocation)
	if a.Job == nil {
		r.JobVersion = a.JobVersion
	}
	return r, nil
}

func (b *Backend) putAlloc(a *allocRec) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if old, ok := b.allocs[a.ID]; ok && old.ModifyIndex > a.ModifyIndex {
		return
	}
	// Keep terminal allocations only for jobs hetgpu manages (the learner reads them).
	if terminal(a) {
		if _, ok := b.jobs[jobKey(a.Namespace, a.JobID)]; !ok {
			delete(b.allocs, a.ID)
			delete(b.energy, a.ID)
			return
		}
	}
	b.allocs[a.ID] = a
}

func (b *Backend) refreshNode(ctx context.Context, id string) {
	n, _, err := b.c.Nodes().Info(id, (&api.QueryOptions{}).WithContext(ctx))
	if err != nil {
		if statusCode(err) == 404 {
			b.mu.Lock()
			delete(b.nodes, id)
			b.mu.Unlock()
			return
		}
		b.log.Warn("reading node failed", "node", id, "error", err)
		return
	}
	b.putNode(ctx, n)
}

func (b *Backend) putNode(ctx context.Context, n *api.Node) {
	topo := map[string]topology{}
	if b.cfg.Topology && n.Status == api.NodeStatusReady {
		b.mu.Lock()
		old, ok := b.nodes[n.ID]
		b.mu.Unlock()
		reuse := ok && sameInstances(old.api, n)
		if reuse {
			for _, g := range old.node.Devices {
				for _, in := range g.Instances {
					topo[in.ID] = topology{peers: in.NVLinkPeers, numa: in.NUMANode, pcieSw: in.PCIeSwitch}
				}
			}
		} else {
			topo = b.readTopology(ctx, n.ID)
		}
	}
	rec := &nodeRec{api: n, node: convertNode(n, topo)}
	b.mu.Lock()
	b.nodes[n.ID] = rec
	b.mu.Unlock()
}

func sameInstances(a, b *api.Node) bool {
	ids := func(n *api.Node) []string {
		var out []string
		if n.NodeResources != nil {
			for _, d := range n.NodeResources.Devices {
				for _, i := range d.Instances {
					out = append(out, i.ID)
				}
			}
		}
		sort.Strings(out)
		return out
	}
	x, y := ids(a), ids(b)
	if len(x) != len(y) {
		return false
	}
	for i := range x {
		if x[i] != y[i] {
			return false
		}
	}
	return true
}

func (b *Backend) readTopology(ctx context.Context, nodeID string) map[string]topology {
	out := map[string]topology{}
	tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	hs, err := b.c.Nodes().Stats(nodeID, (&api.QueryOptions{}).WithContext(tctx))
	if err != nil {
		b.log.Debug("node device stats unavailable; no topology", "node", nodeID, "error", err)
		return out
	}
	eachInstance(hs, func(id string, st *api.DeviceStats) {
		if t, ok := parseTopology(st.Stats); ok {
			out[id] = t
		}
	})
	return out
}

// refreshJob re-reads a job; gone jobs are dropped and reported.
func (b *Backend) refreshJob(ctx context.Context, ns, id string, deregistered bool) {
	namespaces := []string{ns}
	if ns == "" {
		// Deregistration payloads may lack the namespace: check every namespace we track.
		b.mu.Lock()
		seen := map[string]bool{}
		for _, jr := range b.jobs {
			if deref(jr.job.ID, "") == id {
				n := deref(jr.job.Namespace, "default")
				if !seen[n] {
					seen[n] = true
					namespaces = append(namespaces, n)
				}
			}
		}
		b.mu.Unlock()
		namespaces = namespaces[1:]
		if len(namespaces) == 0 {
			if deregistered {
				return
			}
			namespaces = []string{"default"}
		}
	}
	for _, n := range namespaces {
		job, _, err := b.c.Jobs().Info(id, (&api.QueryOptions{Namespace: n}).WithContext(ctx))
		if err != nil {
			if statusCode(err) == 404 {
				b.dropJob(n, id)
				continue
			}
			b.log.Warn("reading job failed", "job", jobKey(n, id), "error", err)
			continue
		}
		if deref(job.Stop, false) && deregistered {
			// Stopped (not purged): keep it until it is dead so its allocations are learned.
			b.storeJob(job)
			continue
		}
		b.storeJob(job)
	}
}

// Resync rebuilds the state from the list APIs. The stream then resumes after the newer of the
// last event index and the lists' index.
func (b *Backend) Resync(ctx context.Context) error {
	q := func() *api.QueryOptions { return (&api.QueryOptions{Namespace: b.cfg.Namespace}).WithContext(ctx) }
	nodes, nqm, err := b.c.Nodes().List((&api.QueryOptions{}).WithContext(ctx))
	if err != nil {
		return fmt.Errorf("list nodes: %w", err)
	}
	seenNodes := map[string]bool{}
	var readNodes []string
	for _, ns := range nodes {
		seenNodes[ns.ID] = true
		b.mu.Lock()
		old, ok := b.nodes[ns.ID]
		b.mu.Unlock()
		if ok && old.api.ModifyIndex == ns.ModifyIndex {
			continue
		}
		readNodes = append(readNodes, ns.ID)
	}
	// Node reads (and their topology) go out side by side: at start a cluster of a thousand
	// nodes would otherwise take a thousand round trips in a row.
	nodeErrs := make([]error, len(readNodes))
	parallel.For(len(readNodes), b.cfg.Parallel, func(i int) {
		n, _, err := b.c.Nodes().Info(readNodes[i], (&api.QueryOptions{}).WithContext(ctx))
		if err != nil {
			nodeErrs[i] = fmt.Errorf("read node %s: %w", readNodes[i], err)
			return
		}
		b.putNode(ctx, n)
	})
	if err := errors.Join(nodeErrs...); err != nil {
		return err
	}
	b.mu.Lock()
	for id := range b.nodes {
		if !seenNodes[id] {
			delete(b.nodes, id)
		}
	}
	b.mu.Unlock()

	stubs, jqm, err := b.c.Jobs().ListOptions(&api.JobListOptions{Fields: &api.JobListFields{Meta: true}}, q())
	if err != nil {
		return fmt.Errorf("list jobs: %w", err)
	}
	evals, eqm, err := b.c.Evaluations().List(withParams(q(), map[string]string{"status": api.EvalStatusBlocked}))
	if err != nil {
		return fmt.Errorf("list blocked evaluations: %w", err)
	}
	blockedJobs := map[string]*api.Evaluation{}
	for _, e := range evals {
		if e.Status == api.EvalStatusBlocked {
			blockedJobs[jobKey(e.Namespace, e.JobID)] = e
		}
	}
	seenJobs := map[string]bool{}
	var readJobs []*api.JobListStub
	for _, s := range stubs {
		k := jobKey(s.Namespace, s.ID)
		seenJobs[k] = true
		b.mu.Lock()
		old, tracked := b.jobs[k]
		b.mu.Unlock()
		candidate := tracked || blockedJobs[k] != nil || s.Status == "pending" || hasPrefixKey(s.Meta)
		if !candidate {
			continue
		}
		if tracked && deref(old.job.ModifyIndex, 0) == s.ModifyIndex {
			continue
		}
		readJobs = append(readJobs, s)
	}
	jobErrs := make([]error, len(readJobs))
	parallel.For(len(readJobs), b.cfg.Parallel, func(i int) {
		s := readJobs[i]
		job, _, err := b.c.Jobs().Info(s.ID, (&api.QueryOptions{Namespace: s.Namespace}).WithContext(ctx))
		if err != nil {
			if statusCode(err) == 404 {
				b.dropJob(s.Namespace, s.ID)
				return
			}
			jobErrs[i] = fmt.Errorf("read job %s: %w", jobKey(s.Namespace, s.ID), err)
			return
		}
		b.storeJob(job)
	})
	if err := errors.Join(jobErrs...); err != nil {
		return err
	}
	b.mu.Lock()
	var gone []*jobRec
	for k, jr := range b.jobs {
		if !seenJobs[k] {
			gone = append(gone, jr)
		}
	}
	b.blocked = blockedJobs
	for k := range b.unmanaged {
		if !seenJobs[k] {
			delete(b.unmanaged, k)
		}
	}
	b.mu.Unlock()
	for _, jr := range gone {
		b.dropJob(deref(jr.job.Namespace, "default"), deref(jr.job.ID, ""))
	}

	allocs, aqm, err := b.c.Allocations().List(withParams(q(), map[string]string{"resources": "true"}))
	if err != nil {
		return fmt.Errorf("list allocations: %w", err)
	}
	fresh := map[string]*allocRec{}
	for _, s := range allocs {
		a := allocFromStub(s)
		b.mu.Lock()
		_, managedJob := b.jobs[jobKey(a.Namespace, a.JobID)]
		b.mu.Unlock()
		if terminal(a) && !managedJob {
			continue
		}
		if !managedJob && len(a.Devices) > 0 && !b.knownUnmanaged(a) {
			// GPU allocations of jobs never seen: the job may be an un-held annotated one.
			b.refreshJob(ctx, a.Namespace, a.JobID, false)
		}
		fresh[a.ID] = a
	}
	b.mu.Lock()
	b.allocs = fresh
	for id := range b.energy {
		if _, ok := fresh[id]; !ok {
			delete(b.energy, id)
		}
	}
	// Resume after what the lists reflect unless events already went further.
	idx := minNonZero(nqm.LastIndex, jqm.LastIndex, eqm.LastIndex, aqm.LastIndex)
	if b.index == 0 {
		b.index = idx
	}
	b.mu.Unlock()
	b.log.Debug("resynced", "nodes", len(nodes), "jobs", len(stubs), "allocations", len(allocs), "index", b.Index())
	return nil
}

func withParams(q *api.QueryOptions, p map[string]string) *api.QueryOptions {
	if q.Params == nil {
		q.Params = map[string]string{}
	}
	for k, v := range p {
		q.Params[k] = v
	}
	return q
}

func hasPrefixKey(m map[string]string) bool {
	for k := range m {
		if len(k) > 7 && k[:7] == "hetgpu." {
			return true
		}
	}
	return false
}

func minNonZero(xs ...uint64) uint64 {
	var m uint64
	for _, x := range xs {
		if x != 0 && (m == 0 || x < m) {
			m = x
		}
	}
	return m
}
