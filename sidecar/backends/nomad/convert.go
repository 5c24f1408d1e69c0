package nomad

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/hetgpu/hetgpu/model/annot"
	"github.com/hetgpu/hetgpu/model/cluster"
	"github.com/hetgpu/hetgpu/model/gpuspec"
)

// topology is what the hetgpu device plugin publishes per instance in its stats.
type topology struct {
	peers  []string
	numa   int
	pcieSw string
}

// convertNode maps a Nomad node (from Nodes().Info, JSON-decoded so device attributes are
// intact) to the snapshot's node.
func convertNode(n *api.Node, topo map[string]topology) cluster.Node {
	out := cluster.Node{
		ID:         n.ID,
		Name:       n.Name,
		Datacenter: n.Datacenter,
		Pool:       n.NodePool,
		Class:      n.NodeClass,
		Status:     n.Status,
		Eligible:   n.SchedulingEligibility == api.NodeSchedulingEligible,
		Draining:   n.DrainStrategy != nil || n.Drain,
		Attributes: n.Attributes,
		Meta:       n.Meta,
	}
	if out.Pool == "" {
		out.Pool = "default"
	}
	nvlink := false
	if n.NodeResources != nil {
		for _, d := range n.NodeResources.Devices {
			if d == nil {
				continue
			}
			g := cluster.DeviceGroup{
				Vendor:     d.Vendor,
				Type:       d.Type,
				Name:       d.Name,
				Attributes: map[string]cluster.Attribute{},
				GPUType:    gpuspec.TypeOf(d.Name), // a MIG slice is a type of its own
			}
			for k, a := range d.Attributes {
				if a != nil {
					g.Attributes[k] = convertAttr(a)
				}
			}
			if pm, ok := g.Attributes["parent_model"]; ok && pm.String != nil && d.Type == annot.SlotType {
				// A GPU slot performs as a share of its parent GPU's type.
				g.GPUType = gpuspec.Canonical(*pm.String)
			}
			if v, ok := g.Attributes["nvlink_links"]; ok && v.Int != nil && *v.Int > 0 {
				nvlink = true
			}
			for _, inst := range d.Instances {
				if inst == nil {
					continue
				}
				i := cluster.Instance{ID: inst.ID, Healthy: inst.Healthy, HealthDescription: inst.HealthDescription, NUMANode: -1}
				if inst.Locality != nil {
					i.PCIBusID = inst.Locality.PciBusID
				}
				if t, ok := topo[inst.ID]; ok {
					i.NVLinkPeers, i.NUMANode, i.PCIeSwitch = t.peers, t.numa, t.pcieSw
					if len(t.peers) > 0 {
						nvlink = true
					}
				}
				g.Instances = append(g.Instances, i)
			}
			sort.Slice(g.Instances, func(a, b int) bool { return g.Instances[a].ID < g.Instances[b].ID })
			out.Devices = append(out.Devices, g)
		}
	}
	sort.Slice(out.Devices, func(a, b int) bool { return out.Devices[a].ID() < out.Devices[b].ID() })
	if nvlink {
		out.Interconnect = "nvlink"
	} else {
		out.Interconnect = "pcie"
	}
	return out
}

func convertAttr(a *api.Attribute) cluster.Attribute {
	return cluster.Attribute{Float: a.FloatVal, Int: a.IntVal, String: a.StringVal, Bool: a.BoolVal, Unit: a.Unit}
}

// parseTopology reads instance topology from device stats. The hetgpu device plugin
// publishes "nvlink_peers" (comma-separated instance IDs), "numa_node" and "pcie_switch";
// names are matched case-insensitively with spaces as underscores.
func parseTopology(s *api.StatObject) (topology, bool) {
	t := topology{numa: -1}
	if s == nil {
		return t, false
	}
	found := false
	for k, v := range s.Attributes {
		if v == nil {
			continue
		}
		switch strings.ReplaceAll(strings.ToLower(k), " ", "_") {
		case "nvlink_peers":
			if v.StringVal != nil {
				t.peers = splitList(*v.StringVal)
				found = true
			}
		case "numa_node":
			if f, ok := statNumber(v); ok {
				t.numa = int(f)
				found = true
			}
		case "pcie_switch":
			if v.StringVal != nil {
				t.pcieSw = *v.StringVal
				found = true
			}
		}
	}
	for _, nested := range s.Nested {
		if nt, ok := parseTopology(nested); ok {
			if len(t.peers) == 0 {
				t.peers = nt.peers
			}
			if t.numa < 0 {
				t.numa = nt.numa
			}
			if t.pcieSw == "" {
				t.pcieSw = nt.pcieSw
			}
			found = true
		}
	}
	return t, found
}

