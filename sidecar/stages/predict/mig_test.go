package predict

import (
	"context"
	"math"
	"strings"
	"testing"

	"github.com/hetgpu/hetgpu/model/gpuspec"
)

// A MIG slice type is predicted from the parent's throughput times the slice's speed share,
// and runs on the slice replace the share for that workload.
func TestMIGSlicePrediction(t *testing.T) {
	p := defaultPredictor(t)
	j := job("ResNet-18", 64)
	parent := p.Predict(j, "a100", 1)
	if parent.Throughput <= 0 {
		t.Fatal("no a100 prediction")
	}
	const slice = "a100-mig-3g.20gb"
	share, _ := gpuspec.MIGSpeedShare(slice)
	e := p.Predict(j, slice, 1)
	if math.Abs(e.Throughput-share*parent.Throughput) > 1e-9*parent.Throughput || !strings.HasPrefix(e.Source, "mig-share/") {
		t.Fatalf("slice: %v (%s), want %v x %v", e.Throughput, e.Source, share, parent.Throughput)
	}
	if named := p.Predict(j, "NVIDIA A100-SXM4-40GB MIG 3g.20gb", 1); named.Throughput != e.Throughput {
		t.Errorf("by device name: %v, by type: %v", named.Throughput, e.Throughput)
	}
	if e.PowerW >= parent.PowerW || e.PowerW <= 0 {
		t.Errorf("slice power %v, parent %v", e.PowerW, parent.PowerW)
	}
	// Two runs on the slice at 0.3 and 0.48 of the parent's prediction.
	for i, f := range []float64{0.3, 0.48} {
		o := obs("ResNet-18", 64, "", 1, f*parent.Throughput, 0, 200+i)
		o.GPUName = "NVIDIA A100-SXM4-40GB MIG 3g.20gb"
		if err := p.Observe(context.Background(), o); err != nil {
			t.Fatal(err)
		}
	}
	after := p.Predict(j, slice, 1)
	if want := math.Sqrt(0.3*0.48) * parent.Throughput; math.Abs(after.Throughput-want) > 1e-6*want || !strings.HasPrefix(after.Source, "mig-observed/") {
		t.Errorf("after slice runs: %v (%s), want %v", after.Throughput, after.Source, want)
	}
	// Slice runs are not whole-A100 evidence.
	if p2 := p.Predict(j, "a100", 1).Throughput; math.Abs(p2-parent.Throughput) > 1e-9*parent.Throughput {
		t.Errorf("a100 prediction moved from %v to %v after slice runs", parent.Throughput, p2)
	}
	// Other slice types keep the share.
	if other := p.Predict(j, "a100-mig-1g.5gb", 1); !strings.HasPrefix(other.Source, "mig-share/") {
		t.Errorf("1g.5gb source %s", other.Source)
	}
}
