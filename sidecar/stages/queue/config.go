// Package queue is hetgpu's queues and fair share: sidecar configuration blocks map Nomad
// namespaces to queues, each with a weight, a guaranteed number of GPUs (optionally per GPU
// type), a maximum and a parent (one level). Every round it
//
//   - accounts usage: GPU-hours per queue, decayed with a half-life (Slurm's
//     PriorityDecayHalfLife), computed from the snapshots' times only;
//   - orders the ranked jobs (Order, applied to the learned and the heuristic ranker alike):
//     jobs of queues under their guarantee first, jobs that their queue's maximum keeps out
//     last, and in between each job's position in the ranker's order scaled by its queue's
//     fair share (see Order);
//   - writes the round's caps into the snapshot (cluster.Snapshot.Caps), which the placer
//     turns into MILP rows: a queue's maximum, and for a queue under its guarantee with pending
//     work a reserve of the idle GPUs it is owed that other queues may not take;
//   - limits preemption across queues to borrowed jobs (Reclaimable): a running job is borrowed
//     when the jobs of its queue that started before it already fill the queue's guarantee;
//     the others are marked guaranteed (cluster.Snapshot.Tenancy) and the preemption planner
//     stops them only for jobs of their own queue or to move them to faster GPUs. A queue under
//     its guarantee so reclaims borrowed GPUs and never takes GPUs another queue holds within
//     its own guarantee.
package queue

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"
)

// DefaultQueue takes the namespaces no queue lists: weight 1, no guarantee, no maximum.
const DefaultQueue = "default"

// DefaultHalfLife is the usage decay half-life (Slurm's PriorityDecayHalfLife default).
const DefaultHalfLife = 7 * 24 * time.Hour

// Spec is one queue block:
//
//	queue "team-a" {
//	  namespaces        = ["team-a"]
//	  weight            = 2
//	  guarantee         = 16
//	  guarantee_by_type = { A100 = 8 }
//	  max               = 64
//	  parent            = "research"
//	}
type Spec struct {
	Name            string         `hcl:"name,label" json:"name"`
	Namespaces      []string       `hcl:"namespaces,optional" json:"namespaces,omitempty"`
	Weight          float64        `hcl:"weight,optional" json:"weight"`
	Guarantee       int            `hcl:"guarantee,optional" json:"guarantee"`
	GuaranteeByType map[string]int `hcl:"guarantee_by_type,optional" json:"guarantee_by_type,omitempty"`
	// Max is the most GPUs the queue holds; 0 = no maximum.
	Max    int    `hcl:"max,optional" json:"max"`
	Parent string `hcl:"parent,optional" json:"parent,omitempty"`
}

// Settings is the queues block: queues { half_life = "168h" }.
type Settings struct {
	HalfLife string `hcl:"half_life,optional"`
}

// Config is every queue and the settings.
type Config struct {
	Queues   []Spec
	HalfLife time.Duration
}

// Enabled reports whether any queue is configured.
func (c *Config) Enabled() bool { return len(c.Queues) > 0 }

// Defaults fills what the blocks left out: weight 1, the default half-life.
func (c *Config) Defaults() {
	for i := range c.Queues {
		if c.Queues[i].Weight == 0 {
			c.Queues[i].Weight = 1
		}
	}
	if c.HalfLife == 0 {
		c.HalfLife = DefaultHalfLife
	}
}

