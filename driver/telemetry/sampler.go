package telemetry

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// DefaultInterval is the NVML sampling period.
const DefaultInterval = time.Second

// GPU is one of the task's devices.
type GPU struct {
	UUID string
	Name string
	dev  nvml.Device
}

// ResolveGPUs maps NVIDIA_VISIBLE_DEVICES-style IDs (UUIDs, MIG UUIDs or indices) to NVML
// devices. "all" means every device; "", "none" and "void" mean none.
func ResolveGPUs(lib nvml.Interface, visible string) ([]GPU, error) {
	visible = strings.TrimSpace(visible)
	switch visible {
	case "", "none", "void":
		return nil, nil
	}
	var ids []string
	if visible == "all" {
		n, ret := lib.DeviceGetCount()
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("nvml: device count: %v", nvml.ErrorString(ret))
		}
		for i := range n {
			ids = append(ids, strconv.Itoa(i))
		}
	} else {
		for id := range strings.SplitSeq(visible, ",") {
			if id = strings.TrimSpace(id); id != "" {
				ids = append(ids, id)
			}
		}
	}
	gpus := make([]GPU, 0, len(ids))
	for _, id := range ids {
		var dev nvml.Device
		var ret nvml.Return
		if idx, err := strconv.Atoi(id); err == nil {
			dev, ret = lib.DeviceGetHandleByIndex(idx)
		} else {
			dev, ret = lib.DeviceGetHandleByUUID(id)
		}
		if ret != nvml.SUCCESS || dev == nil {
			return nil, fmt.Errorf("nvml: GPU %q from NVIDIA_VISIBLE_DEVICES not found: %s", id, errString(ret))
		}
		g := GPU{UUID: id, dev: dev}
		if u, ret := safeString(dev.GetUUID); ret == nvml.SUCCESS {
			g.UUID = u
		}
		if n, ret := safeString(dev.GetName); ret == nvml.SUCCESS {
			g.Name = n
		}
		gpus = append(gpus, g)
	}
	return gpus, nil
}

func errString(ret nvml.Return) string {
	if ret == nvml.SUCCESS {
		return "no device"
	}
	return nvml.ErrorString(ret)
}

// The go-nvml mock panics on methods a fake device does not implement; a real GPU answers
// NOT_SUPPORTED for the same thing. These wrappers make both look like the latter.

func safeString(f func() (string, nvml.Return)) (s string, ret nvml.Return) {
	defer func() {
		if recover() != nil {
			s, ret = "", nvml.ERROR_NOT_SUPPORTED
		}
	}()
	return f()
}

func safeU32(f func() (uint32, nvml.Return)) (v uint32, ret nvml.Return) {
	defer func() {
		if recover() != nil {
			v, ret = 0, nvml.ERROR_NOT_SUPPORTED
		}
	}()
	return f()
}

func safeU64(f func() (uint64, nvml.Return)) (v uint64, ret nvml.Return) {
	defer func() {
		if recover() != nil {
			v, ret = 0, nvml.ERROR_NOT_SUPPORTED
		}
	}()
	return f()
}

func safeUtil(f func() (nvml.Utilization, nvml.Return)) (v nvml.Utilization, ret nvml.Return) {
	defer func() {
		if recover() != nil {
			v, ret = nvml.Utilization{}, nvml.ERROR_NOT_SUPPORTED
		}
	}()
	return f()
}

func safeRet(f func() nvml.Return) (ret nvml.Return) {
	defer func() {
		if recover() != nil {
			ret = nvml.ERROR_NOT_SUPPORTED
		}
	}()
	return f()
}

// Energy sources of a Summary.
const (
	SourceCounter    = "counter"    // NVML total-energy counter of every GPU
	SourceIntegrated = "integrated" // trapezoid integral of sampled power
	SourceMixed      = "mixed"      // counters on some GPUs, integrated power on others
	SourceNone       = "none"       // no power readings
)

// gpuState is what the sampler keeps per GPU.
type gpuState struct {
	Seen bool `json:"seen"`
	// Energy counter in mJ: first reading and latest reading.
	HasCounter   bool   `json:"has_counter"`
	CounterStart uint64 `json:"counter_start_mj"`
	CounterLast  uint64 `json:"counter_last_mj"`
	// CounterBaseJ is energy counted before the counter went backwards (driver reload).
	CounterBaseJ float64 `json:"counter_base_j,omitempty"`
	IntegratedJ  float64 `json:"integrated_j"`
	LastPowerW   float64 `json:"last_power_w"`
	// LastT is the time of the latest power reading (zero before the first).
	LastT   time.Time `json:"last_t,omitzero"`
	PowerOK bool      `json:"power_ok"`
	UtilSum float64   `json:"util_sum"`
	UtilN   int       `json:"util_n"`
	// Shared is set once the GPU had other tasks during a sample: from then on the task's
	// energy is SharedJ, its share of each interval's energy (see Sampler.SetShare).
	Shared  bool    `json:"shared,omitempty"`
	SharedJ float64 `json:"shared_j,omitempty"`
}

