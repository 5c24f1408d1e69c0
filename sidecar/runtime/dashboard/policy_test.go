package dashboard

import (
	"path/filepath"
	"testing"

	"github.com/hetgpu/hetgpu/sidecar/stages/rank"
)

func TestLoadPolicy(t *testing.T) {
	ck, err := rank.DefaultCheckpoint()
	if err != nil || ck == nil {
		t.Fatalf("bundled policy: %v", err)
	}
	path := filepath.Join(t.TempDir(), "ranker-tuned.json")
	if err := ck.Save(path); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		ref     string
		want    bool
		wantErr bool
	}{
		{"bundled:default", true, false},
		{"tuned:" + path, true, false},
		{path, true, false},
		{"heuristic (no bundled policy)", false, false},
		{"", false, false},
		{filepath.Join(t.TempDir(), "missing.json"), false, true},
	} {
		info, err := loadPolicy(tc.ref)
		if (err != nil) != tc.wantErr || (info != nil) != tc.want {
			t.Errorf("loadPolicy(%q) = %+v, %v", tc.ref, info, err)
			continue
		}
		if info == nil {
			continue
		}
		// The bundled policy may be a residual start (no trained epoch beat the heuristic):
		// 0 epochs and no curve, but still its training's meta.
		if info.Meta["score"] == "" || len(info.Curve) != info.Epochs || info.Epochs > 0 && info.Curve[len(info.Curve)-1].Epoch != info.Epochs {
			t.Errorf("loadPolicy(%q): meta %v, %d epochs, curve %+v", tc.ref, info.Meta, info.Epochs, info.Curve)
		}
	}
}
