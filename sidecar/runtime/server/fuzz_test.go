package server_test

import (
	"math"
	"testing"
	"time"

	"github.com/hetgpu/hetgpu/sidecar/runtime/server"
	"github.com/hetgpu/hetgpu/sidecar/runtime/service"
)

// FuzzDecodeObservations: the run-record decoder and validation never panic, and whatever
// they accept is within the documented ranges.
func FuzzDecodeObservations(f *testing.F) {
	f.Add([]byte(`{"namespace":"default","job_id":"j","group":"train","gpu_type":"a100","gpus":2,"throughput":812.5,"energy_j":5e5,"runtime_s":600}`))
	f.Add([]byte(`[{"job_id":"j","group":"g","gpu_name":"Tesla T4","gpus":1,"samples_per_sec":100,"batch_size":8,"runtime_s":1,"alloc_id":"a","task":"t","partial":true}]`))
	f.Add([]byte(`{"job_id":"j","group":"g","gpu_type":"t4","gpus":1,"throughput":1e300,"runtime_s":100}`))
	f.Add([]byte(`{"job_id":"j","group":"g","gpu_type":"h100","gpus":1,"runtime_s":1,"time":"0001-01-01T00:00:00Z"}`))
	f.Add([]byte(`[1,2,{}]`))
	now := time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, data []byte) {
		obs, err := server.DecodeObservations(data)
		if err != nil {
			return
		}
		for i := range obs {
			o := obs[i]
			if service.Validate(&o, now) != nil {
				continue
			}
			for name, v := range map[string]float64{"throughput": o.Throughput, "energy_j": o.EnergyJ, "runtime_s": o.RuntimeS,
				"avg_power_w": o.AvgPowerW, "peak_power_w": o.PeakPowerW, "samples_per_sec": o.SamplesPerSec, "param_count": o.ParamCount} {
				if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
					t.Fatalf("accepted %s = %v", name, v)
				}
			}
			if o.RuntimeS <= 0 || o.RuntimeS > service.MaxRuntime.Seconds() || o.GPUs < 1 || o.GPUType == "" ||
				o.Time.After(now.Add(service.MaxClockSkew)) || o.Time.Before(service.MinObservationTime) ||
				len(o.ModelName) > service.MaxStringLen || o.Throughput > service.MaxStepsPerTFLOPS*100*float64(o.GPUs) {
				t.Fatalf("accepted an out-of-range record: %+v", o)
			}
		}
	})
}