// totalJ is the GPU's energy since the first sample, whoever used it.
func (g *gpuState) totalJ() float64 {
	if g.HasCounter {
		return g.CounterBaseJ + float64(g.CounterLast-g.CounterStart)/1000
	}
	return g.IntegratedJ
}

func (g *gpuState) energyJ() float64 {
	if g.Shared {
		return g.SharedJ
	}
	if g.HasCounter {
		return g.CounterBaseJ + float64(g.CounterLast-g.CounterStart)/1000
	}
	return g.IntegratedJ
}

// Sampler samples the power, energy counter and utilisation of a task's GPUs.
type Sampler struct {
	mu     sync.Mutex
	gpus   []GPU
	state  []gpuState
	first  time.Time
	last   time.Time
	peakW  float64
	sumW   float64
	nPower int
	n      int
	// share, when set, gives the task's fraction of a GPU's energy for the interval ending
	// at a sample; ok false means the GPU is the task's alone.
	share func(uuid string) (frac float64, ok bool)
}

// SetShare attributes the energy of GPUs shared with other tasks: each sampling interval's
// energy of a GPU (counter or integrated power) is multiplied by share's fraction for it.
func (s *Sampler) SetShare(share func(uuid string) (float64, bool)) {
	s.mu.Lock()
	s.share = share
	s.mu.Unlock()
}

// NewSampler samples gpus (from ResolveGPUs).
func NewSampler(gpus []GPU) *Sampler {
	return &Sampler{gpus: gpus, state: make([]gpuState, len(gpus))}
}

// GPUs are the sampled devices.
func (s *Sampler) GPUs() []GPU { return s.gpus }

