package nomad

import (
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

func TestReadings(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	i := func(v int64) *int64 { return &v }
	s := func(v string) *string { return &v }
	at := time.Unix(100, 0)
	for _, tc := range []struct {
		name  string
		attrs map[string]*api.StatValue
		check func(t *testing.T, power, limit, util, used, total, temp *float64)
	}{
		{"hetgpu device plugin", map[string]*api.StatValue{
			"power_draw":      {FloatNumeratorVal: f(212.5), Unit: "W"},
			"power_limit":     {FloatNumeratorVal: f(300), Unit: "W"},
			"gpu_utilization": {IntNumeratorVal: i(75), Unit: "%"},
			"memory":          {IntNumeratorVal: i(1024), IntDenominatorVal: i(16384), Unit: "MiB"},
			"temperature":     {IntNumeratorVal: i(64), Unit: "C"},
		}, func(t *testing.T, power, limit, util, used, total, temp *float64) {
			if *power != 212.5 || *limit != 300 || *util != 75 || *used != 1024 || *total != 16384 || *temp != 64 {
				t.Errorf("%g %g %g %g %g %g", *power, *limit, *util, *used, *total, *temp)
			}
		}},
		{"NVIDIA device plugin", map[string]*api.StatValue{
			"Power usage":     {IntNumeratorVal: i(70000), Unit: "mW"},
			"GPU utilization": {IntNumeratorVal: i(3), Unit: "%"},
			"Memory state":    {IntNumeratorVal: i(10), IntDenominatorVal: i(15360), Unit: "MiB"},
			"Temperature":     {IntNumeratorVal: i(40), Unit: "C"},
		}, func(t *testing.T, power, limit, util, used, total, temp *float64) {
			if *power != 70 || limit != nil || *util != 3 || *used != 10 || *total != 15360 || *temp != 40 {
				t.Errorf("power %g limit %v util %g memory %g/%g temp %g", *power, limit, *util, *used, *total, *temp)
			}
		}},
		{"failed readings stay missing", map[string]*api.StatValue{
			"power_draw":   {StringVal: s("N/A")},
			"temperature":  nil,
			"nvlink_peers": {StringVal: s("GPU-1,GPU-2")},
		}, func(t *testing.T, power, limit, util, used, total, temp *float64) {
			if power != nil || limit != nil || util != nil || used != nil || total != nil || temp != nil {
				t.Errorf("a failed or unknown stat became a reading")
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ds := readings(&api.StatObject{Attributes: tc.attrs}, at)
			if !ds.Time.Equal(at) {
				t.Errorf("time %v", ds.Time)
			}
			tc.check(t, ds.PowerW, ds.PowerLimitW, ds.UtilPct, ds.MemUsedMiB, ds.MemTotalMiB, ds.TempC)
		})
	}
}
