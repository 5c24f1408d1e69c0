// Package nomadtest is an in-memory fake of the few Nomad HTTP endpoints the hetgpu sidecar
// uses (nodes, jobs, allocations, blocked evaluations, version tags, client stats and the
// event stream), for tests. It enforces JobModifyIndex on register like Nomad does and has a
// tiny scheduler that places pinned jobs exactly where their constraints say.
package nomadtest

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/nomad/api"
)

// Server is the fake.
type Server struct {
	*httptest.Server

	mu     sync.Mutex
	index  uint64
	nodes  map[string]*api.Node
	jobs   map[string]*api.Job // "ns/id"
	allocs map[string]*api.Allocation
	// byJob ("ns/id") and byNode index allocs (never removed, like allocs), so a register
	// on a fake with thousands of allocations does not scan all of them.
	byJob  map[string][]*api.Allocation
	byNode map[string][]*api.Allocation
	evals  map[string]*api.Evaluation
	tags   map[string][]Tag // "ns/id"
	power  map[string]float64
	energy map[string]float64
	topo   map[string]map[string]*api.StatValue
	// files are what tasks wrote in their allocation directories, by allocation and path.
	files map[string]map[string][]byte
	// events are the stream's frames, each encoded once when emitted (as Nomad serialises
	// an event once for every subscriber), in index order.
	events  []event
	streams map[chan struct{}]bool
	wake    *sync.Cond
	// Requests records "METHOD path?query" of every request, for assertions.
	requests []string
	// calls counts requests by route (see Route); latency delays every request before it is
	// handled, outside mu, so concurrent requests overlap as they do on a real agent.
	calls   map[string]int
	latency time.Duration
	// record keeps requests (the default); benchmarks with millions of calls turn it off.
	record bool
	// Schedule places jobs that are neither held nor stopped (true by default).
	Schedule bool
	// RegisterHook, when set, runs before a register is applied; an error fails it (e.g. to
	// inject conflicts).
	RegisterHook func(job *api.Job) error
	allocSeq     int
	stopped      []string
	// vars are the Variables ("ns/path"), lock timers on now (default time.Now).
	vars    map[string]*fakeVar
	now     func() time.Time
	lockSeq int
	// leader, stalled and heartbeat: see stream.go.
	leader    string
	noLeader  bool
	stalled   bool
	heartbeat time.Duration
}

// Stopped lists the allocations stopped through the API, in order.
func (s *Server) Stopped() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.stopped...)
}

// Tag is a version tag.
type Tag struct {
	Version     uint64
	Name        string
	Description string
}

// New starts a fake Nomad.
func New() *Server {
	s := &Server{
		nodes: map[string]*api.Node{}, jobs: map[string]*api.Job{}, allocs: map[string]*api.Allocation{},
		byJob: map[string][]*api.Allocation{}, byNode: map[string][]*api.Allocation{},
		evals: map[string]*api.Evaluation{}, tags: map[string][]Tag{}, power: map[string]float64{},
		energy: map[string]float64{}, files: map[string]map[string][]byte{},
		topo: map[string]map[string]*api.StatValue{}, streams: map[chan struct{}]bool{}, Schedule: true,
		index: 10, calls: map[string]int{}, record: true, vars: map[string]*fakeVar{},
	}
	s.wake = sync.NewCond(&s.mu)
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	return s
}

// Client returns an API client for the fake.
func (s *Server) Client() *api.Client {
	c, err := api.NewClient(&api.Config{Address: s.URL})
	if err != nil {
		panic(err)
	}
	return c
}

// GPU describes one fake GPU instance.
type GPU struct {
	ID      string
	Healthy bool
}

