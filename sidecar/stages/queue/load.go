package queue

import (
	"fmt"
	"maps"
	"math"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/gohcl"
	"github.com/hashicorp/hcl/v2/hclparse"
)

// file is a queue configuration file: the sidecar's queue and queues blocks (other blocks of a
// sidecar configuration are ignored, so the sidecar's file can be given as it is).
type file struct {
	Queues   []Spec    `hcl:"queue,block"`
	Settings *Settings `hcl:"queues,block"`
	Rest     hcl.Body  `hcl:",remain"`
}

// ParseHCL reads queue blocks (and an optional queues block) from HCL source; the result has
// its defaults applied and is validated.
func ParseHCL(filename string, src []byte) (Config, error) {
	f, diags := hclparse.NewParser().ParseHCL(src, filename)
	if diags.HasErrors() {
		return Config{}, fmt.Errorf("queues: %w", diags)
	}
	var fl file
	if diags := gohcl.DecodeBody(f.Body, nil, &fl); diags.HasErrors() {
		return Config{}, fmt.Errorf("queues: %w", diags)
	}
	c := Config{Queues: fl.Queues}
	if fl.Settings != nil && fl.Settings.HalfLife != "" {
		d, err := parseDuration(fl.Settings.HalfLife)
		if err != nil {
			return Config{}, fmt.Errorf("%s: queues.half_life = %q: expected a positive duration, e.g. \"168h\"", filename, fl.Settings.HalfLife)
		}
		c.HalfLife = d
	}
	c.Defaults()
	if _, err := c.Validate(0); err != nil {
		return Config{}, fmt.Errorf("%s: %w", filename, err)
	}
	return c, nil
}

// Load resolves a --queues reference for a cluster of gpus GPUs and the GPU-seconds each
// namespace's jobs ask for: "" (no queues), "auto" or "auto:F" (ProportionalToDemand with
// fraction F, default 0.8), or an HCL file.
func Load(ref string, gpus int, demand map[string]float64) (Config, error) {
	switch {
	case ref == "":
		return Config{}, nil
	case ref == "auto" || strings.HasPrefix(ref, "auto:"):
		f := 0.8
		if v, ok := strings.CutPrefix(ref, "auto:"); ok {
			x, err := strconv.ParseFloat(v, 64)
			if err != nil || !(x > 0 && x <= 1) {
				return Config{}, fmt.Errorf("queues %q: expected auto:F with F the fraction of the cluster guaranteed, in (0, 1]", ref)
			}
			f = x
		}
		return ProportionalToDemand(demand, gpus, f), nil
	}
	src, err := os.ReadFile(ref)
	if err != nil {
		return Config{}, fmt.Errorf("queues: %w", err)
	}
	return ParseHCL(ref, src)
}

// ProportionalToDemand is one queue per namespace, weight 1, no maximum, with guarantees that
// split fraction of the cluster's GPUs in proportion to each namespace's demand (largest
// remainders, so that they add up to floor(fraction x gpus)).
func ProportionalToDemand(demand map[string]float64, gpus int, fraction float64) Config {
	names := slices.Sorted(maps.Keys(demand))
	total := 0.0
	for _, n := range names {
		total += demand[n]
	}
	budget := int(math.Floor(fraction * float64(gpus)))
	c := Config{}
	type rem struct {
		i int
		r float64
	}
	var rems []rem
	given := 0
	for i, n := range names {
		exact := 0.0
		if total > 0 {
			exact = float64(budget) * demand[n] / total
		}
		g := int(math.Floor(exact))
		given += g
		rems = append(rems, rem{i, exact - float64(g)})
		c.Queues = append(c.Queues, Spec{Name: queueName(n), Namespaces: []string{n}, Guarantee: g})
	}
	sort.SliceStable(rems, func(a, b int) bool { return rems[a].r > rems[b].r })
	for k := 0; k < budget-given && k < len(rems); k++ {
		c.Queues[rems[k].i].Guarantee++
	}
	c.Defaults()
	return c
}

// queueName names the auto queue of a namespace; the default namespace's queue must not be
// the default queue (which takes no namespaces).
func queueName(ns string) string {
	if ns == DefaultQueue {
		return "ns-default"
	}
	return ns
}

func parseDuration(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err == nil && d <= 0 {
		err = fmt.Errorf("not positive")
	}
	return d, err
}
