// Package gpuspec knows GPU types: the canonical type key of an NVML product name and the
// public datasheet figures (memory, bandwidth, TFLOPS, TDP, idle power) behind power models
// and cold-start priors. The table is gpu-specs.csv (vendor datasheets; idle power from public
// nvidia-smi readings), embedded so binaries need no data files.
package gpuspec

import (
	"bytes"
	_ "embed"
	"encoding/csv"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
)

//go:embed gpu-specs.csv
var specsCSV []byte

// Spec is one GPU model's datasheet.
type Spec struct {
	// Type is the canonical key ("v100"), Model the datasheet row ("V100-SXM2-16GB").
	Type             string
	Model            string
	MemoryGiB        float64
	MemBandwidthGBps float64
	FP32TFLOPS       float64
	// FP16TensorTFLOPS is dense FP16 tensor throughput; 0 where the GPU has no tensor cores.
	FP16TensorTFLOPS float64
	TDPW             float64
	// IdleW is the middle of the observed idle range.
	IdleW float64
}

// Table is a read-only set of specs, indexed by type.
type Table struct {
	specs  []Spec
	byType map[string]int
}

// typeKeys in match order: longer keys first so "a100" wins over "a10".
var typeKeys = []string{"h200", "h100", "a100", "a10", "l4", "t4", "v100", "p100", "k80"}

// Canonical maps a product name ("Tesla V100-SXM2-16GB", "NVIDIA A100-SXM4-40GB MIG 3g.20gb",
// "NVIDIA H100 80GB HBM3", "v100") to its type key, or "" when unknown.
func Canonical(name string) string {
	n := strings.ToLower(name)
	for _, k := range typeKeys {
		if i := strings.Index(n, k); i >= 0 {
			// Reject matches inside longer alphanumerics, e.g. "a10" in "a10g" is fine but
			// "t4" inside "gt40" is not a T4.
			if i > 0 && isAlnum(n[i-1]) {
				continue
			}
			return k
		}
	}
	return ""
}

func isAlnum(b byte) bool { return b >= 'a' && b <= 'z' || b >= '0' && b <= '9' }

// Default returns the embedded datasheet table.
func Default() *Table {
	t, err := Parse(specsCSV)
	if err != nil {
		panic(fmt.Sprintf("gpuspec: embedded gpu-specs.csv is invalid: %v", err))
	}
	return t
}

// Parse reads a table in gpu-specs.csv's format:
// gpu,memory_gib,mem_bw_gbps,fp32_tflops,fp16_tensor_tflops_dense,tdp_w,idle_w_low,idle_w_high
func Parse(data []byte) (*Table, error) {
	rows, err := csv.NewReader(bytes.NewReader(data)).ReadAll()
	if err != nil {
		return nil, fmt.Errorf("read gpu spec csv: %w", err)
	}
	if len(rows) < 2 {
		return nil, fmt.Errorf("gpu spec csv: want a header and at least one row, got %d rows", len(rows))
	}
	want := []string{"gpu", "memory_gib", "mem_bw_gbps", "fp32_tflops", "fp16_tensor_tflops_dense", "tdp_w", "idle_w_low", "idle_w_high"}
	if strings.Join(rows[0], ",") != strings.Join(want, ",") {
		return nil, fmt.Errorf("gpu spec csv: header %q, expected %q", strings.Join(rows[0], ","), strings.Join(want, ","))
	}
	t := &Table{byType: map[string]int{}}
	for i, r := range rows[1:] {
		line := i + 2
		num := func(col int, optional bool) (float64, error) {
			if r[col] == "" && optional {
				return 0, nil
			}
			v, err := strconv.ParseFloat(r[col], 64)
			if err != nil || v < 0 {
				return 0, fmt.Errorf("gpu spec csv line %d: field %s = %q, expected a non-negative number", line, want[col], r[col])
			}
			return v, nil
		}
		var vals [7]float64
		for c := 1; c <= 7; c++ {
			if vals[c-1], err = num(c, c == 4); err != nil {
				return nil, err
			}
		}
		typ := Canonical(r[0])
		if typ == "" {
			return nil, fmt.Errorf("gpu spec csv line %d: field gpu = %q, expected a known GPU type (%s)", line, r[0], strings.Join(typeKeys, ", "))
		}
		s := Spec{Type: typ, Model: r[0], MemoryGiB: vals[0], MemBandwidthGBps: vals[1], FP32TFLOPS: vals[2],
			FP16TensorTFLOPS: vals[3], TDPW: vals[4], IdleW: (vals[5] + vals[6]) / 2}
		if _, ok := t.byType[typ]; !ok {
			t.byType[typ] = len(t.specs)
		}
		t.specs = append(t.specs, s)
	}
	return t, nil
}

// Lookup returns the spec of a type key or product name.
func (t *Table) Lookup(nameOrType string) (Spec, bool) {
	i, ok := t.byType[Canonical(nameOrType)]
	if !ok {
		return Spec{}, false
	}
	return t.specs[i], true
}

// Types lists the known type keys, sorted.
func (t *Table) Types() []string {
	out := make([]string, 0, len(t.byType))
	for k := range t.byType {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Specs returns every row (models, not only types).
func (t *Table) Specs() []Spec { return append([]Spec(nil), t.specs...) }

// Power models a GPU's draw at a utilisation in [0, 1]: idle + (TDP - idle) * util^alpha.
// alpha < 1 reflects that power rises fast at low load; PowerAlpha (0.7) is the default.
func (s Spec) Power(util, alpha float64) float64 {
	if util <= 0 {
		return s.IdleW
	}
	if util > 1 {
		util = 1
	}
	return s.PowerAt(math.Pow(util, alpha))
}

// PowerAt is the draw at a load fraction frac of the way from idle to TDP (Power's
// util^alpha; the predictor learns the fraction per workload from measured power).
func (s Spec) PowerAt(frac float64) float64 { return s.IdleW + (s.TDPW-s.IdleW)*frac }

// LoadFraction is the inverse of PowerAt: how far one GPU's draw w is from idle to TDP
// (outside [0, 1] for a draw below idle or above TDP). It needs TDPW > IdleW.
func (s Spec) LoadFraction(w float64) float64 { return (w - s.IdleW) / (s.TDPW - s.IdleW) }