// AddNode registers a ready, eligible node with one GPU device group.
func (s *Server) AddNode(id, name, gpuName string, gpus int) *api.Node {
	var inst []*api.NodeDevice
	for i := 0; i < gpus; i++ {
		inst = append(inst, &api.NodeDevice{ID: fmt.Sprintf("GPU-%s-%d", name, i), Healthy: true,
			Locality: &api.NodeDeviceLocality{PciBusID: fmt.Sprintf("0000:%02x:00.0", i+1)}})
	}
	mem := int64(16384)
	n := &api.Node{
		ID: id, Name: name, Datacenter: "dc1", NodePool: "default", Status: api.NodeStatusReady,
		SchedulingEligibility: api.NodeSchedulingEligible,
		Attributes:            map[string]string{"kernel.name": "linux", "unique.hostname": name},
		Meta:                  map[string]string{},
		NodeResources: &api.NodeResources{Devices: []*api.NodeDeviceResource{{
			Vendor: "nvidia", Type: "gpu", Name: gpuName, Instances: inst,
			Attributes: map[string]*api.Attribute{"memory": {IntVal: &mem, Unit: "MiB"}},
		}}},
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.bump()
	n.CreateIndex, n.ModifyIndex = s.index, s.index
	s.nodes[id] = n
	s.emit(api.TopicNode, "NodeRegistration", id, map[string]any{"Node": n})
	return n
}

// UpdateNode changes a node (status, drain, eligibility, device health) and emits the event,
// then does what Nomad's servers do about it: a drain makes the node ineligible and leaves
// its allocations running (until DrainDeadline); a node that is down has its live
// allocations marked lost and replaced, where the constraints allow.
func (s *Server) UpdateNode(id, typ string, f func(n *api.Node)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.nodes[id]
	f(n)
	if n.DrainStrategy != nil {
		n.SchedulingEligibility = api.NodeSchedulingIneligible
	}
	s.bump()
	n.ModifyIndex = s.index
	s.emit(api.TopicNode, typ, id, map[string]any{"Node": n})
	if n.Status == api.NodeStatusDown {
		s.replaceAllocsOn(id, api.AllocClientStatusLost, "alloc is lost since its node is down")
	}
}

// DrainDeadline is a drain's deadline passing: the node's remaining allocations are stopped
// (their tasks killed, so they end "complete") and replaced elsewhere, as Nomad's drainer
// migrates them.
func (s *Server) DrainDeadline(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.replaceAllocsOn(id, api.AllocClientStatusComplete, "alloc is being migrated")
}

// replaceAllocsOn ends the live allocations on a node with clientStatus and schedules their
// jobs again. Callers hold s.mu.
func (s *Server) replaceAllocsOn(nodeID, clientStatus, why string) {
	jobs := map[string]bool{}
	for _, a := range s.sortedAllocs() {
		if a.NodeID != nodeID || terminal(a) {
			continue
		}
		s.stopAlloc(a, clientStatus, why)
		jobs[a.Namespace+"/"+a.JobID] = true
	}
	for _, k := range slices.Sorted(maps.Keys(jobs)) {
		if j, ok := s.jobs[k]; ok {
			s.bump()
			s.schedule(j, fmt.Sprintf("eval-%d", s.index))
			s.updateJobStatus(*j.Namespace, *j.ID)
		}
	}
}

// stopAlloc marks an allocation stopped with the client status its tasks end in. Callers
// hold s.mu.
func (s *Server) stopAlloc(a *api.Allocation, clientStatus, why string) {
	a.DesiredStatus, a.DesiredDescription, a.ClientStatus = api.AllocDesiredStatusStop, why, clientStatus
	for _, ts := range a.TaskStates {
		ts.State = "dead"
		if ts.FinishedAt.IsZero() {
			ts.FinishedAt = time.Now()
		}
	}
	s.bump()
	a.ModifyIndex = s.index
	s.emitAlloc(a, "AllocationUpdated")
}

// jobAllocs is a job's allocations sorted by ID (cheaper than sorting all of them for each
// register of a large fake). Callers hold s.mu.
func (s *Server) jobAllocs(ns, id string) []*api.Allocation {
	out := append([]*api.Allocation(nil), s.byJob[ns+"/"+id]...)
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

func (s *Server) sortedAllocs() []*api.Allocation {
	out := make([]*api.Allocation, 0, len(s.allocs))
	for _, a := range s.allocs {
		out = append(out, a)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// SetPower sets the power draw (W) a GPU instance reports in device stats.
func (s *Server) SetPower(deviceID string, w float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.power[deviceID] = w
}

// SetEnergy sets the energy counter (J) a GPU instance reports in device stats ("energy",
// unit "J", as the hetgpu device plugin's stat reaches the real agent's node stats).
func (s *Server) SetEnergy(deviceID string, j float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.energy[deviceID] = j
}

// SetAllocFile puts a file into an allocation's directory (path as Nomad's file-system API
// names it, e.g. "alloc/hetgpu/progress.json"), as a task writing it would.
func (s *Server) SetAllocFile(allocID, path string, data []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.files[allocID] == nil {
		s.files[allocID] = map[string][]byte{}
	}
	s.files[allocID][path] = append([]byte(nil), data...)
}

// SetTopology sets stats attributes a GPU instance publishes (e.g. "nvlink_peers").
func (s *Server) SetTopology(deviceID string, attrs map[string]*api.StatValue) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.topo[deviceID] = attrs
}

// Job returns a copy of a stored job.
func (s *Server) Job(ns, id string) *api.Job {
	s.mu.Lock()
	defer s.mu.Unlock()
	j, ok := s.jobs[ns+"/"+id]
	if !ok {
		return nil
	}
	return clone(j)
}

// Tags returns a job's version tags.
func (s *Server) Tags(ns, id string) []Tag {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Tag(nil), s.tags[ns+"/"+id]...)
}

// Allocs returns copies of a job's allocations.
func (s *Server) Allocs(ns, id string) []*api.Allocation {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*api.Allocation
	for _, a := range s.allocs {
		if a.Namespace == ns && a.JobID == id {
			out = append(out, clone(a))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Requests returns the requests seen so far.
func (s *Server) Requests() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.requests...)
}

// SetLatency delays every later request by d before it is handled (0: none), as a network
// round trip and a server's work would; the event stream pays it once, when it opens.
func (s *Server) SetLatency(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.latency = d
}

// RecordRequests turns the Requests log on or off (on by default); calls are counted either
// way.
func (s *Server) RecordRequests(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.record = on
}

// Calls returns how many requests each route got since the last ResetCalls (see Route).
func (s *Server) Calls() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.calls)
}

// TotalCalls is the number of requests since the last ResetCalls, the event stream's
// included.
func (s *Server) TotalCalls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, v := range s.calls {
		n += v
	}
	return n
}

// ResetCalls zeroes the call counts and forgets the recorded requests.
func (s *Server) ResetCalls() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = map[string]int{}
	s.requests = nil
}

// Route names a request by method and path with its IDs replaced, e.g. "GET /v1/job/:id" or
// "GET /v1/client/allocation/:id/stats", so calls can be counted per endpoint.
func Route(method, path string) string {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	// /v1/<collection>/<id>[/<sub>...]: the third element is an ID for the singular resources.
	if len(parts) >= 3 {
		switch parts[1] {
		case "job", "node", "allocation", "evaluation":
			parts[2] = ":id"
			if parts[1] == "job" && len(parts) >= 5 && parts[3] == "versions" {
				parts[4] = ":version"
			}
		case "client":
			if len(parts) >= 4 && parts[2] == "allocation" {
				parts[3] = ":id"
			}
		}
	}
	return method + " /" + strings.Join(parts, "/")
}

// Index is the fake's raft index.
func (s *Server) Index() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.index
}