// Sample reads every GPU once at time t (monotonically increasing across calls).
func (s *Sampler) Sample(t time.Time) {
	type reading struct {
		counter   uint64
		counterOK bool
		powerW    float64
		powerOK   bool
		util      float64
		utilOK    bool
	}
	// Read outside the lock: NVML calls can take milliseconds.
	rs := make([]reading, len(s.gpus))
	for i, g := range s.gpus {
		r := &rs[i]
		if mj, ret := safeU64(g.dev.GetTotalEnergyConsumption); ret == nvml.SUCCESS {
			r.counter, r.counterOK = mj, true
		}
		if mw, ret := safeU32(g.dev.GetPowerUsage); ret == nvml.SUCCESS {
			r.powerW, r.powerOK = float64(mw)/1000, true
		}
		if u, ret := safeUtil(g.dev.GetUtilizationRates); ret == nvml.SUCCESS {
			r.util, r.utilOK = float64(u.Gpu), true
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.n == 0 {
		s.first = t
	}
	s.n++
	s.last = t
	fracs := make([]float64, len(s.gpus))
	shared := make([]bool, len(s.gpus))
	if s.share != nil {
		for i, g := range s.gpus {
			fracs[i], shared[i] = s.share(g.UUID)
		}
	}
	total, anyPower := 0.0, false
	for i := range s.gpus {
		g, r := &s.state[i], rs[i]
		before := g.totalJ()
		// The first reading decides: a GPU either has a counter for the whole run or not.
		if !g.Seen && r.counterOK {
			g.HasCounter, g.CounterStart, g.CounterLast = true, r.counter, r.counter
		}
		g.Seen = true
		if g.HasCounter && r.counterOK {
			if r.counter < g.CounterLast {
				// The counter restarted (NVIDIA driver reloaded): keep what was counted and
				// count on from the new origin; the gap itself is lost.
				g.CounterBaseJ += float64(g.CounterLast-g.CounterStart) / 1000
				g.CounterStart = r.counter
			}
			g.CounterLast = r.counter
		}
		if r.powerOK {
			if g.PowerOK && t.After(g.LastT) {
				g.IntegratedJ += (g.LastPowerW + r.powerW) / 2 * t.Sub(g.LastT).Seconds()
			}
			g.LastPowerW, g.LastT, g.PowerOK = r.powerW, t, true
			if shared[i] {
				total += r.powerW * fracs[i]
			} else {
				total += r.powerW
			}
			anyPower = true
		}
		if r.utilOK {
			g.UtilSum += r.util
			g.UtilN++
		}
		delta := g.totalJ() - before
		switch {
		case shared[i]:
			if !g.Shared {
				// Energy before the GPU was first shared was the task's alone.
				g.Shared, g.SharedJ = true, before
			}
			g.SharedJ += delta * fracs[i]
		case g.Shared:
			g.SharedJ += delta
		}
	}
	if anyPower {
		s.nPower++
		s.sumW += total
		s.peakW = max(s.peakW, total)
	}
}

// Run samples every interval until ctx is done, then takes a last sample.
func (s *Sampler) Run(ctx context.Context, interval time.Duration) {
	if interval <= 0 {
		interval = DefaultInterval
	}
	s.Sample(time.Now())
	tk := time.NewTicker(interval)
	defer tk.Stop()
	for {
		select {
		case <-ctx.Done():
			s.Sample(time.Now())
			return
		case t := <-tk.C:
			s.Sample(t)
		}
	}
}

// Summary is the telemetry of a run so far, all GPUs together.
type Summary struct {
	GPUs    int
	Names   []string
	EnergyJ float64
	// AvgPowerW is energy over the sampled duration; PeakPowerW the highest total reading.
	AvgPowerW    float64
	PeakPowerW   float64
	AvgUtilPct   float64
	Duration     time.Duration
	Samples      int
	EnergySource string
}

// Summary returns the totals so far.
func (s *Sampler) Summary() Summary {
	s.mu.Lock()
	defer s.mu.Unlock()
	sum := Summary{GPUs: len(s.gpus), PeakPowerW: s.peakW, Samples: s.n}
	for _, g := range s.gpus {
		sum.Names = append(sum.Names, g.Name)
	}
	if s.n > 0 {
		sum.Duration = s.last.Sub(s.first)
	}
	counters, integrated := 0, 0
	utilSum, utilN := 0.0, 0
	for i := range s.state {
		g := &s.state[i]
		switch {
		case g.HasCounter:
			counters++
		case g.PowerOK:
			integrated++
		}
		sum.EnergyJ += g.energyJ()
		if g.UtilN > 0 {
			utilSum += g.UtilSum / float64(g.UtilN)
			utilN++
		}
	}
	if utilN > 0 {
		sum.AvgUtilPct = utilSum / float64(utilN)
	}
	switch {
	case counters > 0 && integrated > 0:
		sum.EnergySource = SourceMixed
	case counters > 0:
		sum.EnergySource = SourceCounter
	case integrated > 0:
		sum.EnergySource = SourceIntegrated
	default:
		sum.EnergySource = SourceNone
	}
	if d := sum.Duration.Seconds(); d > 0 && sum.EnergySource != SourceNone {
		sum.AvgPowerW = sum.EnergyJ / d
	} else if s.nPower > 0 {
		sum.AvgPowerW = s.sumW / float64(s.nPower)
	}
	return sum
}

// Checkpoint is the sampler's state, saved so a restarted driver continues the same totals.
type Checkpoint struct {
	GPUs   []string   `json:"gpus"`
	State  []gpuState `json:"state"`
	First  time.Time  `json:"first,omitzero"`
	Last   time.Time  `json:"last,omitzero"`
	PeakW  float64    `json:"peak_w"`
	SumW   float64    `json:"sum_w"`
	NPower int        `json:"n_power"`
	N      int        `json:"n"`
}

// Checkpoint returns the sampler's state.
func (s *Sampler) Checkpoint() Checkpoint {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := Checkpoint{State: append([]gpuState(nil), s.state...), First: s.first, Last: s.last, PeakW: s.peakW,
		SumW: s.sumW, NPower: s.nPower, N: s.n}
	for _, g := range s.gpus {
		c.GPUs = append(c.GPUs, g.UUID)
	}
	return c
}

// Restore continues from a checkpoint of the same GPUs. Energy from counters stays exact
// across the gap; integrated power bridges it with a straight line.
func (s *Sampler) Restore(c Checkpoint) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(c.GPUs) != len(s.gpus) || len(c.State) != len(s.gpus) {
		return fmt.Errorf("telemetry checkpoint has %d GPUs, the task has %d", len(c.GPUs), len(s.gpus))
	}
	for i, g := range s.gpus {
		if c.GPUs[i] != g.UUID {
			return fmt.Errorf("telemetry checkpoint GPU %d is %s, the task has %s", i, c.GPUs[i], g.UUID)
		}
	}
	copy(s.state, c.State)
	s.first, s.last, s.peakW, s.sumW, s.nPower, s.n = c.First, c.Last, c.PeakW, c.SumW, c.NPower, c.N
	return nil
}
