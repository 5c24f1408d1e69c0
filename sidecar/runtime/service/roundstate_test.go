package service_test

import (
	"sync"
	"testing"

	"github.com/hashicorp/nomad/api"

	"github.com/hetgpu/hetgpu/sidecar/backends/nomad"
	"github.com/hetgpu/hetgpu/sidecar/policies"
	"github.com/hetgpu/hetgpu/sidecar/runtime/service"
	"github.com/hetgpu/hetgpu/sidecar/runtime/service/servicetest"
)

// compileCounter counts a round's constraint compilations per job (service.Config.OnCompile).
type compileCounter struct {
	mu    sync.Mutex
	round map[string]int
	total int
}

func (c *compileCounter) note(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.round[key]++
	c.total++
}

// take returns the round's counts and starts the next round's.
func (c *compileCounter) take() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.round
	c.round = map[string]int{}
	return out
}

// Every step of a live round (triage, queues, placement, verification, the waiting groups'
// explanations) reads a job's constraints from the round's state: under every registered
// policy, each job is compiled at most once a round, and each distinct request at least once
// (jobs with the same request may share the feasibility check's answer).
func TestConstraintsCompiledOncePerRound(t *testing.T) {
	for _, name := range policies.Names() {
		t.Run(name, func(t *testing.T) {
			cc := &compileCounter{round: map[string]int{}}
			h := servicetest.NewHarness(t, func(c *service.Config, _ *nomad.Config) { c.OnCompile = cc.note }, withPolicy(t, name))
			linux := servicetest.HeldJob("linux", 2, 1, nil)
			linux.TaskGroups[0].Constraints = append(linux.TaskGroups[0].Constraints,
				&api.Constraint{LTarget: "${attr.kernel.name}", Operand: "=", RTarget: "linux"})
			jobs := []*api.Job{
				linux,
				gangJob("gang", 2, nil),
				servicetest.HeldJob("huge", 16, 1, nil), // never fits one node: set aside by triage
				servicetest.HeldJob("big", 8, 1, nil),
				servicetest.HeldJob("big2", 8, 1, nil),
				servicetest.HeldJob("big3", 8, 1, nil), // waits for GPUs: explained
			}
			for _, j := range jobs {
				h.Nomad.Register(j)
			}
			for round := 1; round <= 3; round++ {
				h.Round()
				counts := cc.take()
				for k, n := range counts {
					if n > 1 {
						t.Errorf("round %d: job %s compiled %d times, want once", round, k, n)
					}
				}
				if round == 1 {
					for _, k := range []string{"default/linux/train", "default/gang/w1", "default/gang/w2", "default/huge/train"} {
						if counts[k] != 1 {
							t.Errorf("round 1: job %s compiled %d times, want once (counts %v)", k, counts[k], counts)
						}
					}
				}
			}
		})
	}
}
