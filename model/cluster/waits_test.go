package cluster

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// running is an allocation of group ns/id/g holding gpus on node.
func running(id, node string, gpus ...string) Alloc {
	typ := map[string]string{"a": "a100", "d": "a100", "v": "v100"}[node]
	return Alloc{Namespace: "ns", JobID: id, Group: "g", NodeID: node, DeviceIDs: gpus, GPUType: typ}
}

// preemptible is group ns/id/g with left of its runtime estimate.
func preemptible(id string, left time.Duration) Job {
	return Job{Namespace: "ns", ID: id, Group: "g", Hetgpu: Annotations{EstRuntime: left}}
}

func TestNextFree(t *testing.T) {
	const m = time.Minute
	// Node "a": 4 A100 (a-0 .. a-3), node "v": 2 V100 (v-0, v-1).
	nodes := []Node{freeNode("a", "a100", "NVIDIA A100", 4), freeNode("v", "v100", "Tesla V100", 2)}
	tests := []struct {
		name  string
		nodes []Node
		run   []Alloc
		pre   []Job
		ds    []Decision
		types []string
		need  int
		want  time.Duration
		// a100x is how many times faster than on the reference type jobs run on an A100 (0:
		// no speedup given).
		a100x float64
	}{
		{"the second of three ends", nodes,
			[]Alloc{running("j10", "a", "a-0"), running("j30", "a", "a-1"), running("j50", "a", "a-2", "a-3")},
			[]Job{preemptible("j10", 10*m), preemptible("j30", 30*m), preemptible("j50", 50*m)},
			nil, []string{"a100"}, 2, 30 * m, 0},
		{"a free GPU counts", nodes,
			[]Alloc{running("j10", "a", "a-0"), running("j30", "a", "a-1"), running("j50", "a", "a-2")},
			[]Job{preemptible("j10", 10*m), preemptible("j30", 30*m), preemptible("j50", 50*m)},
			nil, []string{"a100"}, 2, 10 * m, 0},
		{"one allocation frees several", nodes,
			[]Alloc{running("j50", "a", "a-0", "a-1", "a-2", "a-3")},
			[]Job{preemptible("j50", 50*m)},
			nil, []string{"a100"}, 3, 50 * m, 0},
		{"a holder that is not preemptible ends by its own estimate", nodes,
			[]Alloc{running("j10", "a", "a-0"), withLeft(running("fixed", "a", "a-1", "a-2", "a-3"), 25*m)},
			[]Job{preemptible("j10", 10*m)},
			nil, []string{"a100"}, 2, 25 * m, 0},
		{"no estimate never ends", nodes,
			[]Alloc{running("j10", "a", "a-0"), running("unknown", "a", "a-1", "a-2", "a-3")},
			[]Job{preemptible("j10", 10*m)},
			nil, []string{"a100"}, 2, 0, 0},
		{"the soonest usable type", nodes,
			[]Alloc{running("j40", "a", "a-0", "a-1", "a-2", "a-3"), running("j20", "v", "v-0", "v-1")},
			[]Job{preemptible("j40", 40*m), preemptible("j20", 20*m)},
			nil, []string{"a100", "v100"}, 2, 20 * m, 0},
		{"a type it cannot use does not count", nodes,
			[]Alloc{running("j40", "a", "a-0", "a-1", "a-2", "a-3"), running("j20", "v", "v-0", "v-1")},
			[]Job{preemptible("j40", 40*m), preemptible("j20", 20*m)},
			nil, []string{"a100"}, 2, 40 * m, 0},
		{"more than the type has", nodes,
			[]Alloc{running("j40", "a", "a-0", "a-1", "a-2", "a-3")},
			[]Job{preemptible("j40", 40*m)},
			nil, []string{"a100"}, 5, 0, 0},
		{"enough free already: unknown", nodes,
			[]Alloc{running("j40", "a", "a-0")},
			[]Job{preemptible("j40", 40*m)},
			nil, []string{"a100"}, 2, 0, 0},
		{"this round's decisions take free GPUs", nodes,
			[]Alloc{running("j40", "a", "a-0")},
			[]Job{preemptible("j40", 40*m)},
			[]Decision{{Assign: []Assignment{{NodeID: "a", InstanceIDs: []string{"a-1", "a-2", "a-3"}}}}},
			[]string{"a100"}, 1, 40 * m, 0},
		{"a shared GPU frees when its last holder ends", nodes,
			[]Alloc{running("j10", "a", "a-0", "a-1", "a-2", "a-3"), running("j60", "a", "a-0")},
			[]Job{preemptible("j10", 10*m), preemptible("j60", 60*m)},
			nil, []string{"a100"}, 4, 60 * m, 0},
		{"a shared GPU with a holder without estimate never frees", nodes,
			[]Alloc{running("j10", "a", "a-0", "a-1", "a-2", "a-3"), running("unknown", "a", "a-0")},
			[]Job{preemptible("j10", 10*m)},
			nil, []string{"a100"}, 4, 0, 0},
		{"a draining node's GPUs never free for new work",
			[]Node{freeNode("a", "a100", "NVIDIA A100", 2), func() Node { n := freeNode("d", "a100", "NVIDIA A100", 2); n.Draining = true; return n }()},
			[]Alloc{running("j10", "d", "d-0", "d-1"), running("j30", "a", "a-0", "a-1")},
			[]Job{preemptible("j10", 10*m), preemptible("j30", 30*m)},
			nil, []string{"a100"}, 2, 30 * m, 0},
		{"nothing wanted", nodes, nil, nil, nil, []string{"a100"}, 0, 0, 0},
		{"estimates are on the reference type", nodes,
			[]Alloc{running("j60", "a", "a-0", "a-1"), running("v60", "v", "v-0", "v-1")},
			[]Job{preemptible("j60", 60*m), preemptible("v60", 60*m)},
			nil, []string{"a100", "v100"}, 4, 30 * m, 2},
		{"a history estimate's time left", nodes,
			[]Alloc{running("h", "a", "a-0", "a-1", "a-2", "a-3")},
			[]Job{func() Job {
				j := preemptible("h", 5*m)
				j.Hetgpu.Est = EstimateInfo{Source: EstHistory, Left: 45 * m}
				return j
			}()},
			nil, []string{"a100"}, 1, 45 * m, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			snap := &Snapshot{Nodes: tt.nodes, Running: tt.run, Preemptible: tt.pre}
			var speedup func(*Job, string) float64
			if tt.a100x != 0 {
				speedup = func(_ *Job, typ string) float64 {
					if typ == "a100" {
						return tt.a100x
					}
					return 0
				}
			}
			if got := NewFreeSoon(snap, tt.ds, speedup).NextFree(tt.types, tt.need); got != tt.want {
				t.Errorf("NextFree(%v, %d) = %v, want %v", tt.types, tt.need, got, tt.want)
			}
		})
	}
}

