package telemetry

import (
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"

	"github.com/hetgpu/hetgpu/internal/wanterr"
)

// fakeGPU is a mock device whose power follows curve(t) (W, t in seconds since t0) on a
// clock the test controls. With counter set it also has NVML's total-energy counter, which
// holds the exact integral of the curve.
type fakeGPU struct {
	mu      sync.Mutex
	t       float64
	curve   func(t float64) float64
	energy  func(t float64) float64 // exact integral of curve from 0, J
	limitMW uint32
	minMW   uint32
	maxMW   uint32
	setErr  nvml.Return
}

func (f *fakeGPU) at(t float64) { f.mu.Lock(); f.t = t; f.mu.Unlock() }

func (f *fakeGPU) device(uuid, name string, counter bool) *mock.Device {
	d := &mock.Device{
		GetUUIDFunc: func() (string, nvml.Return) { return uuid, nvml.SUCCESS },
		GetNameFunc: func() (string, nvml.Return) { return name, nvml.SUCCESS },
		GetPowerUsageFunc: func() (uint32, nvml.Return) {
			f.mu.Lock()
			defer f.mu.Unlock()
			return uint32(math.Round(f.curve(f.t) * 1000)), nvml.SUCCESS
		},
		GetUtilizationRatesFunc: func() (nvml.Utilization, nvml.Return) {
			return nvml.Utilization{Gpu: 80, Memory: 40}, nvml.SUCCESS
		},
		GetPowerManagementLimitFunc: func() (uint32, nvml.Return) {
			f.mu.Lock()
			defer f.mu.Unlock()
			return f.limitMW, nvml.SUCCESS
		},
		GetPowerManagementLimitConstraintsFunc: func() (uint32, uint32, nvml.Return) {
			return f.minMW, f.maxMW, nvml.SUCCESS
		},
		SetPowerManagementLimitFunc: func(mw uint32) nvml.Return {
			f.mu.Lock()
			defer f.mu.Unlock()
			if f.setErr != nvml.SUCCESS {
				return f.setErr
			}
			f.limitMW = mw
			return nvml.SUCCESS
		},
	}
	if counter {
		d.GetTotalEnergyConsumptionFunc = func() (uint64, nvml.Return) {
			f.mu.Lock()
			defer f.mu.Unlock()
			// Counters count from driver load, not from zero at our start.
			return 5_000_000 + uint64(math.Round(f.energy(f.t)*1000)), nvml.SUCCESS
		}
	}
	// Without a counter GetTotalEnergyConsumptionFunc stays nil: the mock panics, as a
	// fake backend that does not model the counter would, and the sampler must cope.
	return d
}

func fakeLib(devs map[string]*mock.Device) *mock.Interface {
	var order []string
	for uuid := range devs {
		order = append(order, uuid)
	}
	return &mock.Interface{
		DeviceGetCountFunc: func() (int, nvml.Return) { return len(order), nvml.SUCCESS },
		DeviceGetHandleByUUIDFunc: func(uuid string) (nvml.Device, nvml.Return) {
			if d, ok := devs[uuid]; ok {
				return d, nvml.SUCCESS
			}
			return nil, nvml.ERROR_NOT_FOUND
		},
		DeviceGetHandleByIndexFunc: func(i int) (nvml.Device, nvml.Return) {
			if i < 0 || i >= len(order) {
				return nil, nvml.ERROR_INVALID_ARGUMENT
			}
			return devs[order[i]], nvml.SUCCESS
		},
	}
}

// A known power curve: 150 W idle ramping to a 300 W plateau with a 20 W ripple.
func curve(t float64) float64 {
	return 150 + 150*math.Min(t/30, 1) + 20*math.Sin(2*math.Pi*t/10)
}

// energyOf is the exact integral of curve over [0, t].
func energyOf(t float64) float64 {
	ramp := 0.0
	if t <= 30 {
		ramp = 150 * t * t / 60
	} else {
		ramp = 150*30/2 + 150*(t-30)
	}
	return 150*t + ramp + 20*10/(2*math.Pi)*(1-math.Cos(2*math.Pi*t/10))
}