// Validate checks the queues: names unique and not empty, weights > 0, guarantees and maxima
// >= 0, max >= guarantee, parents exist and are top-level, a namespace in one queue only,
// children's guarantees within their parent's. Errors name the queue, the field, the value and
// what is expected. clusterGPUs > 0 adds a warning when the top-level guarantees add up to more
// than the cluster holds (they cannot all be met at once).
func (c *Config) Validate(clusterGPUs int) (warnings []string, err error) {
	bad := func(q, field string, v any, exp string) error {
		return fmt.Errorf("queue %q: %s = %v, expected %s", q, field, v, exp)
	}
	if c.HalfLife < 0 {
		return nil, fmt.Errorf("queues: half_life = %v, expected a positive duration, e.g. \"168h\"", c.HalfLife)
	}
	for _, q := range c.Queues {
		if q.Name == DefaultQueue && (len(q.Namespaces) > 0 || q.Parent != "") {
			return nil, fmt.Errorf("queue %q: namespaces = %v, parent = %q; expected neither: the default queue takes the namespaces no queue lists", q.Name, q.Namespaces, q.Parent)
		}
	}
	byName := map[string]*Spec{}
	for i := range c.Queues {
		q := &c.Queues[i]
		if strings.TrimSpace(q.Name) == "" {
			return nil, fmt.Errorf("queue #%d: name = %q, expected a non-empty label", i+1, q.Name)
		}
		if byName[q.Name] != nil {
			return nil, fmt.Errorf("queue %q: defined twice, expected one block per queue", q.Name)
		}
		byName[q.Name] = q
	}
	nsOwner := map[string]string{}
	for i := range c.Queues {
		q := &c.Queues[i]
		if !(q.Weight > 0) || math.IsInf(q.Weight, 0) {
			return nil, bad(q.Name, "weight", q.Weight, "a number > 0 (default 1)")
		}
		if q.Guarantee < 0 {
			return nil, bad(q.Name, "guarantee", q.Guarantee, "a number of GPUs >= 0")
		}
		if q.Max < 0 {
			return nil, bad(q.Name, "max", q.Max, "a number of GPUs >= 0 (0 = no maximum)")
		}
		byType := 0
		for _, t := range slices.Sorted(maps.Keys(q.GuaranteeByType)) {
			n := q.GuaranteeByType[t]
			if n < 0 {
				return nil, bad(q.Name, "guarantee_by_type."+t, n, "a number of GPUs >= 0")
			}
			byType += n
		}
		if q.Max > 0 && q.Max < max(q.Guarantee, byType) {
			return nil, bad(q.Name, "max", q.Max, fmt.Sprintf("at least the guarantee (%d GPUs)", max(q.Guarantee, byType)))
		}
		if q.Parent != "" {
			p := byName[q.Parent]
			switch {
			case q.Parent == q.Name:
				return nil, bad(q.Name, "parent", q.Parent, "another queue")
			case p == nil:
				return nil, bad(q.Name, "parent", q.Parent, "the name of a queue defined in a queue block")
			case p.Parent != "":
				return nil, bad(q.Name, "parent", q.Parent, "a top-level queue (one level of hierarchy)")
			}
		}
		for _, ns := range q.Namespaces {
			if ns == "" {
				return nil, bad(q.Name, "namespaces", q.Namespaces, "non-empty Nomad namespace names")
			}
			if o, ok := nsOwner[ns]; ok {
				return nil, bad(q.Name, "namespaces", fmt.Sprintf("%q", ns), fmt.Sprintf("a namespace of no other queue (queue %q lists it)", o))
			}
			nsOwner[ns] = q.Name
		}
	}
	children := map[string][]*Spec{}
	for i := range c.Queues {
		if q := &c.Queues[i]; q.Parent != "" {
			children[q.Parent] = append(children[q.Parent], q)
		}
	}
	total := 0
	for i := range c.Queues {
		q := &c.Queues[i]
		kids := children[q.Name]
		if len(kids) > 0 && len(q.Namespaces) > 0 {
			return nil, bad(q.Name, "namespaces", q.Namespaces, "none on a parent queue (its children list the namespaces)")
		}
		sum := 0
		for _, k := range kids {
			sum += k.Guarantee
		}
		if len(kids) > 0 && sum > q.Guarantee && q.Guarantee > 0 {
			return nil, bad(q.Name, "guarantee", q.Guarantee, fmt.Sprintf("at least its children's guarantees together (%d GPUs)", sum))
		}
		if len(kids) > 0 && q.Max > 0 {
			for _, k := range kids {
				if k.Guarantee > q.Max {
					return nil, bad(k.Name, "guarantee", k.Guarantee, fmt.Sprintf("at most its parent %q's max (%d GPUs)", q.Name, q.Max))
				}
			}
		}
		if q.Parent == "" {
			total += max(q.Guarantee, sum)
		}
	}
	if clusterGPUs > 0 && total > clusterGPUs {
		warnings = append(warnings, fmt.Sprintf("queues: the guarantees add up to %d GPUs but the cluster holds %d; they cannot all be met at once", total, clusterGPUs))
	}
	return warnings, nil
}