func statNumber(v *api.StatValue) (float64, bool) {
	switch {
	case v.FloatNumeratorVal != nil:
		return *v.FloatNumeratorVal, true
	case v.IntNumeratorVal != nil:
		return float64(*v.IntNumeratorVal), true
	case v.StringVal != nil:
		f, err := strconv.ParseFloat(*v.StringVal, 64)
		return f, err == nil
	}
	return 0, false
}

// powerW finds the instantaneous power draw in a device's stats, in watts.
func powerW(s *api.StatObject) (float64, bool) {
	if s == nil {
		return 0, false
	}
	for k, v := range s.Attributes {
		if v == nil {
			continue
		}
		name := strings.ReplaceAll(strings.ToLower(k), " ", "_")
		if name != "power_usage" && name != "power_draw" && name != "power" && name != "power_w" {
			continue
		}
		f, ok := statNumber(v)
		if !ok {
			continue
		}
		switch strings.ToLower(v.Unit) {
		case "mw":
			f /= 1000
		case "kw":
			f *= 1000
		}
		return f, true
	}
	for _, n := range s.Nested {
		if p, ok := powerW(n); ok {
			return p, true
		}
	}
	return 0, false
}

// groupRequest is a task group's GPU request as hetgpu places it.
type groupRequest struct {
	perAlloc    int
	count       int
	deviceName  string
	constraints []cluster.Constraint
	affinities  []cluster.Affinity
}

func readRequest(tg *api.TaskGroup) (groupRequest, error) {
	r := groupRequest{count: 1}
	if tg.Count != nil {
		r.count = *tg.Count
	}
	devs := gpuDevices(tg)
	if len(devs) == 0 {
		return r, fmt.Errorf("the group requests no GPU device (a device \"nvidia/gpu\" block with count >= 1)")
	}
	for _, d := range devs {
		n := 1
		if d.Count != nil {
			n = int(*d.Count)
		}
		r.perAlloc += n
		if r.deviceName == "" {
			r.deviceName = d.Name
		} else if r.deviceName != d.Name {
			// Several GPU requests must all be served from the one pinned device group, so
			// the most specific name wins; a conflict shows up as no feasible placement.
			if len(d.Name) > len(r.deviceName) {
				r.deviceName = d.Name
			}
		}
		for _, c := range d.Constraints {
			if c != nil && c.LTarget != DeviceIDsTarget {
				r.constraints = append(r.constraints, cluster.Constraint{LTarget: c.LTarget, RTarget: c.RTarget, Operand: c.Operand})
			}
		}
		for _, a := range d.Affinities {
			if a != nil {
				r.affinities = append(r.affinities, convertAffinity(a))
			}
		}
	}
	if r.perAlloc < 1 || r.count < 1 {
		return r, fmt.Errorf("the group asks for %d allocation(s) of %d GPU(s); hetgpu needs count >= 1 and at least one GPU", r.count, r.perAlloc)
	}
	return r, nil
}

func convertAffinity(a *api.Affinity) cluster.Affinity {
	w := int8(50)
	if a.Weight != nil {
		w = *a.Weight
	}
	return cluster.Affinity{LTarget: a.LTarget, RTarget: a.RTarget, Operand: a.Operand, Weight: w}
}