func TestAboutDuration(t *testing.T) {
	for _, tt := range []struct {
		d    time.Duration
		want string
	}{
		{10 * time.Second, "about 1 min"},
		{7*time.Minute + 20*time.Second, "about 7 min"},
		{22 * time.Minute, "about 20 min"},
		{23 * time.Minute, "about 25 min"},
		{115 * time.Minute, "about 115 min"},
		{118 * time.Minute, "about 2 h"},
		{3*time.Hour + 20*time.Minute, "about 3 h"},
		{50 * time.Hour, "about 50 h"},
	} {
		if got := AboutDuration(tt.d); got != tt.want {
			t.Errorf("AboutDuration(%v) = %q, want %q", tt.d, got, tt.want)
		}
	}
}

func TestPreferredTypes(t *testing.T) {
	for _, tt := range []struct {
		thr  map[string]float64
		want []string
	}{
		{map[string]float64{"h100": 1400, "a100": 700, "v100": 300}, []string{"h100"}},
		{map[string]float64{"h100": 1400, "a100": 1200, "v100": 300}, []string{"h100", "a100"}},
		{map[string]float64{"a100": 1200, "h100": 1200, "v100": 300}, []string{"a100", "h100"}}, // ties by name
		{map[string]float64{"a100": 700, "v100": 0}, []string{"a100"}},                          // not predicted: not preferred
		{map[string]float64{"h100": 1400, "a100": 1300}, nil},                                   // both preferred: nothing to prefer
		{map[string]float64{"a100": 700}, nil},
		{map[string]float64{"a100": 0, "v100": 0}, nil},
		{nil, nil},
	} {
		if got := PreferredTypes(tt.thr); !slices.Equal(got, tt.want) {
			t.Errorf("PreferredTypes(%v) = %v, want %v", tt.thr, got, tt.want)
		}
	}
}

func TestHeldText(t *testing.T) {
	base := Wait{Kind: WaitCapacity, Rank: 3, Of: 12, GPUs: 2, Device: "nvidia/gpu"}
	with := func(f func(w *Wait)) Wait { w := base; f(&w); return w }
	for _, tt := range []struct {
		name string
		w    Wait
		want string
	}{
		{"plain", base, "held by hetgpu: rank 3 of 12, waiting for 2 GPUs of one type (nvidia/gpu); the cluster has such GPUs, none free now"},
		{"estimate and preferred", with(func(w *Wait) { w.FreeIn, w.Preferred = 20*time.Minute, []string{"a100", "h100"} }),
			"held by hetgpu: rank 3 of 12, waiting for 2 GPUs of one type (nvidia/gpu, A100 or H100 preferred), next free in about 20 min (estimate); the cluster has such GPUs, none free now"},
		{"no device", with(func(w *Wait) { w.Device, w.FreeIn, w.Preferred = "", 3*time.Hour, []string{"h100"} }),
			"held by hetgpu: rank 3 of 12, waiting for 2 GPUs of one type (H100 preferred), next free in about 3 h (estimate); the cluster has such GPUs, none free now"},
		{"one GPU, behind", Wait{Kind: WaitBehind, Rank: 1, Of: 1, GPUs: 1, FreeIn: 5 * time.Minute},
			"held by hetgpu: rank 1 of 1, waiting for 1 GPU, next free in about 5 min (estimate); GPUs free up for jobs ranked ahead first"},
		{"unranked", with(func(w *Wait) { w.Rank = 0 }), ""},
		{"queue kind", with(func(w *Wait) { w.Kind = WaitQueue }), ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := HeldText(&tt.w); got != tt.want {
				t.Errorf("HeldText = %q\nwant        %q", got, tt.want)
			}
		})
	}
	// The kind's words end the text whatever the estimate: a note is rewritten only when they
	// change (sidecar/backends/nomad reads them back).
	for _, d := range []time.Duration{0, time.Minute, 90 * time.Minute, 30 * time.Hour} {
		w := with(func(w *Wait) { w.FreeIn = d })
		if got, suffix := HeldText(&w), "; "+HeldKindWords(WaitCapacity); !strings.HasSuffix(got, suffix) {
			t.Errorf("FreeIn %v: %q does not end in %q", d, got, suffix)
		}
	}
}

// withLeft gives a running allocation the time left the backend read from its hetgpu.runtime.
func withLeft(a Alloc, left time.Duration) Alloc {
	a.Hetgpu.EstRuntime = left
	return a
}
