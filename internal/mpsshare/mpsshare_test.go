package mpsshare

import (
	"math"
	"testing"
)

func TestFakeSpeed(t *testing.T) {
	for _, tc := range []struct {
		n    int
		want float64
	}{{0, 1}, {1, 1}, {2, 1 / 1.3}, {4, 1 / 1.9}} {
		if got := FakeSpeed(tc.n); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("FakeSpeed(%d) = %v, want %v", tc.n, got, tc.want)
		}
	}
}

func TestRegistry(t *testing.T) {
	dir := t.TempDir()
	if len(Clients(dir)) != 0 {
		t.Fatal("clients in an empty dir")
	}
	for _, c := range []Client{{TaskID: "alloc-b/train/1", ThreadPct: 50}, {TaskID: "alloc-a/train/2", ThreadPct: 25, ModelName: "LM"}} {
		if err := Register(dir, c); err != nil {
			t.Fatal(err)
		}
	}
	got := Clients(dir)
	if len(got) != 2 || got[0].TaskID != "alloc-a/train/2" || got[0].ModelName != "LM" || got[1].ThreadPct != 50 {
		t.Fatalf("clients = %+v", got)
	}
	if err := Unregister(dir, "alloc-a/train/2"); err != nil {
		t.Fatal(err)
	}
	if err := Unregister(dir, "alloc-a/train/2"); err != nil {
		t.Errorf("second unregister: %v", err)
	}
	if got := Clients(dir); len(got) != 1 || got[0].TaskID != "alloc-b/train/1" {
		t.Errorf("after unregister: %+v", got)
	}
}
