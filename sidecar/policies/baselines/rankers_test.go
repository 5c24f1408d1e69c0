package baselines

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/hetgpu/hetgpu/model/cluster"
)

func TestF1Formula(t *testing.T) {
	j := func(id string, gpus int, est time.Duration, submitS int) cluster.Job {
		return cluster.Job{Namespace: "n", ID: id, Group: "g", GPUs: gpus, SubmitTime: t0.Add(time.Duration(submitS) * time.Second),
			Hetgpu: cluster.Annotations{EstRuntime: est}}
	}
	snap := &cluster.Snapshot{Now: t0.Add(10 * time.Hour), Pending: []cluster.Job{
		j("first", 4, 10*time.Hour, 0),             // s floored at 1: 870*0 + log10(36000)*4 = 18.2
		j("early-long", 8, 10*time.Hour, 100),      // 870*2 + 4.556*8 = 1776.4
		j("late-short", 1, 100*time.Second, 10000), // 870*4 + 2 = 3482
		j("mid", 2, time.Hour, 1000),               // 870*3 + 3.556*2 = 2617.1
	}}
	got, err := (&F1{}).Rank(context.Background(), snap, nil)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(ids(got)) != "[first early-long mid late-short]" {
		t.Fatalf("order %v", ids(got))
	}
	want := math.Log10(3600)*2 + 870*3
	if v := got[2].Features["f1"]; math.Abs(v-want) > 1e-9 {
		t.Fatalf("F1(mid) = %v, want %v", v, want)
	}
	// Same submit time: the shorter-narrower job first.
	snap.Pending = []cluster.Job{j("a", 8, time.Hour, 500), j("b", 1, time.Hour, 500)}
	got, _ = (&F1{}).Rank(context.Background(), snap, nil)
	if ids(got)[0] != "b" {
		t.Fatalf("order %v, want b first", ids(got))
	}
}

func TestSlurmMultifactor(t *testing.T) {
	nodes := []cluster.Node{gpuNode("a", "Tesla V100-SXM2-16GB", "v100", 8, "ready"), gpuNode("b", "Tesla V100-SXM2-16GB", "v100", 8, "ready")}
	now := t0.Add(48 * time.Hour)
	job := func(ns, id string, gpus int, waited time.Duration) cluster.Job {
		return cluster.Job{Namespace: ns, ID: id, Group: "g", GPUs: gpus, SubmitTime: now.Add(-waited)}
	}
	s := &Slurm{}
	// Namespace "heavy" has been using 8 GPUs for a day; "light" nothing.
	run := []cluster.Alloc{{Namespace: "heavy", JobID: "r", Group: "g", DeviceIDs: []string{"a-0", "a-1", "a-2", "a-3", "a-4", "a-5", "a-6", "a-7"}, GPUType: "v100"}}
	if _, err := s.Rank(context.Background(), &cluster.Snapshot{Now: now.Add(-24 * time.Hour), Nodes: nodes, Running: run}, nil); err != nil {
		t.Fatal(err)
	}
	snap := &cluster.Snapshot{Now: now, Nodes: nodes, Running: run, Pending: []cluster.Job{
		job("heavy", "h1", 1, 24*time.Hour), job("light", "l8", 8, 0), job("light", "l1", 1, 0)}}
	got, err := s.Rank(context.Background(), snap, nil)
	if err != nil {
		t.Fatal(err)
	}
	// fairshare: heavy U=1, S=1/2 -> 2^-2 = 0.25; light 2^0 = 1. weight 10000 dominates.
	if fmt.Sprint(ids(got)) != "[l1 l8 h1]" {
		t.Fatalf("order %v, want [l1 l8 h1]", ids(got))
	}
	h := got[2]
	wantP := 1000*(24.0/(7*24)) + 10000*0.25 + 1000*(1-1.0/16)
	if math.Abs(h.Score-wantP) > 1e-6 {
		t.Fatalf("priority of h1 = %v, want %v (features %v)", h.Score, wantP, h.Features)
	}
}
