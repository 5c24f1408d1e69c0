package sim_test

import (
	"math"
	"testing"

	"github.com/hetgpu/hetgpu/sidecar/backends/sim"
)

// Runs of one trace are charged energy over one window: the longest makespan, the rest at
// the cluster's idle draw.
func TestCommonEnergyWindow(t *testing.T) {
	rs := []*sim.Result{
		// Ends at 10 h: 2 h more at 1 kW idle = 2 kWh more, 102 kWh over 50 V100-h = 2.04.
		{Policy: "early", Jobs: 3, EnergyKWh: 100, EnergyWindowS: 36000, IdlePowerW: 1000, EnergyPerWork: 2},
		// The longest run sets the window and keeps its figures.
		{Policy: "late", Jobs: 3, EnergyKWh: 90, EnergyWindowS: 43200, IdlePowerW: 1000, EnergyPerWork: 1.8},
		// Finished nothing: nothing to compare, left as it is.
		{Policy: "none", IdlePowerW: 1000},
	}
	sim.CommonEnergyWindow(rs)
	for i, want := range []struct{ kwh, windowS, perWork float64 }{{102, 43200, 2.04}, {90, 43200, 1.8}, {0, 0, 0}} {
		r := rs[i]
		if math.Abs(r.EnergyKWh-want.kwh) > 1e-9 || r.EnergyWindowS != want.windowS || math.Abs(r.EnergyPerWork-want.perWork) > 1e-9 {
			t.Errorf("%s: %v kWh over %v s, %v per work; want %v kWh over %v s, %v", r.Policy, r.EnergyKWh, r.EnergyWindowS, r.EnergyPerWork, want.kwh, want.windowS, want.perWork)
		}
	}
}
