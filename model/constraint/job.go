package constraint

import (
	"fmt"
	"math"

	"github.com/hetgpu/hetgpu/model/cluster"
)

// Job is everything about one pending job's placement rules, compiled once per round and
// checked against many nodes, device groups and instances.
type Job struct {
	Device      string
	Nodes       []*Node
	Devices     []*Device
	NodeAff     []weighted[*Node]
	DeviceAff   []weighted[*Device]
	Distinct    bool
	DistinctBy  []DistinctProperty
	instanceIDs []*Device
}

type weighted[T any] struct {
	c T
	w float64
}

// DistinctProperty is a distinct_property constraint: at most Limit allocations of the job per
// value of the node target.
type DistinctProperty struct {
	Target string
	Limit  int
}

// CompileJob compiles a job's constraints and affinities. Any construct that cannot be
// evaluated faithfully is an error naming the constraint.
func CompileJob(j *cluster.Job) (*Job, error) {
	out := &Job{Device: j.DeviceName, Distinct: DistinctHosts(j.Constraints)}
	if j.DeviceName == "" {
		return nil, fmt.Errorf("job %s: device name is empty; expected \"gpu\", \"nvidia/gpu\" or \"nvidia/gpu/<model>\"", j.Key())
	}
	for _, c := range j.Constraints {
		n, err := CompileNode(c)
		if err != nil {
			return nil, fmt.Errorf("job %s constraint: %w", j.Key(), err)
		}
		out.Nodes = append(out.Nodes, n)
		if c.Operand == OpDistinctProp {
			lim, _ := DistinctLimit(c)
			out.DistinctBy = append(out.DistinctBy, DistinctProperty{Target: c.LTarget, Limit: lim})
		}
	}
	for _, c := range j.DeviceConstraints {
		d, err := CompileDevice(c)
		if err != nil {
			return nil, fmt.Errorf("job %s device constraint: %w", j.Key(), err)
		}
		out.Devices = append(out.Devices, d)
		if d.OnIDs() {
			out.instanceIDs = append(out.instanceIDs, d)
		}
	}
	for _, a := range j.Affinities {
		c := cluster.Constraint{LTarget: a.LTarget, RTarget: a.RTarget, Operand: a.Operand}
		if a.Operand == OpDistinctHosts || a.Operand == OpDistinctProp {
			return nil, fmt.Errorf("job %s affinity: %w", j.Key(), unsupported(c, "%s is not an affinity operator", a.Operand))
		}
		n, err := CompileNode(c)
		if err != nil {
			return nil, fmt.Errorf("job %s affinity: %w", j.Key(), err)
		}
		out.NodeAff = append(out.NodeAff, weighted[*Node]{n, float64(a.Weight)})
	}
	for _, a := range j.DeviceAffinities {
		d, err := CompileDevice(cluster.Constraint{LTarget: a.LTarget, RTarget: a.RTarget, Operand: a.Operand})
		if err != nil {
			return nil, fmt.Errorf("job %s device affinity: %w", j.Key(), err)
		}
		out.DeviceAff = append(out.DeviceAff, weighted[*Device]{d, float64(a.Weight)})
	}
	return out, nil
}

// NodeFeasible reports whether every node constraint holds on n (distinct_* are checked by the
// caller, who knows the job's other allocations).
func (j *Job) NodeFeasible(n *cluster.Node) bool {
	for _, c := range j.Nodes {
		if !c.Check(n) {
			return false
		}
	}
	return true
}

// GroupFeasible reports whether a device group serves the job's device request and meets every
// device constraint (Nomad's nodeDeviceMatches; ${device.ids} constraints apply here to the
// whole group's ID list and again per instance in InstanceAllowed).
func (j *Job) GroupFeasible(g *cluster.DeviceGroup) bool {
	if !MatchesRequest(j.Device, g) {
		return false
	}
	for _, c := range j.Devices {
		if !c.Check(g) {
			return false
		}
	}
	return true
}

// InstanceAllowed reports whether the job's ${device.ids} constraints admit instance id.
func (j *Job) InstanceAllowed(g *cluster.DeviceGroup, id string) bool {
	for _, c := range j.instanceIDs {
		if !c.InstanceAllowed(g, id) {
			return false
		}
	}
	return true
}

// PinsInstances reports whether the job restricts which instance IDs it may get.
func (j *Job) PinsInstances() bool { return len(j.instanceIDs) > 0 }

// NodeAffinity is Nomad's normalised node affinity score in [-1, 1]: the sum of matched
// weights over the sum of absolute weights; 0 without affinities.
func (j *Job) NodeAffinity(n *cluster.Node) float64 { return affinity(j.NodeAff, n) }

// DeviceAffinity is the same score for a device group.
func (j *Job) DeviceAffinity(g *cluster.DeviceGroup) float64 { return affinity(j.DeviceAff, g) }

func affinity[C interface{ Check(X) bool }, X any](affs []weighted[C], x X) float64 {
	var sum, tot float64
	for _, a := range affs {
		tot += math.Abs(a.w)
		if a.c.Check(x) {
			sum += a.w
		}
	}
	if tot == 0 {
		return 0
	}
	return sum / tot
}