// LastEventIndex is the index of the newest event (0 without any): a watcher that has applied
// it has seen everything.
func (s *Server) LastEventIndex() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.events) == 0 {
		return 0
	}
	return s.events[len(s.events)-1].index
}

// DropStreams ends every open event stream (the client sees EOF and must reconnect).
func (s *Server) DropStreams() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for ch := range s.streams {
		close(ch)
		delete(s.streams, ch)
	}
	s.wake.Broadcast()
}

// TrimEvents forgets buffered events below index (like Nomad's bounded event buffer).
func (s *Server) TrimEvents(below uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var keep []event
	for _, e := range s.events {
		if e.index >= below {
			keep = append(keep, e)
		}
	}
	s.events = keep
}

// Register stores a job as `nomad job run` would (no index enforcement).
func (s *Server) Register(job *api.Job) *api.JobRegisterResponse {
	s.mu.Lock()
	defer s.mu.Unlock()
	resp, err := s.register(&api.JobRegisterRequest{Job: clone(job)})
	if err != nil {
		panic(err)
	}
	return resp
}

// SetAllocNotStarted makes an allocation placed but not started, as a real agent shows one
// whose client has not run its tasks yet: client status pending, task states without a start.
func (s *Server) SetAllocNotStarted(allocID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.allocs[allocID]
	a.ClientStatus = "pending"
	for _, ts := range a.TaskStates {
		ts.State, ts.StartedAt = "pending", time.Time{}
	}
	s.bump()
	a.ModifyIndex = s.index
	s.emitAlloc(a, "AllocationUpdated")
	s.updateJobStatus(a.Namespace, a.JobID)
}

// SetAllocStatus changes an allocation's client status and task times, emitting the event.
func (s *Server) SetAllocStatus(allocID, status string, start, end time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.allocs[allocID]
	a.ClientStatus = status
	for _, ts := range a.TaskStates {
		if !start.IsZero() {
			ts.StartedAt = start
		}
		if !end.IsZero() {
			ts.FinishedAt = end
			ts.State = "dead"
		} else {
			ts.State = "running"
		}
	}
	s.bump()
	a.ModifyIndex = s.index
	s.emitAlloc(a, "AllocationUpdated")
	s.updateJobStatus(a.Namespace, a.JobID)
}

// Purge is `nomad job stop -purge` as a real agent (Nomad 2.0) shows it: the job and its
// allocations are gone at once, running or not; the stream carries JobDeregistered and no
// event for the allocations (they are deleted, not updated), and reading one answers 404
// "alloc not found".
func (s *Server) Purge(ns, id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	j := s.jobs[ns+"/"+id]
	delete(s.jobs, ns+"/"+id)
	for _, a := range s.byJob[ns+"/"+id] {
		delete(s.allocs, a.ID)
	}
	delete(s.byJob, ns+"/"+id)
	for n, as := range s.byNode {
		keep := as[:0]
		for _, a := range as {
			if a.Namespace != ns || a.JobID != id {
				keep = append(keep, a)
			}
		}
		s.byNode[n] = keep
	}
	s.bump()
	s.emit(api.TopicJob, "JobDeregistered", id, map[string]any{"Job": j})
}

// Deregister purges a job.
func (s *Server) Deregister(ns, id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	j := s.jobs[ns+"/"+id]
	delete(s.jobs, ns+"/"+id)
	s.bump()
	s.emit(api.TopicJob, "JobDeregistered", id, map[string]any{"Job": j})
}

func (s *Server) bump() { s.index++ }

// event is one frame of the event stream: its index and its JSON line.
type event struct {
	index uint64
	line  []byte
}

// emit appends an event with the payload as it is now: the real stream carries JSON objects,
// so the frame is encoded here, once (later changes to the payload's objects do not show).
// Callers hold s.mu.
func (s *Server) emit(topic api.Topic, typ, key string, payload map[string]any) {
	s.emitEvent(api.Event{Topic: topic, Type: typ, Key: key, Index: s.index, Payload: payload})
}

func (s *Server) emitEvent(ev api.Event) {
	line, err := json.Marshal(api.Events{Index: s.index, Events: []api.Event{ev}})
	if err != nil {
		panic(err)
	}
	s.events = append(s.events, event{index: s.index, line: append(line, '\n')})
	s.wake.Broadcast()
}

// eventAlloc is an allocation event's payload: the allocation without its job, and the job's
// version.
type eventAlloc struct {
	*api.Allocation
	JobVersion *uint64 `json:",omitempty"`
}

func (s *Server) emitAlloc(a *api.Allocation, typ string) {
	c := *a // encoded at once: a shallow copy is enough to leave the job out
	c.Job = nil
	p := eventAlloc{Allocation: &c}
	if a.Job != nil && a.Job.Version != nil {
		v := *a.Job.Version
		p.JobVersion = &v
	}
	s.emitEvent(api.Event{Topic: api.TopicAllocation, Type: typ, Key: a.ID, FilterKeys: []string{a.JobID}, Index: s.index,
		Payload: map[string]any{"Allocation": p}})
}