// errDispatched is why a held dispatched child cannot be decided for without Nomad's RPC
// (Config.RPC): the HTTP API refuses every update of a dispatched job ("field 'Dispatched' is
// read-only", seen on a real agent), so no pin through it can lift its hold.
var errDispatched = errors.New("Nomad's HTTP API refuses any update of a dispatched job and this sidecar has no RPC access to the servers (nomad.rpc_address), so hetgpu cannot lift the hold the child inherited from its parameterized job; " +
	"give the sidecar the servers' RPC address, or remove the hold from the parameterized job (its children then run under plain Nomad, annotated and learned by hetgpu) and dispatch again")

// errDispatchedPayload is why a held dispatched child with a payload cannot be decided for:
// Nomad's servers refuse to register any job that carries a payload ("job can't be submitted
// with a payload, only dispatched", seen on a real agent over RPC), and a pin is a register.
var errDispatchedPayload = errors.New("Nomad refuses to register any job that carries a dispatch payload (nomad job dispatch's input), so no pin can lift the hold the child inherited from its parameterized job; " +
	"pass the child's inputs as meta (nomad job dispatch -meta key=value) instead of a payload, or remove the hold from the parameterized job")

// emptyPayload reports a dispatch payload that holds nothing. Nomad stores a child's payload
// snappy-compressed, so even a dispatch without one carries a block: its header, the
// uvarint length of the decoded data, is then 0.
func emptyPayload(p []byte) bool {
	n, k := binary.Uvarint(p)
	return len(p) == 0 || (k > 0 && n == 0)
}

// pendingJob converts one held group to the snapshot's job, as the backend can write it:
// a dispatched child is undecidable without the servers' RPC, or with a payload.
func (b *Backend) pendingJob(job *api.Job, tg *api.TaskGroup, submit time.Time) (cluster.Job, error) {
	out, err := pendingJob(job, tg, submit)
	switch {
	case err != nil || !job.Dispatched:
	case b.rpc == nil:
		return out, errDispatched
	case !emptyPayload(job.Payload):
		return out, errDispatchedPayload
	}
	return out, err
}

// pendingJob converts one held group to the snapshot's job. Errors are annotation or request
// problems that keep the job held.
func pendingJob(job *api.Job, tg *api.TaskGroup, submit time.Time) (cluster.Job, error) {
	ns := deref(job.Namespace, "default")
	out := cluster.Job{
		Namespace:  ns,
		ID:         deref(job.ID, ""),
		ParentID:   deref(job.ParentID, ""),
		Group:      deref(tg.Name, ""),
		Priority:   50,
		SubmitTime: submit,
	}
	if job.Priority != nil {
		out.Priority = *job.Priority
	}
	if job.JobModifyIndex != nil {
		out.JobModifyIndex = *job.JobModifyIndex
	}
	a, err := annot.Parse(job.Meta, tg.Meta, out.Group)
	if err != nil {
		return out, err
	}
	a.Enabled = true // the hold alone hands the group to hetgpu
	// The job's total work, an estimate of its runtime when it declares none (sidecar/stages/estimate).
	a.Steps = annot.Steps(job.Meta, tg.Meta, out.Group)
	req, err := readRequest(tg)
	if err != nil {
		return out, err
	}
	out.GPUs = req.perAlloc * req.count
	out.DeviceName = req.deviceName
	out.DeviceConstraints = req.constraints
	out.DeviceAffinities = req.affinities
	if req.count > 1 {
		// One allocation per node: a data-parallel group of N allocations spans N nodes.
		out.GPUsPerNode = req.perAlloc
		a.MaxNodes = req.count
	} else {
		a.MaxNodes = 1
	}
	out.Hetgpu = a
	// A preempted checkpointing group resumes: what it ran counts as attained service, and
	// the snapshot ranks it by what is left of its runtime (Backend.remaining).
	out.AttainedGPUSeconds = a.Ran.Seconds() * float64(out.GPUs)
	for _, c := range everyLevel(job.Constraints, tg.Constraints, tg.Tasks, func(t *api.Task) []*api.Constraint { return t.Constraints }) {
		if c == nil || isHoldC(c) {
			continue
		}
		out.Constraints = append(out.Constraints, cluster.Constraint{LTarget: c.LTarget, RTarget: c.RTarget, Operand: c.Operand})
	}
	for _, a := range everyLevel(job.Affinities, tg.Affinities, tg.Tasks, func(t *api.Task) []*api.Affinity { return t.Affinities }) {
		if a != nil {
			out.Affinities = append(out.Affinities, convertAffinity(a))
		}
	}
	// Nomad only considers nodes of the job's datacenters and node pool; say so explicitly.
	if dcs := job.Datacenters; len(dcs) > 0 && !(len(dcs) == 1 && dcs[0] == "*") {
		out.Constraints = append(out.Constraints, cluster.Constraint{LTarget: "${node.datacenter}", Operand: "regexp", RTarget: globsRegexp(dcs)})
	}
	pool := deref(job.NodePool, "")
	if pool == "" {
		pool = "default"
	}
	if pool != "all" {
		out.Constraints = append(out.Constraints, cluster.Constraint{LTarget: "${node.pool}", Operand: "=", RTarget: pool})
	}
	return out, nil
}

