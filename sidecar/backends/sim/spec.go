package sim

import (
	"bytes"
	"embed"
	"encoding/csv"
	"fmt"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/hashicorp/hcl/v2/gohcl"
	"github.com/hashicorp/hcl/v2/hclparse"

	"github.com/hetgpu/hetgpu/model/gpuspec"
)

// A cluster spec is an HCL file:
//
//	name        = "modern-mix"          # required
//	description = "..."                 # optional
//
//	network {                           # optional: how nodes talk to each other
//	  kind                  = "ethernet"  # "ethernet" or "infiniband" (informational)
//	  bandwidth_gbps        = 100
//	  cross_node_efficiency = 0.75        # throughput factor of a job spread over nodes
//	}
//
//	power {                             # optional: the power model (see Config)
//	  alpha     = 0.7                   # exponent of idle + (TDP - idle) * util^alpha
//	  busy_util = 0.9                   # utilisation of a GPU running one well-scaling job
//	}
//
//	node_class "h100" {                 # one block per kind of node; the label names the class
//	  gpu           = "NVIDIA H100 80GB HBM3"  # NVML product name; the GPU type is derived from it
//	  gpus_per_node = 8
//	  count         = 2                  # number of such nodes
//	  interconnect  = "nvlink"           # "nvlink" or "pcie" (default "pcie")
//	}
//
// The interconnect shows in snapshots (NVLink peers of each GPU) for placement to weigh; within a
// node the simulator uses the throughput table's multi-GPU measurements as they are.
//
// Cross-node slowdown: a job spread over several nodes runs at Gavel's measured
// "unconsolidated" throughput where Gavel measured it (capped at the consolidated figure), else at
// the consolidated throughput times cross_node_efficiency. The default 0.75 is the median ratio of
// unconsolidated to consolidated throughput in Gavel's V100 and P100 measurements (0.72 and 0.76).

// DefaultCrossNodeEfficiency is the throughput factor of jobs spread over nodes (see above).
const DefaultCrossNodeEfficiency = 0.75

// Spec is a parsed cluster spec.
type Spec struct {
	Name        string
	Description string
	Network     Network
	Power       PowerModel
	Classes     []NodeClass
	// Slots is how many single-GPU jobs may share one GPU (sharing.go): 0 or 1 none, 2 two
	// (":slots=2" after the cluster name).
	Slots int
	// MIG, when set, splits every GPU of one type into MIG slices (mig.go, ":mig=a100/3g.20gb+3g.20gb").
	MIG *MIGSplit
}

// Network describes the links between nodes.
type Network struct {
	Kind                string
	BandwidthGbps       float64
	CrossNodeEfficiency float64
}

// PowerModel parameterises gpuspec.Spec.Power.
type PowerModel struct {
	// Alpha is the exponent of the utilisation curve (default gpuspec.PowerAlpha, 0.7).
	Alpha float64
	// BusyUtil is the utilisation of a GPU fully used by one job that scales perfectly (default
	// gpuspec.BusyUtil, 0.9: typical SM activity of data-parallel training). See Engine docs for how it is scaled.
	BusyUtil float64
}

// NodeClass is one kind of node.
type NodeClass struct {
	Name         string
	GPUName      string
	GPUType      string
	GPUsPerNode  int
	Count        int
	Interconnect string
}

type specFile struct {
	Name        string        `hcl:"name"`
	Description string        `hcl:"description,optional"`
	Network     *networkBlock `hcl:"network,block"`
	Power       *powerBlock   `hcl:"power,block"`
	Classes     []classBlock  `hcl:"node_class,block"`
}

type networkBlock struct {
	Kind                string   `hcl:"kind,optional"`
	BandwidthGbps       float64  `hcl:"bandwidth_gbps,optional"`
	CrossNodeEfficiency *float64 `hcl:"cross_node_efficiency,optional"`
}

type powerBlock struct {
	Alpha    *float64 `hcl:"alpha,optional"`
	BusyUtil *float64 `hcl:"busy_util,optional"`
}

type classBlock struct {
	Name         string `hcl:"name,label"`
	GPU          string `hcl:"gpu"`
	GPUsPerNode  int    `hcl:"gpus_per_node"`
	Count        int    `hcl:"count"`
	Interconnect string `hcl:"interconnect,optional"`
}

//go:embed clusters
var clustersFS embed.FS

// BundledClusters lists the names ParseClusterRef accepts without a file.
func BundledClusters() []string { return []string{"gavel-108", "modern-mix", "pai-2020"} }

