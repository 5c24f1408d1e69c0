package dashboard

import (
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/hetgpu/hetgpu/model/cluster"
)

// GPU states on the fleet page.
const (
	StateFree        = "free"
	StateBusy        = "busy"
	StateShared      = "shared"
	StateUnhealthy   = "unhealthy"
	StateUnavailable = "unavailable" // node down, draining or ineligible
)

// FleetFilter selects GPUs: every non-empty field must match.
type FleetFilter struct {
	// GPUType is a canonical type key ("a100").
	GPUType string `json:"gpu_type,omitempty"`
	// Class is the node class.
	Class string `json:"class,omitempty"`
	// Health is "healthy" or "unhealthy".
	Health string `json:"health,omitempty"`
	// State is one of the GPU states (free, busy, shared, unhealthy, unavailable).
	State string `json:"state,omitempty"`
}

func (f FleetFilter) match(n *cluster.Node, g *FleetGPU) bool {
	switch {
	case f.GPUType != "" && !strings.EqualFold(f.GPUType, g.GPUType):
		return false
	case f.Class != "" && f.Class != n.Class:
		return false
	case f.Health == "healthy" && !g.Healthy, f.Health == "unhealthy" && g.Healthy:
		return false
	case f.State != "" && f.State != g.State:
		return false
	}
	return true
}

// Fleet is GET /v1/fleet: every node and GPU of the last round's snapshot with live readings
// where the backend reports them, and totals per GPU type.
type Fleet struct {
	// Time is the snapshot's time (the backend's clock); zero before the first round.
	Time    time.Time `json:"time"`
	Backend string    `json:"backend"`
	// NodeCount and GPUCount are the whole fleet's, whatever the filter.
	NodeCount int `json:"node_count"`
	GPUCount  int `json:"gpu_count"`
	// Readings is true when the backend reports live device readings (power, utilisation…).
	Readings bool        `json:"readings"`
	Filter   FleetFilter `json:"filter"`
	// Totals per GPU type over the GPUs the filter selects.
	Totals []TypeTotals `json:"totals"`
	Nodes  []FleetNode  `json:"nodes"`
	// GPUTypes and Classes are the values the filters can take.
	GPUTypes []string `json:"gpu_types"`
	Classes  []string `json:"classes"`
}

// TypeTotals sums one GPU type.
type TypeTotals struct {
	GPUType     string  `json:"gpu_type"`
	GPUs        int     `json:"gpus"`
	Free        int     `json:"free"`
	Busy        int     `json:"busy"`
	Unhealthy   int     `json:"unhealthy"`
	Unavailable int     `json:"unavailable"`
	PowerW      float64 `json:"power_w"`
	PowerLimitW float64 `json:"power_limit_w"`
	// MeanUtilPct over the GPUs that report utilisation.
	MeanUtilPct float64 `json:"mean_utilization_pct"`
	utilN       int
}

// FleetNode is one node with its GPUs.
type FleetNode struct {
	ID           string     `json:"id"`
	Name         string     `json:"name"`
	Class        string     `json:"class"`
	Datacenter   string     `json:"datacenter"`
	Pool         string     `json:"pool"`
	Status       string     `json:"status"`
	Eligible     bool       `json:"eligible"`
	Draining     bool       `json:"draining"`
	Interconnect string     `json:"interconnect,omitempty"`
	GPUs         []FleetGPU `json:"gpus"`
}

// FleetGPU is one GPU instance (or MIG slice).
type FleetGPU struct {
	ID      string `json:"id"`
	GPUType string `json:"gpu_type"`
	// Name is the device group's name ("NVIDIA A100-SXM4-40GB", "… MIG 3g.20gb").
	Name    string `json:"name"`
	MIG     bool   `json:"mig,omitempty"`
	Healthy bool   `json:"healthy"`
	Health  string `json:"health,omitempty"`
	State   string `json:"state"`
	// MemoryMiB and PowerLimitW are the device group's attributes (0 when not published).
	MemoryMiB   float64              `json:"memory_mib,omitempty"`
	PowerLimitW float64              `json:"power_limit_w,omitempty"`
	Stats       *cluster.DeviceStats `json:"stats,omitempty"`
	// Allocs hold the GPU (two when jobs share it).
	Allocs []AllocRef `json:"allocs,omitempty"`
}

// AllocRef is an allocation holding a GPU.
type AllocRef struct {
	ID        string    `json:"id"`
	Namespace string    `json:"namespace"`
	JobID     string    `json:"job_id"`
	Group     string    `json:"group"`
	Shared    bool      `json:"shared,omitempty"`
	Since     time.Time `json:"since,omitzero"`
}