// everyLevel lists what a job, one of its groups and the group's tasks declare, in that order
// (Nomad applies a job's and a group's constraints and affinities to the group's tasks).
func everyLevel[T any](job, group []T, tasks []*api.Task, ofTask func(*api.Task) []T) []T {
	var out []T
	out = append(out, job...)
	out = append(out, group...)
	for _, t := range tasks {
		if t != nil {
			out = append(out, ofTask(t)...)
		}
	}
	return out
}

// globsRegexp turns Nomad datacenter globs ("dc*", "eu-?") into one anchored regexp.
func globsRegexp(globs []string) string {
	var parts []string
	for _, g := range globs {
		var b strings.Builder
		for _, r := range g {
			switch r {
			case '*':
				b.WriteString(".*")
			case '?':
				b.WriteString(".")
			default:
				b.WriteString(regexp.QuoteMeta(string(r)))
			}
		}
		parts = append(parts, b.String())
	}
	return "^(" + strings.Join(parts, "|") + ")$"
}

func deref[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}

func allocFromFull(a *api.Allocation) *allocRec {
	r := &allocRec{ID: a.ID, Namespace: a.Namespace, JobID: a.JobID, Group: a.TaskGroup, NodeID: a.NodeID,
		ClientStatus: a.ClientStatus, DesiredStatus: a.DesiredStatus, CreateIndex: a.CreateIndex, ModifyIndex: a.ModifyIndex}
	if a.Job != nil && a.Job.Version != nil {
		r.JobVersion = *a.Job.Version
	}
	r.Devices = gpuAllocated(a.AllocatedResources)
	r.Start, r.End, r.Failed = taskTimes(a.TaskStates)
	return r
}

func allocFromStub(a *api.AllocationListStub) *allocRec {
	r := &allocRec{ID: a.ID, Namespace: a.Namespace, JobID: a.JobID, Group: a.TaskGroup, NodeID: a.NodeID,
		JobVersion: a.JobVersion, ClientStatus: a.ClientStatus, DesiredStatus: a.DesiredStatus,
		CreateIndex: a.CreateIndex, ModifyIndex: a.ModifyIndex}
	r.Devices = gpuAllocated(a.AllocatedResources)
	r.Start, r.End, r.Failed = taskTimes(a.TaskStates)
	return r
}

func gpuAllocated(ar *api.AllocatedResources) []*api.AllocatedDeviceResource {
	if ar == nil {
		return nil
	}
	var out []*api.AllocatedDeviceResource
	names := slices.Sorted(maps.Keys(ar.Tasks))
	for _, n := range names {
		t := ar.Tasks[n]
		if t == nil {
			continue
		}
		for _, d := range t.Devices {
			if d != nil && d.Type == "gpu" {
				out = append(out, d)
			}
		}
	}
	return out
}

func taskTimes(ts map[string]*api.TaskState) (start, end time.Time, failed bool) {
	for _, s := range ts {
		if s == nil {
			continue
		}
		failed = failed || s.Failed
		if !s.StartedAt.IsZero() && (start.IsZero() || s.StartedAt.Before(start)) {
			start = s.StartedAt
		}
		if s.FinishedAt.After(end) {
			end = s.FinishedAt
		}
	}
	return start, end, failed
}