func clone[T any](v *T) *T {
	data, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	var out T
	if err := json.Unmarshal(data, &out); err != nil {
		panic(err)
	}
	return &out
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	if s.record {
		s.requests = append(s.requests, r.Method+" "+r.URL.Path+"?"+r.URL.RawQuery)
	}
	s.calls[Route(r.Method, r.URL.Path)]++
	lat := s.latency
	s.mu.Unlock()
	if lat > 0 {
		t := time.NewTimer(lat)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return
		}
	}
	p := r.URL.Path
	ns := r.URL.Query().Get("namespace")
	if ns == "" {
		ns = "default"
	}
	switch {
	case p == "/v1/event/stream":
		s.stream(w, r)
	case p == "/v1/status/leader":
		s.statusLeader(w)
	case strings.HasPrefix(p, "/v1/var/"):
		s.variable(w, r, ns, strings.TrimPrefix(p, "/v1/var/"))
	case p == "/v1/nodes":
		s.mu.Lock()
		var out []*api.NodeListStub
		for _, n := range s.nodes {
			out = append(out, &api.NodeListStub{ID: n.ID, Name: n.Name, Status: n.Status, ModifyIndex: n.ModifyIndex,
				SchedulingEligibility: n.SchedulingEligibility, Drain: n.DrainStrategy != nil})
		}
		s.mu.Unlock()
		s.reply(w, out)
	case strings.HasPrefix(p, "/v1/node/"):
		replyCopy(s, w, s.nodes, strings.TrimPrefix(p, "/v1/node/"), "node not found")
	case p == "/v1/client/stats":
		s.nodeStats(w, r.URL.Query().Get("node_id"))
	case strings.HasPrefix(p, "/v1/client/fs/readat/") || strings.HasPrefix(p, "/v1/client/fs/cat/"):
		s.allocFile(w, r, p[strings.LastIndex(p, "/")+1:])
	case strings.HasPrefix(p, "/v1/client/allocation/") && strings.HasSuffix(p, "/stats"):
		s.allocStats(w, strings.TrimSuffix(strings.TrimPrefix(p, "/v1/client/allocation/"), "/stats"))
	case p == "/v1/jobs" && r.Method == http.MethodGet:
		s.mu.Lock()
		var out []*api.JobListStub
		for _, j := range s.jobs {
			if ns != "*" && *j.Namespace != ns && r.URL.Query().Get("namespace") != "" {
				continue
			}
			st := &api.JobListStub{ID: *j.ID, Namespace: *j.Namespace, Status: *j.Status, ModifyIndex: *j.ModifyIndex,
				JobModifyIndex: *j.JobModifyIndex, Type: *j.Type}
			if r.URL.Query().Get("meta") == "true" {
				st.Meta = j.Meta
			}
			out = append(out, st)
		}
		s.mu.Unlock()
		s.reply(w, out)
	case p == "/v1/jobs" && (r.Method == http.MethodPut || r.Method == http.MethodPost):
		var req api.JobRegisterRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if req.Job != nil && req.Job.Namespace == nil {
			req.Job.Namespace = &ns
		}
		if s.RegisterHook != nil {
			if err := s.RegisterHook(req.Job); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
		}
		s.mu.Lock()
		resp, err := s.registerHTTP(&req)
		s.mu.Unlock()
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		s.reply(w, resp)
	case strings.HasPrefix(p, "/v1/job/") && strings.Contains(p, "/versions/") && strings.HasSuffix(p, "/tag"):
		rest := strings.TrimPrefix(p, "/v1/job/")
		id, tail, _ := strings.Cut(rest, "/versions/")
		name := strings.TrimSuffix(tail, "/tag")
		if strings.Contains(id, "/") {
			// Nomad splits the path on "/": a child's ID (parent/dispatch-…, parent/periodic-…)
			// cannot be tagged through this endpoint.
			http.Error(w, "invalid job tag endpoint", http.StatusNotFound)
			return
		}
		var req api.TagVersionRequest
		_ = json.NewDecoder(r.Body).Decode(&req)
		s.mu.Lock()
		j, ok := s.jobs[ns+"/"+id]
		if ok && req.Version > *j.Version {
			ok = false
		}
		if ok {
			s.tags[ns+"/"+id] = append(s.tags[ns+"/"+id], Tag{Version: req.Version, Name: name, Description: req.Description})
		}
		s.mu.Unlock()
		if !ok {
			http.Error(w, "job version not found", http.StatusNotFound)
			return
		}
		s.reply(w, struct{}{})
	case strings.HasPrefix(p, "/v1/job/"):
		id := strings.TrimPrefix(p, "/v1/job/")
		replyCopy(s, w, s.jobs, ns+"/"+id, "job not found")
	case strings.HasPrefix(p, "/v1/allocation/") && !strings.Contains(strings.TrimPrefix(p, "/v1/allocation/"), "/") && r.Method == http.MethodGet:
		replyCopy(s, w, s.allocs, strings.TrimPrefix(p, "/v1/allocation/"), "alloc not found")
	case strings.HasPrefix(p, "/v1/allocation/") && strings.HasSuffix(p, "/stop") && r.Method == http.MethodPut:
		id := strings.TrimSuffix(strings.TrimPrefix(p, "/v1/allocation/"), "/stop")
		s.mu.Lock()
		a, ok := s.allocs[id]
		if ok {
			// As a client does once the task is killed.
			// Nomad migrates a stopped allocation: a replacement is placed (or blocked).
			s.stopAlloc(a, api.AllocClientStatusComplete, "alloc was stopped by the API")
			if j, ok := s.jobs[a.Namespace+"/"+a.JobID]; ok {
				s.schedule(j, fmt.Sprintf("eval-stop-%s", id))
			}
			s.updateJobStatus(a.Namespace, a.JobID)
			s.stopped = append(s.stopped, id)
		}
		s.mu.Unlock()
		if !ok {
			http.Error(w, "alloc not found", http.StatusNotFound)
			return
		}
		s.reply(w, api.AllocStopResponse{EvalID: "stop-" + id})
	case p == "/v1/allocations":
		s.mu.Lock()
		var out []*api.AllocationListStub
		for _, a := range s.allocs {
			st := &api.AllocationListStub{ID: a.ID, Namespace: a.Namespace, NodeID: a.NodeID, JobID: a.JobID, TaskGroup: a.TaskGroup,
				DesiredStatus: a.DesiredStatus, ClientStatus: a.ClientStatus, TaskStates: a.TaskStates, ModifyIndex: a.ModifyIndex,
				CreateIndex: a.CreateIndex}
			if a.Job != nil && a.Job.Version != nil {
				st.JobVersion = *a.Job.Version
			}
			if r.URL.Query().Get("resources") == "true" {
				st.AllocatedResources = a.AllocatedResources
			}
			out = append(out, st)
		}
		s.mu.Unlock()
		s.reply(w, out)
	case p == "/v1/evaluations":
		s.mu.Lock()
		var out []*api.Evaluation
		for _, e := range s.evals {
			if st := r.URL.Query().Get("status"); st != "" && e.Status != st {
				continue
			}
			out = append(out, e)
		}
		s.mu.Unlock()
		s.reply(w, out)
	default:
		http.Error(w, "fake nomad: no route "+p, http.StatusNotFound)
	}
}

