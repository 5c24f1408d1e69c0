package gpuspec

import (
	"slices"
	"strconv"
	"strings"
)

// MIG slices as GPU types. A MIG device ("NVIDIA A100-SXM4-40GB MIG 3g.20gb") is a GPU type of
// its own, "<parent type>-mig-<profile>" ("a100-mig-3g.20gb"): the predictor derives it from the
// parent's throughput and the slice's share of the GPU, and the placement treats it like any
// other type. The share of a profile "<g>g.<m>gb" is g of the parent's 7 compute slices and, by
// NVIDIA's layout (1g: 1, 2g: 2, 3g: 4, 4g: 4, 7g: 8 of 8 memory slices), part of its memory
// and memory bandwidth.

const migSep = "-mig-"

// MIG's slices of one GPU: every MIG-capable type has 7 compute slices and 8 memory slices.
const (
	MIGComputeSlices = 7
	MIGMemorySlices  = 8
)

// migParents are the types with MIG.
var migParents = map[string]bool{"a100": true, "h100": true, "h200": true}

// MIGParents are the MIG-capable types, sorted.
func MIGParents() []string {
	out := make([]string, 0, len(migParents))
	for p := range migParents {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}

// MIGTypeFor is the MIG type of a profile ("3g.20gb") of a parent type ("a100"):
// "a100-mig-3g.20gb"; ok is false when either is not one.
func MIGTypeFor(parent, profile string) (string, bool) {
	return MIGType(parent + migSep + profile)
}

// migMemSlices maps compute slices to memory slices (of 8) for the standard profiles.
var migMemSlices = map[int]int{1: 1, 2: 2, 3: 4, 4: 4, 7: 8}

// MIGType returns the type key of a MIG slice from a device name ("NVIDIA A100-SXM4-40GB MIG
// 3g.20gb") or a type key ("a100-mig-3g.20gb"); ok is false for anything else.
func MIGType(name string) (string, bool) {
	n := strings.ToLower(strings.TrimSpace(name))
	var parent, prof string
	if i := strings.Index(n, migSep); i >= 0 {
		parent, prof = n[:i], n[i+len(migSep):]
	} else if i := strings.Index(n, " mig "); i >= 0 {
		parent, prof = n[:i], strings.TrimSpace(n[i+len(" mig "):])
		if f := strings.Fields(prof); len(f) > 0 {
			prof = f[0]
		}
	} else {
		return "", false
	}
	p := Canonical(parent)
	if !migParents[p] {
		return "", false
	}
	if _, ok := migProfileSlices(prof); !ok {
		return "", false
	}
	return p + migSep + prof, true
}

// migProfileSlices reads the compute slices of "3g.20gb" (or "1g.10gb+me").
func migProfileSlices(prof string) (int, bool) {
	g, rest, ok := strings.Cut(prof, "g.")
	if !ok || !strings.Contains(rest, "gb") {
		return 0, false
	}
	n, err := strconv.Atoi(g)
	if err != nil {
		return 0, false
	}
	if _, ok := migMemSlices[n]; !ok {
		return 0, false
	}
	return n, true
}

// MIGShare returns a MIG type's parent type and the slice's share of the parent's SMs and of
// its memory (capacity and bandwidth).
func MIGShare(typ string) (parent string, sm, mem float64, ok bool) {
	t, ok := MIGType(typ)
	if !ok {
		return "", 0, 0, false
	}
	parent, prof, _ := strings.Cut(t, migSep)
	g, _ := migProfileSlices(prof)
	return parent, float64(g) / MIGComputeSlices, float64(migMemSlices[g]) / MIGMemorySlices, true
}

// MIGSliceGiB is a MIG type's memory as its profile names it ("a100-mig-3g.20gb": 20).
func MIGSliceGiB(typ string) (float64, bool) {
	t, ok := MIGType(typ)
	if !ok {
		return 0, false
	}
	_, prof, _ := strings.Cut(t, migSep)
	_, rest, _ := strings.Cut(prof, "g.")
	num, _, _ := strings.Cut(rest, "gb")
	v, err := strconv.ParseFloat(num, 64)
	return v, err == nil
}

// MIGSlices is what MIG slices take of one GPU: compute slices (of MIGComputeSlices) and
// memory slices (of MIGMemorySlices).
type MIGSlices struct{ Compute, Memory int }

// MIGLayout sums the slices that slices of the given MIG types take of one GPU; ok is false
// when one is not a MIG type.
func MIGLayout(types []string) (MIGSlices, bool) {
	var s MIGSlices
	for _, typ := range types {
		t, ok := MIGType(typ)
		if !ok {
			return MIGSlices{}, false
		}
		_, prof, _ := strings.Cut(t, migSep)
		g, _ := migProfileSlices(prof)
		s.Compute += g
		s.Memory += migMemSlices[g]
	}
	return s, true
}

// Fits reports whether the slices fit one GPU: a layout must stay within both its compute and
// its memory slices (two 3g.20gb take all 8 memory slices of an A100, so no 1g.5gb fits beside
// them although a compute slice is left).
func (s MIGSlices) Fits() bool { return s.Compute <= MIGComputeSlices && s.Memory <= MIGMemorySlices }

// MIGSpeedShare is the fraction of the parent's throughput a slice is assumed to deliver: half
// from its SM share, half from its memory-bandwidth share (the same compute/bandwidth blend as
// the datasheet prior between GPU types).
func MIGSpeedShare(typ string) (float64, bool) {
	_, sm, mem, ok := MIGShare(typ)
	if !ok {
		return 0, false
	}
	return 0.5*sm + 0.5*mem, true
}

// TypeOf is the GPU type of a device name: its MIG type for a MIG slice, else Canonical.
func TypeOf(name string) string {
	if t, ok := MIGType(name); ok {
		return t
	}
	return Canonical(name)
}
