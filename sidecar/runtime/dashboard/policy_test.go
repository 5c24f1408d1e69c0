package dashboard

import (
	"testing"

	"github.com/hetgpu/hetgpu/sidecar/stages/rank"
)

// The learning page's provenance is the checkpoint the ranker holds, read as it is.
func TestPolicyInfo(t *testing.T) {
	ck, err := rank.DefaultCheckpoint()
	if err != nil || ck == nil {
		t.Fatalf("bundled policy: %v", err)
	}
	if got := policyInfo(nil); got != nil {
		t.Errorf("policyInfo(nil) = %+v, want nil (the heuristic)", got)
	}
	info := policyInfo(ck)
	if info == nil {
		t.Fatal("policyInfo(bundled) = nil")
	}
	// The bundled policy may be a residual start (no trained epoch beat the heuristic):
	// 0 epochs and no curve, but still its training's meta.
	if info.Meta["score"] == "" || len(info.Curve) != info.Epochs || info.Epochs > 0 && info.Curve[len(info.Curve)-1].Epoch != info.Epochs {
		t.Errorf("policyInfo(bundled): meta %v, %d epochs, curve %+v", info.Meta, info.Epochs, info.Curve)
	}
	if ck.Training != nil && len(ck.Training.Curve) > 0 {
		c := ck.Training.Curve[0]
		if got := info.Curve[0]; got.Epoch != c.Epoch || got.Reward != c.Reward || got.Evaluated != c.Evaluated {
			t.Errorf("curve[0] = %+v, want the checkpoint's %+v", got, c)
		}
	}
}