func (s *Server) reply(w http.ResponseWriter, v any) {
	s.mu.Lock()
	idx := s.index
	s.mu.Unlock()
	w.Header().Set("X-Nomad-Index", strconv.FormatUint(idx, 10))
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

func (s *Server) stream(w http.ResponseWriter, r *http.Request) {
	from, _ := strconv.ParseUint(r.URL.Query().Get("index"), 10, 64)
	fl, _ := w.(http.Flusher)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	if fl != nil {
		fl.Flush()
	}
	done := make(chan struct{})
	s.mu.Lock()
	s.streams[done] = true
	s.mu.Unlock()
	go func() {
		<-r.Context().Done()
		s.mu.Lock()
		s.wake.Broadcast()
		s.mu.Unlock()
	}()
	next := from
	beat := s.startHeartbeat(r.Context())
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		select {
		case <-done:
			return
		default:
		}
		if r.Context().Err() != nil {
			delete(s.streams, done)
			return
		}
		if s.stalled {
			// A stream that sends nothing more, heartbeats included (a dead forwarder).
			s.wake.Wait()
			continue
		}
		if beat.due() {
			s.mu.Unlock()
			_, err := w.Write([]byte("{}\n"))
			if fl != nil {
				fl.Flush()
			}
			s.mu.Lock()
			if err != nil {
				delete(s.streams, done)
				return
			}
			continue
		}
		// Events are appended in index order: find the first one due instead of scanning a
		// long buffer on every wake-up.
		first := sort.Search(len(s.events), func(i int) bool { return s.events[i].index >= next })
		batch := append([]event(nil), s.events[first:]...)
		if len(batch) == 0 {
			s.wake.Wait()
			continue
		}
		next = batch[len(batch)-1].index + 1
		s.mu.Unlock()
		for _, e := range batch {
			if _, err := w.Write(e.line); err != nil {
				s.mu.Lock()
				delete(s.streams, done)
				return
			}
		}
		if fl != nil {
			fl.Flush()
		}
		s.mu.Lock()
	}
}

func (s *Server) nodeStats(w http.ResponseWriter, nodeID string) {
	s.mu.Lock()
	n, ok := s.nodes[nodeID]
	hs := &api.HostStats{}
	if ok {
		for _, g := range n.NodeResources.Devices {
			gs := &api.DeviceGroupStats{Vendor: g.Vendor, Type: g.Type, Name: g.Name, InstanceStats: map[string]*api.DeviceStats{}}
			for _, in := range g.Instances {
				gs.InstanceStats[in.ID] = &api.DeviceStats{Stats: &api.StatObject{Attributes: s.statsOf(in.ID)}, Timestamp: s.clock()}
			}
			hs.DeviceStats = append(hs.DeviceStats, gs)
		}
	}
	s.mu.Unlock()
	if !ok {
		http.Error(w, "node not found", http.StatusNotFound)
		return
	}
	s.reply(w, hs)
}

func (s *Server) statsOf(id string) map[string]*api.StatValue {
	attrs := map[string]*api.StatValue{}
	for k, v := range s.topo[id] {
		attrs[k] = v
	}
	if p, ok := s.power[id]; ok {
		pp := p
		attrs["Power usage"] = &api.StatValue{FloatNumeratorVal: &pp, Unit: "W"}
	}
	if j, ok := s.energy[id]; ok {
		jj := j
		attrs["energy"] = &api.StatValue{FloatNumeratorVal: &jj, Unit: "J"}
	}
	return attrs
}

// allocFile answers /v1/client/fs/readat and /cat with a file SetAllocFile put there, and
// errors as the real agent (2.0) sends them: status 200, the error as the body.
func (s *Server) allocFile(w http.ResponseWriter, r *http.Request, id string) {
	path := r.URL.Query().Get("path")
	s.mu.Lock()
	_, known := s.allocs[id]
	data, ok := s.files[id][path]
	s.mu.Unlock()
	// The real agent answers a failed read with status 200 and the error as the body.
	switch {
	case !known:
		_, _ = w.Write([]byte("Unknown allocation \"" + id + "\""))
	case !ok:
		_, _ = w.Write([]byte(missingFile(id, path)))
	default:
		if lim, err := strconv.Atoi(r.URL.Query().Get("limit")); err == nil && lim > 0 && lim < len(data) {
			data = data[:lim]
		}
		_, _ = w.Write(data)
	}
}

