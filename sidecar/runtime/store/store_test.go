package store

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hetgpu/hetgpu/model/cluster"
)

func TestSurvivesRestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state", "sidecar.db")
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	obs := cluster.Observation{Namespace: "default", JobID: "j", Group: "g", GPUType: "a100", GPUs: 2, Throughput: 800, RuntimeS: 60, Time: t0}
	if _, err := s.AddObservation(obs, "driver", t0); err != nil {
		t.Fatal(err)
	}
	d := &DecisionRecord{Time: t0, JobKey: "default/j/g", Namespace: "default", JobID: "j", Group: "g", Status: StatusPinned,
		Decision: &cluster.Decision{Namespace: "default", JobID: "j", Group: "g", GPUType: "a100",
			Assign: []cluster.Assignment{{NodeID: "n1", DeviceGroup: "nvidia/gpu/A100", InstanceIDs: []string{"GPU-1", "GPU-2"}}}},
		Estimates: []Estimate{{GPUType: "a100", GPUs: 2, Throughput: 810, Chosen: true}}}
	if err := s.PutDecision(d); err != nil {
		t.Fatal(err)
	}
	if fresh, _ := s.MarkLearned("run-1", t0); !fresh {
		t.Fatal("first MarkLearned not fresh")
	}
	if err := s.SetPolicyCheckpoint("bundled:default@v3"); err != nil {
		t.Fatal(err)
	}
	// A second process cannot open the same file.
	if _, err := Open(path, Options{}); err == nil || !strings.Contains(err.Error(), "another") {
		t.Errorf("second open: %v, want a lock error", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s, err = Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var got []ObservationRecord
	_ = s.Observations(func(r ObservationRecord) error { got = append(got, r); return nil })
	if len(got) != 1 || got[0].Obs != obs || got[0].Source != "driver" {
		t.Errorf("observations after restart = %+v", got)
	}
	r, ok := s.Latest("default/j/g")
	if !ok || r.Decision == nil || r.Decision.Assign[0].InstanceIDs[1] != "GPU-2" || r.Estimates[0].Throughput != 810 {
		t.Errorf("decision after restart = %+v", r)
	}
	if fresh, _ := s.MarkLearned("run-1", t0); fresh {
		t.Error("learned run forgotten after restart")
	}
	if s.PolicyCheckpoint() != "bundled:default@v3" {
		t.Errorf("policy = %q", s.PolicyCheckpoint())
	}
	// The record's content claim survives the restart: the same record again is a duplicate.
	if out, err := s.AddObservations([]NewObservation{{Obs: obs, Source: "driver"}}, t0); err != nil || !out[0].Duplicate {
		t.Errorf("same record after restart = %+v, %v; want a duplicate", out, err)
	}
}

func TestBoundedHistory(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "s.db"), Options{MaxObservations: 5, MaxHistory: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := 0; i < 10; i++ {
		_, _ = s.AddObservation(cluster.Observation{JobID: "j", RuntimeS: float64(i)}, "sidecar", time.Now())
		_ = s.PutDecision(&DecisionRecord{JobKey: "ns/j/g" + string(rune('a'+i%2)), Status: StatusShadow})
	}
	if n := s.ObservationCount(); n != 5 {
		t.Errorf("observations kept = %d, want 5", n)
	}
	var first float64 = -1
	_ = s.Observations(func(r ObservationRecord) error {
		if first < 0 {
			first = r.Obs.RuntimeS
		}
		return nil
	})
	if first != 5 {
		t.Errorf("oldest kept observation = %v, want 5 (oldest dropped first)", first)
	}
	rec := s.Recent(100, 0)
	if len(rec) != 3 || rec[0].Seq != 10 || rec[2].Seq != 8 {
		t.Errorf("history = %+v", rec)
	}
	if len(s.Recent(100, 9)) != 1 {
		t.Error("Recent after seq 9")
	}
	if got := s.LatestForJob("ns", "j"); len(got) != 2 {
		t.Errorf("latest per group = %d, want 2", len(got))
	}
	if err := s.UpdateLatest("ns/j/gb", func(r *DecisionRecord) { r.Shadow = &Shadow{SameGPUType: true} }); err != nil {
		t.Fatal(err)
	}
	if r, _ := s.Latest("ns/j/gb"); r.Shadow == nil || !r.Shadow.SameGPUType {
		t.Errorf("update lost: %+v", r)
	}
	if rec := s.Recent(1, 0); rec[0].JobKey == "ns/j/gb" && rec[0].Shadow == nil {
		t.Error("history not updated with the latest record")
	}
}
