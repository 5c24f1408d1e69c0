package service_test

import (
	"testing"

	"github.com/hetgpu/hetgpu/sidecar/backends/nomad"
	"github.com/hetgpu/hetgpu/sidecar/policies"
	"github.com/hetgpu/hetgpu/sidecar/runtime/service"
	"github.com/hetgpu/hetgpu/sidecar/runtime/service/servicetest"
	"github.com/hetgpu/hetgpu/sidecar/runtime/store"
)

// Every registered policy (gavel included) drives the service against Nomad: the held jobs are
// pinned (and, in shadow mode, only recorded), so an operator can compare what a baseline would
// have done on their own cluster.
func TestRegisteredPoliciesDriveTheService(t *testing.T) {
	for _, name := range policies.Names() {
		for _, shadow := range []bool{false, true} {
			t.Run(name+map[bool]string{false: "", true: "/shadow"}[shadow], func(t *testing.T) {
				h := servicetest.NewHarness(t, func(c *service.Config, b *nomad.Config) { c.Shadow, b.Shadow = shadow, shadow }, withPolicy(t, name))
				h.Nomad.Register(servicetest.HeldJob("resnet", 2, 1, nil))
				h.Nomad.Register(servicetest.HeldJob("small", 1, 1, nil))
				h.Round()
				want := store.StatusPinned
				if shadow {
					want = store.StatusShadow
				}
				for _, id := range []string{"resnet", "small"} {
					r, ok := h.Store.Latest("default/" + id + "/train")
					if !ok || r.Status != want || r.Decision == nil {
						t.Fatalf("%s: record %+v, want status %s with a decision", id, r, want)
					}
					_, devs, pinned := nomad.PinOf(h.Nomad.Job("default", id).TaskGroups[0])
					if pinned == shadow {
						t.Fatalf("%s: pinned = %v in shadow mode %v", id, pinned, shadow)
					}
					if pinned && len(devs) != int(r.Decision.GPUs()) {
						t.Fatalf("%s pinned to %v, decided %d GPUs", id, devs, r.Decision.GPUs())
					}
				}
			})
		}
	}
}

// withPolicy is a harness setup that runs the service on the named registered policy, with
// the harness's predictor, from its first start.
func withPolicy(t *testing.T, name string) func(*servicetest.Harness) {
	return func(h *servicetest.Harness) {
		st, err := policies.Live(name, policies.Options{Predictor: h.Pred})
		if err != nil {
			t.Fatal(err)
		}
		h.Stages = &st
	}
}