// ParseSpec parses an HCL cluster spec; file names it in errors.
func ParseSpec(src []byte, file string) (*Spec, error) {
	p := hclparse.NewParser()
	f, diags := p.ParseHCL(src, file)
	if diags.HasErrors() {
		return nil, fmt.Errorf("cluster spec: %s", diags.Error())
	}
	var sf specFile
	if diags := gohcl.DecodeBody(f.Body, nil, &sf); diags.HasErrors() {
		return nil, fmt.Errorf("cluster spec: %s", diags.Error())
	}
	s := &Spec{Name: sf.Name, Description: sf.Description,
		Network: Network{Kind: "ethernet", CrossNodeEfficiency: DefaultCrossNodeEfficiency},
		Power:   PowerModel{Alpha: gpuspec.PowerAlpha, BusyUtil: gpuspec.BusyUtil}}
	if s.Name == "" {
		return nil, fmt.Errorf("cluster spec %s: field name is empty, expected the cluster's name", file)
	}
	if sf.Network != nil {
		if sf.Network.Kind != "" {
			s.Network.Kind = sf.Network.Kind
		}
		if k := s.Network.Kind; k != "ethernet" && k != "infiniband" {
			return nil, fmt.Errorf("cluster spec %s: network.kind = %q, expected \"ethernet\" or \"infiniband\"", file, k)
		}
		if sf.Network.BandwidthGbps < 0 {
			return nil, fmt.Errorf("cluster spec %s: network.bandwidth_gbps = %v, expected a non-negative number", file, sf.Network.BandwidthGbps)
		}
		s.Network.BandwidthGbps = sf.Network.BandwidthGbps
		if e := sf.Network.CrossNodeEfficiency; e != nil {
			if !(*e > 0 && *e <= 1) {
				return nil, fmt.Errorf("cluster spec %s: network.cross_node_efficiency = %v, expected a number in (0, 1]", file, *e)
			}
			s.Network.CrossNodeEfficiency = *e
		}
	}
	if sf.Power != nil {
		if a := sf.Power.Alpha; a != nil {
			if !(*a > 0 && *a <= 4) {
				return nil, fmt.Errorf("cluster spec %s: power.alpha = %v, expected a number in (0, 4]", file, *a)
			}
			s.Power.Alpha = *a
		}
		if u := sf.Power.BusyUtil; u != nil {
			if !(*u > 0 && *u <= 1) {
				return nil, fmt.Errorf("cluster spec %s: power.busy_util = %v, expected a number in (0, 1]", file, *u)
			}
			s.Power.BusyUtil = *u
		}
	}
	if len(sf.Classes) == 0 {
		return nil, fmt.Errorf("cluster spec %s: no node_class blocks, expected at least one", file)
	}
	seen := map[string]bool{}
	for _, c := range sf.Classes {
		where := fmt.Sprintf("cluster spec %s: node_class %q", file, c.Name)
		if c.Name == "" || seen[c.Name] {
			return nil, fmt.Errorf("%s: label must be non-empty and unique", where)
		}
		seen[c.Name] = true
		typ := gpuspec.Canonical(c.GPU)
		if typ == "" {
			return nil, fmt.Errorf("%s: gpu = %q, expected an NVIDIA product name of a known type (%s)", where, c.GPU,
				strings.Join(gpuspec.Default().Types(), ", "))
		}
		if c.GPUsPerNode <= 0 || c.GPUsPerNode > 64 {
			return nil, fmt.Errorf("%s: gpus_per_node = %d, expected 1..64", where, c.GPUsPerNode)
		}
		if c.Count <= 0 || c.Count > 1_000_000 {
			return nil, fmt.Errorf("%s: count = %d, expected 1..1000000", where, c.Count)
		}
		ic := c.Interconnect
		if ic == "" {
			ic = "pcie"
		}
		if ic != "pcie" && ic != "nvlink" {
			return nil, fmt.Errorf("%s: interconnect = %q, expected \"pcie\" or \"nvlink\"", where, ic)
		}
		s.Classes = append(s.Classes, NodeClass{Name: c.Name, GPUName: c.GPU, GPUType: typ,
			GPUsPerNode: c.GPUsPerNode, Count: c.Count, Interconnect: ic})
	}
	return s, nil
}

// TotalGPUs counts the cluster's GPUs.
func (s *Spec) TotalGPUs() int {
	n := 0
	for _, c := range s.Classes {
		n += c.GPUsPerNode * c.Count
	}
	return n
}