// BuildFleet builds the fleet view of a snapshot; stats may be nil.
func BuildFleet(snap *cluster.Snapshot, stats map[string]cluster.DeviceStats, backend string, f FleetFilter) Fleet {
	fl := Fleet{Backend: backend, Filter: f, Readings: len(stats) > 0, Totals: []TypeTotals{}, Nodes: []FleetNode{},
		GPUTypes: []string{}, Classes: []string{}}
	if snap == nil {
		return fl
	}
	fl.Time = snap.Now
	holders := map[string][]AllocRef{}
	for _, a := range snap.Running {
		for _, id := range a.DeviceIDs {
			holders[id] = append(holders[id], AllocRef{ID: a.ID, Namespace: a.Namespace, JobID: a.JobID, Group: a.Group, Shared: a.Shared, Since: a.StartTime})
		}
	}
	totals := map[string]*TypeTotals{}
	types, classes := map[string]bool{}, map[string]bool{}
	for i := range snap.Nodes {
		n := &snap.Nodes[i]
		fn := FleetNode{ID: n.ID, Name: n.Name, Class: n.Class, Datacenter: n.Datacenter, Pool: n.Pool, Status: n.Status,
			Eligible: n.Eligible, Draining: n.Draining, Interconnect: n.Interconnect}
		hasGPU := false
		for _, g := range n.Devices {
			if g.Type != "gpu" {
				continue
			}
			for _, in := range g.Instances {
				hasGPU = true
				fl.GPUCount++
				gpu := FleetGPU{ID: in.ID, GPUType: g.GPUType, Name: g.Name, MIG: strings.Contains(g.Name, "MIG"),
					Healthy: in.Healthy, Health: in.HealthDescription, Allocs: holders[in.ID],
					MemoryMiB: attrFloat(g.Attributes["memory"]), PowerLimitW: attrFloat(g.Attributes["power_limit"])}
				if st, ok := stats[in.ID]; ok {
					gpu.Stats = &st
				}
				gpu.State = gpuState(n, &gpu)
				if gpu.GPUType != "" {
					types[gpu.GPUType] = true
				}
				if !f.match(n, &gpu) {
					continue
				}
				fn.GPUs = append(fn.GPUs, gpu)
				addTotals(totals, &gpu)
			}
		}
		if hasGPU {
			fl.NodeCount++
			if n.Class != "" {
				classes[n.Class] = true
			}
		}
		if len(fn.GPUs) > 0 {
			fl.Nodes = append(fl.Nodes, fn)
		}
	}
	for t := range types {
		fl.GPUTypes = append(fl.GPUTypes, t)
	}
	sort.Strings(fl.GPUTypes)
	for c := range classes {
		fl.Classes = append(fl.Classes, c)
	}
	sort.Strings(fl.Classes)
	for _, k := range slices.Sorted(maps.Keys(totals)) {
		t := totals[k]
		if t.utilN > 0 {
			t.MeanUtilPct /= float64(t.utilN)
		}
		fl.Totals = append(fl.Totals, *t)
	}
	return fl
}

func gpuState(n *cluster.Node, g *FleetGPU) string {
	switch {
	case !g.Healthy:
		return StateUnhealthy
	case len(g.Allocs) > 1 || len(g.Allocs) == 1 && g.Allocs[0].Shared:
		return StateShared
	case len(g.Allocs) == 1:
		return StateBusy
	case !n.Ready():
		return StateUnavailable
	}
	return StateFree
}

func addTotals(totals map[string]*TypeTotals, g *FleetGPU) {
	key := g.GPUType
	if key == "" {
		key = "unknown"
	}
	t := totals[key]
	if t == nil {
		t = &TypeTotals{GPUType: key}
		totals[key] = t
	}
	t.GPUs++
	switch g.State {
	case StateFree:
		t.Free++
	case StateBusy, StateShared:
		t.Busy++
	case StateUnhealthy:
		t.Unhealthy++
	case StateUnavailable:
		t.Unavailable++
	}
	limit := g.PowerLimitW
	if st := g.Stats; st != nil {
		if st.PowerW != nil {
			t.PowerW += *st.PowerW
		}
		if st.PowerLimitW != nil {
			limit = *st.PowerLimitW
		}
		if st.UtilPct != nil {
			t.MeanUtilPct += *st.UtilPct
			t.utilN++
		}
	}
	t.PowerLimitW += limit
}

// attrFloat reads a numeric device attribute; 0 when absent or not a number.
func attrFloat(a cluster.Attribute) float64 {
	switch {
	case a.Int != nil:
		return float64(*a.Int)
	case a.Float != nil:
		return *a.Float
	}
	return 0
}