func (s *Server) allocStats(w http.ResponseWriter, id string) {
	s.mu.Lock()
	a, ok := s.allocs[id]
	u := &api.AllocResourceUsage{Tasks: map[string]*api.TaskResourceUsage{}}
	if ok {
		for task, tr := range a.AllocatedResources.Tasks {
			ru := &api.ResourceUsage{}
			for _, d := range tr.Devices {
				gs := &api.DeviceGroupStats{Vendor: d.Vendor, Type: d.Type, Name: d.Name, InstanceStats: map[string]*api.DeviceStats{}}
				for _, did := range d.DeviceIDs {
					gs.InstanceStats[did] = &api.DeviceStats{Stats: &api.StatObject{Attributes: s.statsOf(did)}, Timestamp: s.clock()}
				}
				ru.DeviceStats = append(ru.DeviceStats, gs)
			}
			u.Tasks[task] = &api.TaskResourceUsage{ResourceUsage: ru}
		}
	}
	s.mu.Unlock()
	if !ok {
		http.Error(w, "alloc not found", http.StatusNotFound)
		return
	}
	s.reply(w, u)
}

// registerHTTP is a register through Nomad's HTTP API, as a real agent (Nomad 2.0) takes it:
// the API ignores ParentID and Dispatched, so a re-registered periodic child loses its parent
// and a dispatched child is refused; a VersionTag in the job tags the new version. Callers
// hold s.mu.
func (s *Server) registerHTTP(req *api.JobRegisterRequest) (*api.JobRegisterResponse, error) {
	job := req.Job
	if job != nil && job.ID != nil {
		ns := "default"
		if job.Namespace != nil {
			ns = *job.Namespace
		}
		if old, ok := s.jobs[ns+"/"+*job.ID]; ok && old.Dispatched {
			if job.ParameterizedJob != nil {
				return nil, fmt.Errorf("cannot update non-parameterized job to being parameterized")
			}
			return nil, fmt.Errorf("field 'Dispatched' is read-only")
		}
		job.ParentID, job.Dispatched = nil, false
	}
	resp, err := s.register(req)
	if err == nil && job.VersionTag != nil {
		k := *job.Namespace + "/" + *job.ID
		s.tags[k] = append(s.tags[k], Tag{Version: *job.Version, Name: job.VersionTag.Name, Description: job.VersionTag.Description})
	}
	return resp, err
}

// register applies a JobRegisterRequest the way Nomad does: EnforceIndex compares with the
// JobModifyIndex. Callers hold s.mu.
func (s *Server) register(req *api.JobRegisterRequest) (*api.JobRegisterResponse, error) {
	job := req.Job
	if job == nil || job.ID == nil {
		return nil, fmt.Errorf("job is missing")
	}
	if job.Namespace == nil {
		def := "default"
		job.Namespace = &def
	}
	key := *job.Namespace + "/" + *job.ID
	old, exists := s.jobs[key]
	if req.EnforceIndex {
		switch {
		case req.JobModifyIndex == 0 && exists:
			return nil, fmt.Errorf("Enforcing job modify index 0: job already exists")
		case req.JobModifyIndex != 0 && !exists:
			return nil, fmt.Errorf("Enforcing job modify index %d: job does not exist", req.JobModifyIndex)
		case exists && *old.JobModifyIndex != req.JobModifyIndex:
			return nil, fmt.Errorf("Enforcing job modify index %d: job exists with conflicting job modify index: %d", req.JobModifyIndex, *old.JobModifyIndex)
		}
	}
	s.bump()
	idx := s.index
	v := uint64(0)
	if exists {
		v = *old.Version + 1
		job.CreateIndex = old.CreateIndex
	} else {
		job.CreateIndex = &idx
	}
	job.Version = &v
	job.ModifyIndex = &idx
	job.JobModifyIndex = &idx
	submit := time.Now().UnixNano()
	job.SubmitTime = &submit
	status := "pending"
	job.Status = &status
	for _, def := range []struct {
		p **string
		v string
	}{{&job.Type, "batch"}} {
		if *def.p == nil {
			val := def.v
			*def.p = &val
		}
	}
	if job.Priority == nil {
		p := 50
		job.Priority = &p
	}
	for _, tg := range job.TaskGroups {
		if tg.Count == nil {
			c := 1
			tg.Count = &c
		}
	}
	s.jobs[key] = job
	s.emit(api.TopicJob, "JobRegistered", *job.ID, map[string]any{"Job": job})
	evalID := fmt.Sprintf("eval-%d", idx)
	s.schedule(job, evalID)
	s.updateJobStatus(*job.Namespace, *job.ID)
	return &api.JobRegisterResponse{EvalID: evalID, EvalCreateIndex: idx, JobModifyIndex: idx}, nil
}

func holds(cs []*api.Constraint) bool {
	for _, c := range cs {
		if c.LTarget == "${meta.hetgpu.queue}" {
			return true
		}
	}
	return false
}

