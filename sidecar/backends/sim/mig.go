package sim

import (
	"fmt"
	"strings"

	"github.com/hetgpu/hetgpu/model/gpuspec"
)

// MIG slices in the simulator mirror the live path: ":mig=a100/3g.20gb+3g.20gb" after the
// cluster name splits every GPU of type a100 into the listed slices. Each slice profile is a GPU
// type of its own (gpuspec.MIGType, "a100-mig-3g.20gb") that the predictor and the placement see
// as on a live client with MIG devices. A slice runs a single-GPU job at the parent's throughput
// times gpuspec.MIGSpeedShare (half its SM share, half its memory share) and draws the parent's
// idle and maximum power times its SM share. A job fits a slice when it ran (throughput > 0) on
// a measured GPU type with no more memory than the slice; multi-GPU jobs never run on slices and
// slices are never shared (the device plugin never offers slots of a MIG GPU).
//
// The slices of one profile on a node are modelled as a node of their own ("a100-0" keeps its
// whole GPUs if any remain; "a100-mig-3g.20gb-0" holds its 3g.20gb slices): only single-slice
// jobs run there, for which the node does not matter.

// minMIGSliceGiB is the smallest slice the simulator accepts: the bundled throughput table
// measured its job types on GPUs of 12 GiB and more, so whether a job fits a smaller slice is
// not known.
const minMIGSliceGiB = 12

// MIGSplit is the ":mig=" option: GPUs of Parent split into Profiles.
type MIGSplit struct {
	Parent   string
	Profiles []string
}

// String is the option's value ("a100/3g.20gb+3g.20gb").
func (m MIGSplit) String() string { return m.Parent + "/" + strings.Join(m.Profiles, "+") }

// cutMIG splits ":mig=PARENT/PROFILE+PROFILE" off a cluster reference.
func cutMIG(ref string) (string, *MIGSplit, error) {
	i := strings.Index(ref, ":mig=")
	if i < 0 {
		return ref, nil, nil
	}
	rest := ref[i+len(":mig="):]
	val, tail, _ := strings.Cut(rest, ":")
	m, err := parseMIGSplit(val)
	if err != nil {
		return "", nil, fmt.Errorf("cluster %q: %w", ref, err)
	}
	out := ref[:i]
	if tail != "" {
		out += ":" + tail
	}
	return out, m, nil
}

func parseMIGSplit(val string) (*MIGSplit, error) {
	parent, profs, ok := strings.Cut(val, "/")
	bad := func(why string) error {
		return fmt.Errorf("mig = %q: %s, expected PARENT/PROFILE+PROFILE with a MIG-capable parent type (%s), e.g. a100/3g.20gb+3g.20gb", val, why,
			strings.Join(gpuspec.MIGParents(), ", "))
	}
	if !ok || parent == "" || profs == "" {
		return nil, bad("no parent type or profiles")
	}
	parent = strings.ToLower(parent)
	m := &MIGSplit{Parent: parent}
	var types []string
	for _, p := range strings.Split(profs, "+") {
		p = strings.ToLower(strings.TrimSpace(p))
		typ, ok := gpuspec.MIGTypeFor(parent, p)
		if !ok {
			return nil, bad(fmt.Sprintf("profile %q of parent %q is not a MIG profile", p, parent))
		}
		if gib, _ := gpuspec.MIGSliceGiB(typ); gib < minMIGSliceGiB {
			return nil, bad(fmt.Sprintf("profile %q holds less than %d GiB (whether a job type fits is not known)", p, minMIGSliceGiB))
		}
		types = append(types, typ)
		m.Profiles = append(m.Profiles, p)
	}
	if use, _ := gpuspec.MIGLayout(types); !use.Fits() {
		return nil, bad(fmt.Sprintf("the profiles need more than one GPU's %d compute or %d memory slices", gpuspec.MIGComputeSlices, gpuspec.MIGMemorySlices))
	}
	return m, nil
}

// withMIG returns the spec with every GPU of m.Parent split into m.Profiles.
func (s *Spec) withMIG(m *MIGSplit) (*Spec, error) {
	if m == nil {
		return s, nil
	}
	c := *s
	c.Classes = nil
	found := false
	for _, nc := range s.Classes {
		if nc.GPUType != m.Parent {
			c.Classes = append(c.Classes, nc)
			continue
		}
		found = true
		per := map[string]int{}
		var order []string
		for _, p := range m.Profiles {
			if per[p] == 0 {
				order = append(order, p)
			}
			per[p]++
		}
		for _, p := range order {
			typ, _ := gpuspec.MIGTypeFor(m.Parent, p)
			c.Classes = append(c.Classes, NodeClass{Name: nc.Name + "-mig-" + p, GPUName: nc.GPUName + " MIG " + p,
				GPUType: typ, GPUsPerNode: nc.GPUsPerNode * per[p], Count: nc.Count, Interconnect: "pcie"})
		}
	}
	if !found {
		return nil, fmt.Errorf("cluster %s: mig = %q: the cluster has no GPUs of type %q (it has %s)", s.Name, m.String(), m.Parent,
			strings.Join(s.GPUTypes(), ", "))
	}
	c.MIG = m
	c.Name = fmt.Sprintf("%s:mig=%s", s.Name, m.String())
	return &c, nil
}

// gpuSpecOf is the datasheet of a node class's GPU type; a slice gets its parent's power times
// its SM share and its own memory.
func gpuSpecOf(tab *gpuspec.Table, typ string) (gpuspec.Spec, bool) {
	sp, ok := tab.Lookup(typ)
	if !ok {
		return sp, false
	}
	if _, sm, mem, isMIG := gpuspec.MIGShare(typ); isMIG {
		gib, _ := gpuspec.MIGSliceGiB(typ)
		sp.Type, sp.MemoryGiB = typ, gib
		sp.IdleW, sp.TDPW = sp.IdleW*sm, sp.TDPW*sm
		sp.MemBandwidthGBps *= mem
		sp.FP32TFLOPS, sp.FP16TensorTFLOPS = sp.FP32TFLOPS*sm, sp.FP16TensorTFLOPS*sm
	}
	return sp, true
}

// migRate is a job type's steps/s on n slices of a MIG type (ok false when typ is not one): the
// parent's single-GPU rate times the slice's speed share when the job fits the slice, else 0.
func (e *Engine) migRate(jobType, typ string, n int) (float64, bool) {
	parent, _, _, ok := gpuspec.MIGShare(typ)
	if !ok {
		return 0, false
	}
	if n != 1 || !e.fitsSlice(jobType, typ) {
		return 0, true
	}
	share, _ := gpuspec.MIGSpeedShare(typ)
	return e.rate(jobType, parent, 1, false) * share, true
}

// fitsSlice: the job ran on a measured GPU type with no more memory than the slice.
func (e *Engine) fitsSlice(jobType, typ string) bool {
	gib, ok := gpuspec.MIGSliceGiB(typ)
	if !ok {
		return false
	}
	for _, g := range e.cfg.Throughput.GPUTypes() {
		v, ok := e.cfg.Throughput.Measured(jobType, g, 1)
		sp, sok := e.cfg.GPUSpecs.Lookup(g)
		if ok && v > 0 && sok && sp.MemoryGiB <= gib {
			return true
		}
	}
	return false
}

// isMIGNode reports whether a node's GPUs are MIG slices.
func (n *simNode) isMIG() bool {
	_, ok := gpuspec.MIGType(n.gpuType)
	return ok
}