func TestEnergyMatchesIntegral(t *testing.T) {
	const duration = 120.0
	exact := energyOf(duration)
	tests := []struct {
		name    string
		counter bool
		source  string
		// Trapezoids at 1 Hz on this curve err by well under 0.1 %; the counter is exact
		// up to its mJ rounding.
		tol float64
	}{
		{"integrated power", false, SourceIntegrated, 1e-3},
		{"energy counter", true, SourceCounter, 1e-6},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeGPU{curve: curve, energy: energyOf}
			lib := fakeLib(map[string]*mock.Device{"GPU-a": f.device("GPU-a", "NVIDIA A100-SXM4-40GB", tc.counter)})
			gpus, err := ResolveGPUs(lib, "GPU-a")
			if err != nil {
				t.Fatal(err)
			}
			s := NewSampler(gpus)
			t0 := time.Unix(1_700_000_000, 0)
			for i := 0; i <= int(duration); i++ {
				f.at(float64(i))
				s.Sample(t0.Add(time.Duration(i) * time.Second))
			}
			sum := s.Summary()
			if sum.EnergySource != tc.source {
				t.Errorf("source = %s, want %s", sum.EnergySource, tc.source)
			}
			if rel := math.Abs(sum.EnergyJ-exact) / exact; rel > tc.tol {
				t.Errorf("energy = %.3f J, exact integral %.3f J (rel err %.2g > %g)", sum.EnergyJ, exact, rel, tc.tol)
			}
			if want := exact / duration; math.Abs(sum.AvgPowerW-want)/want > 2*tc.tol+1e-9 {
				t.Errorf("avg power = %.3f W, want %.3f", sum.AvgPowerW, want)
			}
			// The sampled peak: max of the curve at whole seconds.
			peak := 0.0
			for i := 0; i <= int(duration); i++ {
				peak = math.Max(peak, math.Round(curve(float64(i))*1000)/1000)
			}
			if math.Abs(sum.PeakPowerW-peak) > 1e-6 {
				t.Errorf("peak = %.3f W, want %.3f", sum.PeakPowerW, peak)
			}
			if sum.AvgUtilPct != 80 || sum.Samples != int(duration)+1 || sum.Duration != time.Duration(duration)*time.Second {
				t.Errorf("summary = %+v", sum)
			}
		})
	}
}

func TestTwoGPUsSumAndMixedSources(t *testing.T) {
	fa := &fakeGPU{curve: func(float64) float64 { return 100 }, energy: func(t float64) float64 { return 100 * t }}
	fb := &fakeGPU{curve: func(float64) float64 { return 250 }, energy: func(t float64) float64 { return 250 * t }}
	lib := fakeLib(map[string]*mock.Device{
		"GPU-a": fa.device("GPU-a", "Tesla T4", true),
		"GPU-b": fb.device("GPU-b", "Tesla T4", false),
	})
	gpus, err := ResolveGPUs(lib, "GPU-a, GPU-b")
	if err != nil {
		t.Fatal(err)
	}
	s := NewSampler(gpus)
	t0 := time.Unix(0, 0)
	for i := 0; i <= 10; i++ {
		fa.at(float64(i))
		fb.at(float64(i))
		s.Sample(t0.Add(time.Duration(i) * time.Second))
	}
	sum := s.Summary()
	if sum.EnergySource != SourceMixed || math.Abs(sum.EnergyJ-3500) > 1e-6 || sum.PeakPowerW != 350 || sum.GPUs != 2 {
		t.Fatalf("summary = %+v, want mixed 3500 J peak 350 W", sum)
	}
}

func TestCheckpointBridgesGap(t *testing.T) {
	f := &fakeGPU{curve: func(float64) float64 { return 200 }, energy: func(t float64) float64 { return 200 * t }}
	dev := f.device("GPU-a", "Tesla V100-SXM2-16GB", false)
	lib := fakeLib(map[string]*mock.Device{"GPU-a": dev})
	gpus, _ := ResolveGPUs(lib, "GPU-a")
	s := NewSampler(gpus)
	t0 := time.Unix(0, 0)
	for i := 0; i <= 10; i++ {
		s.Sample(t0.Add(time.Duration(i) * time.Second))
	}
	cp := s.Checkpoint()
	// A new driver process: new sampler, restored, resumes 20 s later.
	s2 := NewSampler(gpus)
	if err := s2.Restore(cp); err != nil {
		t.Fatal(err)
	}
	for i := 30; i <= 40; i++ {
		s2.Sample(t0.Add(time.Duration(i) * time.Second))
	}
	if sum := s2.Summary(); math.Abs(sum.EnergyJ-200*40) > 1e-6 {
		t.Fatalf("energy after restore = %v, want %v", sum.EnergyJ, 200*40)
	}
	other, _ := ResolveGPUs(fakeLib(map[string]*mock.Device{"GPU-z": dev}), "GPU-z")
	other[0].UUID = "GPU-z"
	if err := NewSampler(other).Restore(cp); err == nil {
		t.Error("restore onto different GPUs succeeded")
	}
}

func TestCounterResetKeepsEnergy(t *testing.T) {
	counter := uint64(0)
	dev := &mock.Device{
		GetUUIDFunc:                   func() (string, nvml.Return) { return "GPU-r", nvml.SUCCESS },
		GetTotalEnergyConsumptionFunc: func() (uint64, nvml.Return) { return counter, nvml.SUCCESS },
	}
	gpus, err := ResolveGPUs(fakeLib(map[string]*mock.Device{"GPU-r": dev}), "GPU-r")
	if err != nil {
		t.Fatal(err)
	}
	s := NewSampler(gpus)
	t0 := time.Unix(0, 0)
	for i, c := range []uint64{10_000, 60_000, 110_000, 5_000, 25_000} { // reset after 110 J
		counter = c
		s.Sample(t0.Add(time.Duration(i) * time.Second))
	}
	if sum := s.Summary(); math.Abs(sum.EnergyJ-120) > 1e-9 || sum.EnergySource != SourceCounter {
		t.Fatalf("energy = %v J (%s), want 100 J before the reset + 20 J after", sum.EnergyJ, sum.EnergySource)
	}
}