// schedule is a tiny scheduler: held groups get a blocked eval; others get allocations, on the
// pinned node(s) with the pinned instance IDs when pinned, else first fit. A job update
// changes a live allocation in place unless Nomad would replace it (Destructive); as on a
// real agent, a constraint change alone (the hold, a node pin elsewhere) leaves it running.
// As in Nomad's reconciler for batch jobs, terminal allocations of an older job version do
// not count towards the group's count: a new version re-runs a finished group. Callers hold
// s.mu.
func (s *Server) schedule(job *api.Job, evalID string) {
	ns := *job.Namespace
	if job.Stop != nil && *job.Stop {
		for _, a := range s.jobAllocs(ns, *job.ID) {
			if !terminal(a) {
				s.stopAlloc(a, api.AllocClientStatusComplete, "alloc is not needed since job was stopped")
			}
		}
		return
	}
	failed := map[string]*api.AllocationMetric{}
	mine := s.jobAllocs(ns, *job.ID)
	for _, tg := range job.TaskGroups {
		held := holds(job.Constraints) || holds(tg.Constraints)
		nodeIDs, devIDs := PinOf(tg)
		for _, a := range mine {
			if a.TaskGroup != *tg.Name || terminal(a) || *a.Job.JobModifyIndex == *job.JobModifyIndex {
				continue
			}
			if Destructive(a.Job, job, *tg.Name) {
				s.stopAlloc(a, api.AllocClientStatusComplete, "alloc is being updated due to job update")
				continue
			}
			a.Job = job // stored jobs are never changed in place (updateJobStatus)
			s.bump()
			a.ModifyIndex = s.index
			s.emitAlloc(a, "AllocationUpdated")
		}
		if held {
			failed[*tg.Name] = &api.AllocationMetric{NodesEvaluated: len(s.nodes), ConstraintFiltered: map[string]int{"${meta.hetgpu.queue} = waiting-for-hetgpu": len(s.nodes)}}
			continue
		}
		if !s.Schedule {
			continue
		}
		live := 0
		for _, a := range mine {
			if a.TaskGroup != *tg.Name {
				continue
			}
			if !terminal(a) || (ranSuccessfully(job, a) && *a.Job.Version == *job.Version) {
				live++
			}
		}
		for i := live; i < *tg.Count; i++ {
			if !s.place(job, tg, nodeIDs, devIDs) {
				m := &api.AllocationMetric{NodesEvaluated: len(s.nodes), DimensionExhausted: map[string]int{"devices: no devices match request": 1}}
				if len(nodeIDs) > 0 {
					m.ConstraintFiltered = map[string]int{fmt.Sprintf("${node.unique.id} = %s", strings.Join(nodeIDs, ",")): len(s.nodes)}
				}
				failed[*tg.Name] = m
				break
			}
		}
	}
	if len(failed) > 0 {
		s.bump()
		e := &api.Evaluation{ID: evalID + "-blocked", Namespace: ns, JobID: *job.ID, Status: api.EvalStatusBlocked,
			TriggeredBy: "queued-allocs", FailedTGAllocs: failed, JobModifyIndex: *job.JobModifyIndex, ModifyIndex: s.index}
		for id, old := range s.evals {
			if old.JobID == *job.ID && old.Namespace == ns && old.Status == api.EvalStatusBlocked {
				old.Status = api.EvalStatusCancelled
				delete(s.evals, id)
			}
		}
		s.evals[e.ID] = e
		s.emit(api.TopicEvaluation, "EvaluationUpdated", e.ID, map[string]any{"Evaluation": e})
	} else {
		for id, old := range s.evals {
			if old.JobID == *job.ID && old.Namespace == ns {
				delete(s.evals, id)
			}
		}
	}
}

// Destructive reports whether Nomad replaces a group's allocations when job old becomes job
// new rather than updating them in place: a change to the tasks, their drivers, config,
// environment, metadata (job, group and task meta combined) or resources, device requests and
// their constraints included. The ui block, constraints outside device requests, counts and
// version tags are not destructive by themselves (following scheduler/util.go tasksUpdated;
// the e2e tests check the cases hetgpu relies on against a real agent).
func Destructive(old, new *api.Job, group string) bool {
	a, b := findGroup(old, group), findGroup(new, group)
	if a == nil || b == nil || len(a.Tasks) != len(b.Tasks) {
		return true
	}
	for i := range a.Tasks {
		ta, tb := a.Tasks[i], b.Tasks[i]
		if ta.Name != tb.Name || ta.Driver != tb.Driver || ta.User != tb.User ||
			!sameJSON(ta.Config, tb.Config) || !sameJSON(ta.Env, tb.Env) || !sameJSON(ta.Resources, tb.Resources) ||
			!sameJSON(combinedMeta(old, a, ta), combinedMeta(new, b, tb)) {
			return true
		}
	}
	return false
}

func findGroup(job *api.Job, name string) *api.TaskGroup {
	for _, tg := range job.TaskGroups {
		if tg.Name != nil && *tg.Name == name {
			return tg
		}
	}
	return nil
}

func combinedMeta(job *api.Job, tg *api.TaskGroup, t *api.Task) map[string]string {
	m := map[string]string{}
	for _, src := range []map[string]string{job.Meta, tg.Meta, t.Meta} {
		for k, v := range src {
			m[k] = v
		}
	}
	return m
}