// GPUTypes lists the cluster's GPU types, sorted.
func (s *Spec) GPUTypes() []string {
	m := map[string]bool{}
	for _, c := range s.Classes {
		m[c.GPUType] = true
	}
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Scale returns a copy with every class's node count multiplied by f (rounded, at least one
// node per class): how pai-2020 is scaled down to a size a laptop simulates quickly.
func (s *Spec) Scale(f float64) (*Spec, error) {
	if !(f > 0) || math.IsInf(f, 0) {
		return nil, fmt.Errorf("cluster %s: scale = %v, expected a positive number", s.Name, f)
	}
	c := *s
	c.Classes = append([]NodeClass(nil), s.Classes...)
	for i := range c.Classes {
		n := int(math.Round(float64(c.Classes[i].Count) * f))
		c.Classes[i].Count = max(1, n)
	}
	c.Name = fmt.Sprintf("%s:scale=%g", s.Name, f)
	return &c, nil
}

// LoadSpec resolves --cluster: a bundled name ("modern-mix"), a file path, either optionally
// followed by ":scale=F" to scale node counts (e.g. "pai-2020:scale=0.05").
func LoadSpec(ref string) (*Spec, error) {
	ref, mig, err := cutMIG(ref)
	if err != nil {
		return nil, err
	}
	ref, slots, err := cutSlots(ref)
	if err != nil {
		return nil, err
	}
	s, err := loadSpec(ref)
	if err != nil {
		return nil, err
	}
	if s, err = s.withMIG(mig); err != nil {
		return nil, err
	}
	return s.withSlots(slots)
}

func loadSpec(ref string) (*Spec, error) {
	name, opts, _ := strings.Cut(ref, ":scale=")
	var s *Spec
	var err error
	switch name {
	case "gavel-108", "modern-mix":
		src, rerr := clustersFS.ReadFile("clusters/" + name + ".hcl")
		if rerr != nil {
			return nil, fmt.Errorf("bundled cluster %s: %w", name, rerr)
		}
		s, err = ParseSpec(src, name+".hcl")
	case "pai-2020":
		s, err = PAI2020()
	default:
		src, rerr := os.ReadFile(name)
		if rerr != nil {
			return nil, fmt.Errorf("cluster %q: not a bundled cluster (%s) and not a readable file: %w",
				name, strings.Join(BundledClusters(), ", "), rerr)
		}
		s, err = ParseSpec(src, name)
	}
	if err != nil {
		return nil, err
	}
	if opts != "" {
		f, perr := strconv.ParseFloat(opts, 64)
		if perr != nil {
			return nil, fmt.Errorf("cluster %q: scale = %q, expected a positive number", ref, opts)
		}
		return s.Scale(f)
	}
	return s, nil
}

// paiGPUNames maps PAI's gpu_type column to NVML product names.
var paiGPUNames = map[string]string{
	"P100":    "Tesla P100-PCIE-16GB",
	"T4":      "Tesla T4",
	"V100":    "Tesla V100-SXM2-16GB",
	"V100M32": "Tesla V100-SXM2-32GB",
}

// PAI2020 builds the Alibaba PAI 2020 GPU cluster from its machine list: one node class per
// (gpu_type, GPUs per machine). MISC machines (assorted older GPUs of unknown model) and CPU-only
// machines are left out; what remains is 798 x 2 P100, 497 x 2 T4, 104 x 8 V100 and
// 135 x 8 V100-32GB = 4,502 GPUs.
func PAI2020() (*Spec, error) {
	data, err := clustersFS.ReadFile("clusters/alibaba-pai-2020-machines.csv")
	if err != nil {
		return nil, fmt.Errorf("bundled cluster pai-2020: %w", err)
	}
	rows, err := csv.NewReader(bytes.NewReader(data)).ReadAll()
	if err != nil {
		return nil, fmt.Errorf("bundled cluster pai-2020: %w", err)
	}
	type k struct {
		typ  string
		gpus int
	}
	counts := map[k]int{}
	for i, r := range rows[1:] {
		if len(r) != 5 {
			return nil, fmt.Errorf("alibaba-pai-2020-machines.csv:%d: %d fields, expected 5", i+2, len(r))
		}
		g, err := strconv.Atoi(r[4])
		if err != nil {
			return nil, fmt.Errorf("alibaba-pai-2020-machines.csv:%d: field cap_gpu = %q, expected an integer", i+2, r[4])
		}
		if _, ok := paiGPUNames[r[1]]; !ok || g == 0 {
			continue
		}
		counts[k{r[1], g}]++
	}
	keys := make([]k, 0, len(counts))
	for kk := range counts {
		keys = append(keys, kk)
	}
	sort.Slice(keys, func(a, b int) bool {
		if keys[a].typ != keys[b].typ {
			return keys[a].typ < keys[b].typ
		}
		return keys[a].gpus < keys[b].gpus
	})
	s := &Spec{Name: "pai-2020", Description: "Alibaba PAI 2020 GPU cluster (MISC and CPU machines left out)",
		Network: Network{Kind: "ethernet", BandwidthGbps: 25, CrossNodeEfficiency: DefaultCrossNodeEfficiency},
		Power:   PowerModel{Alpha: gpuspec.PowerAlpha, BusyUtil: gpuspec.BusyUtil}}
	for _, kk := range keys {
		ic := "pcie"
		if kk.gpus == 8 {
			ic = "nvlink"
		}
		s.Classes = append(s.Classes, NodeClass{Name: strings.ToLower(kk.typ), GPUName: paiGPUNames[kk.typ],
			GPUType: gpuspec.Canonical(paiGPUNames[kk.typ]), GPUsPerNode: kk.gpus, Count: counts[kk], Interconnect: ic})
	}
	return s, nil
}