func TestResolveGPUs(t *testing.T) {
	f := &fakeGPU{curve: curve, energy: energyOf}
	lib := fakeLib(map[string]*mock.Device{"GPU-a": f.device("GPU-a", "NVIDIA H100 80GB HBM3", false)})
	tests := []struct {
		in      string
		want    int
		wantErr string
	}{
		{"", 0, ""}, {"none", 0, ""}, {"void", 0, ""}, {"all", 1, ""}, {"0", 1, ""}, {"GPU-a", 1, ""},
		{"GPU-a,GPU-missing", 0, `GPU "GPU-missing"`}, {"7", 0, `GPU "7"`},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			g, err := ResolveGPUs(lib, tc.in)
			if wanterr.Done(t, err, tc.wantErr) {
				return
			}
			if err != nil || len(g) != tc.want {
				t.Fatalf("got %d GPUs, %v; want %d", len(g), err, tc.want)
			}
			if len(g) == 1 && (g[0].UUID != "GPU-a" || g[0].Name != "NVIDIA H100 80GB HBM3") {
				t.Errorf("gpu = %+v", g[0])
			}
		})
	}
}

func TestPowerLimit(t *testing.T) {
	mk := func() (*fakeGPU, *fakeGPU, []GPU) {
		a := &fakeGPU{curve: curve, energy: energyOf, limitMW: 400_000, minMW: 100_000, maxMW: 400_000}
		b := &fakeGPU{curve: curve, energy: energyOf, limitMW: 350_000, minMW: 100_000, maxMW: 400_000}
		lib := fakeLib(map[string]*mock.Device{"GPU-a": a.device("GPU-a", "A100", false), "GPU-b": b.device("GPU-b", "A100", false)})
		g, err := ResolveGPUs(lib, "GPU-a,GPU-b")
		if err != nil {
			t.Fatal(err)
		}
		return a, b, g
	}
	t.Run("apply and restore", func(t *testing.T) {
		a, b, g := mk()
		saved, err := ApplyPowerLimit(g, 250)
		if err != nil {
			t.Fatal(err)
		}
		if a.limitMW != 250_000 || b.limitMW != 250_000 {
			t.Fatalf("limits = %d, %d", a.limitMW, b.limitMW)
		}
		if err := RestorePowerLimits(g, saved); err != nil {
			t.Fatal(err)
		}
		if a.limitMW != 400_000 || b.limitMW != 350_000 {
			t.Fatalf("restored limits = %d, %d", a.limitMW, b.limitMW)
		}
	})
	t.Run("out of range changes nothing", func(t *testing.T) {
		a, b, g := mk()
		_, err := ApplyPowerLimit(g, 50)
		if err == nil || !strings.Contains(err.Error(), "power_limit = 50 W is outside") {
			t.Fatalf("err = %v", err)
		}
		if a.limitMW != 400_000 || b.limitMW != 350_000 {
			t.Fatal("limits changed by a rejected power_limit")
		}
	})
	t.Run("set fails midway: rolled back", func(t *testing.T) {
		a, b, g := mk()
		b.setErr = nvml.ERROR_NO_PERMISSION
		if _, err := ApplyPowerLimit(g, 200); err == nil || !strings.Contains(err.Error(), "needs root") {
			t.Fatalf("err = %v", err)
		}
		if a.limitMW != 400_000 {
			t.Fatalf("first GPU not rolled back: %d", a.limitMW)
		}
	})
	t.Run("someone else changed it since", func(t *testing.T) {
		a, _, g := mk()
		saved, err := ApplyPowerLimit(g, 300)
		if err != nil {
			t.Fatal(err)
		}
		a.limitMW = 280_000
		if err := RestorePowerLimits(g, saved); err != nil {
			t.Fatal(err)
		}
		if a.limitMW != 280_000 {
			t.Fatalf("overwrote a newer limit: %d", a.limitMW)
		}
	})
}

func BenchmarkSample8GPUs(b *testing.B) {
	devs := map[string]*mock.Device{}
	var ids []string
	for i := range 8 {
		f := &fakeGPU{curve: curve, energy: energyOf}
		id := fmt.Sprintf("GPU-%d", i)
		devs[id] = f.device(id, "NVIDIA A100-SXM4-40GB", i%2 == 0)
		ids = append(ids, id)
	}
	gpus, err := ResolveGPUs(fakeLib(devs), strings.Join(ids, ","))
	if err != nil {
		b.Fatal(err)
	}
	s := NewSampler(gpus)
	t0 := time.Unix(0, 0)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		s.Sample(t0.Add(time.Duration(i) * time.Second))
	}
}