func sameJSON(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// PinOf is the node IDs and device instance IDs a group is pinned to: the RTargets of its
// ${node.unique.id} and ${device.ids} constraints, in their order.
func PinOf(tg *api.TaskGroup) (nodes, devs []string) {
	for _, c := range tg.Constraints {
		if c.LTarget == "${node.unique.id}" {
			nodes = append(nodes, strings.Split(c.RTarget, ",")...)
		}
	}
	for _, t := range tg.Tasks {
		if t.Resources == nil {
			continue
		}
		for _, d := range t.Resources.Devices {
			for _, c := range d.Constraints {
				if c.LTarget == "${device.ids}" {
					devs = append(devs, strings.Split(c.RTarget, ",")...)
				}
			}
		}
	}
	return nodes, devs
}

func terminal(a *api.Allocation) bool {
	return a.DesiredStatus != api.AllocDesiredStatusRun || a.ClientStatus == api.AllocClientStatusComplete ||
		a.ClientStatus == api.AllocClientStatusFailed || a.ClientStatus == api.AllocClientStatusLost
}

// place puts one allocation of a group on a node with enough free GPUs. Callers hold s.mu.
func (s *Server) place(job *api.Job, tg *api.TaskGroup, nodeIDs, devIDs []string) bool {
	perNode := map[string]bool{}
	for _, a := range s.byJob[*job.Namespace+"/"+*job.ID] {
		if !terminal(a) && a.TaskGroup == *tg.Name {
			perNode[a.NodeID] = true
		}
	}
	var ids []string
	if len(nodeIDs) > 0 {
		ids = append(ids, nodeIDs...)
	} else {
		ids = make([]string, 0, len(s.nodes))
		for id := range s.nodes {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	for _, nid := range ids {
		n, ok := s.nodes[nid]
		if !ok || n.Status != api.NodeStatusReady || n.SchedulingEligibility != api.NodeSchedulingEligible {
			continue
		}
		// GPUs held by the node's live allocations.
		used := map[string]bool{}
		for _, a := range s.byNode[nid] {
			if terminal(a) {
				continue
			}
			for _, t := range a.AllocatedResources.Tasks {
				for _, d := range t.Devices {
					for _, id := range d.DeviceIDs {
						used[id] = true
					}
				}
			}
		}
		if len(nodeIDs) > 1 && perNode[nid] {
			continue
		}
		tasks := map[string]*api.AllocatedTaskResources{}
		ok = true
		taken := map[string]bool{}
		for _, t := range tg.Tasks {
			tr := &api.AllocatedTaskResources{}
			if t.Resources != nil {
				for _, d := range t.Resources.Devices {
					want := 1
					if d.Count != nil {
						want = int(*d.Count)
					}
					g := n.NodeResources.Devices[0]
					var got []string
					for _, in := range g.Instances {
						if len(got) == want {
							break
						}
						if !in.Healthy || used[in.ID] || taken[in.ID] || (len(devIDs) > 0 && !contains(devIDs, in.ID)) {
							continue
						}
						got = append(got, in.ID)
						taken[in.ID] = true
					}
					if len(got) < want {
						ok = false
					}
					tr.Devices = append(tr.Devices, &api.AllocatedDeviceResource{Vendor: g.Vendor, Type: g.Type, Name: g.Name, DeviceIDs: got})
				}
			}
			tasks[t.Name] = tr
		}
		if !ok {
			continue
		}
		s.allocSeq++
		s.bump()
		a := &api.Allocation{
			ID: fmt.Sprintf("alloc-%04d", s.allocSeq), Namespace: *job.Namespace, JobID: *job.ID, TaskGroup: *tg.Name, NodeID: nid,
			DesiredStatus: api.AllocDesiredStatusRun, ClientStatus: api.AllocClientStatusRunning, Job: job, // never changed in place
			AllocatedResources: &api.AllocatedResources{Tasks: tasks}, TaskStates: map[string]*api.TaskState{},
			CreateIndex: s.index, ModifyIndex: s.index,
		}
		for _, t := range tg.Tasks {
			a.TaskStates[t.Name] = &api.TaskState{State: "running", StartedAt: time.Now()}
		}
		s.allocs[a.ID] = a
		s.byJob[*job.Namespace+"/"+*job.ID] = append(s.byJob[*job.Namespace+"/"+*job.ID], a)
		s.byNode[nid] = append(s.byNode[nid], a)
		s.emitAlloc(a, "PlanResult")
		return true
	}
	return false
}

// updateJobStatus sets pending / running / dead from the allocations. Callers hold s.mu.
// ranSuccessfully is Nomad's test for a batch allocation that needs no replacement: it
// ended complete and no task failed, whether or not it was told to stop (a batch task killed
// by a drain's deadline or an allocation stop counts as done, as a real agent shows). A
// service allocation always needs one unless it is told to run and runs.
func ranSuccessfully(job *api.Job, a *api.Allocation) bool {
	if a.ClientStatus != api.AllocClientStatusComplete {
		return false
	}
	if job.Type == nil || *job.Type != "batch" {
		return a.DesiredStatus == api.AllocDesiredStatusRun
	}
	for _, ts := range a.TaskStates {
		if ts.Failed {
			return false
		}
	}
	return true
}

func (s *Server) updateJobStatus(ns, id string) {
	j, ok := s.jobs[ns+"/"+id]
	if !ok {
		return
	}
	live, done, total := 0, 0, 0
	for _, a := range s.byJob[ns+"/"+id] {
		total++
		if !terminal(a) {
			live++
		} else if ranSuccessfully(j, a) && *a.Job.Version == *j.Version {
			done++
		}
	}
	want := 0
	for _, tg := range j.TaskGroups {
		want += *tg.Count
	}
	st := "pending"
	switch {
	case live > 0:
		st = "running"
	case (done >= want && want > 0) || (j.Stop != nil && *j.Stop):
		st = "dead"
	}
	if st != *j.Status {
		// A new object, as Nomad's state store writes one: a stored job is never changed in
		// place, so allocations share the version they run (see place) and reads need no copy.
		cp := *j
		cp.Status = &st
		s.bump()
		idx := s.index
		cp.ModifyIndex = &idx
		s.jobs[ns+"/"+id] = &cp
		s.emit(api.TopicJob, "JobRegistered", id, map[string]any{"Job": &cp})
	}
}

// replyCopy answers m[key] as it is now (encoded under the lock), or 404 with notFound.
func replyCopy[T any](s *Server, w http.ResponseWriter, m map[string]*T, key, notFound string) {
	s.mu.Lock()
	v, ok := m[key]
	var data []byte
	if ok {
		var err error
		if data, err = json.Marshal(v); err != nil {
			panic(err)
		}
	}
	idx := s.index
	s.mu.Unlock()
	if !ok {
		http.Error(w, notFound, http.StatusNotFound)
		return
	}
	w.Header().Set("X-Nomad-Index", strconv.FormatUint(idx, 10))
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(append(data, '\n'))
}

// missingFile is the real agent's answer to reading a file an allocation's directory does
// not hold.
func missingFile(allocID, path string) string {
	return "stat /var/lib/nomad/alloc/" + allocID + "/" + path + ": no such file or directory"
}
