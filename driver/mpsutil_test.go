package driver

import (
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/hashicorp/go-hclog"

	"github.com/hetgpu/hetgpu/device/fake"
	"github.com/hetgpu/hetgpu/driver/telemetry"
	"github.com/hetgpu/hetgpu/internal/mpsshare"
)

func TestMeasuredShare(t *testing.T) {
	ab := []mpsshare.Client{{TaskID: "a", ThreadPct: 50, PID: 100}, {TaskID: "b", ThreadPct: 50, PID: 200}}
	// 100 has a child 105 (the trainer under a launcher script).
	tree := func(pid int) []int {
		if pid == 100 {
			return []int{100, 105}
		}
		return []int{pid}
	}
	sample := func(pid, sm uint32) nvml.ProcessUtilizationSample {
		return nvml.ProcessUtilizationSample{Pid: pid, SmUtil: sm}
	}
	tests := []struct {
		name     string
		clients  []mpsshare.Client
		samples  []nvml.ProcessUtilizationSample
		want     float64
		measured bool
	}{
		{"80/20 despite caps 50/50", ab, []nvml.ProcessUtilizationSample{sample(100, 80), sample(200, 20)}, 0.8, true},
		{"child process counts for its task", ab, []nvml.ProcessUtilizationSample{sample(105, 30), sample(100, 30), sample(200, 20)}, 0.75, true},
		{"samples of one PID add up", ab, []nvml.ProcessUtilizationSample{sample(100, 10), sample(100, 10), sample(200, 60)}, 0.25, true},
		{"MPS server sample ignored", ab, []nvml.ProcessUtilizationSample{sample(7, 90), sample(100, 40), sample(200, 60)}, 0.4, true},
		{"idle co-runner gets nothing", ab, []nvml.ProcessUtilizationSample{sample(200, 60)}, 0, true},
		{"measured total 0: even among three clients",
			append(slices.Clone(ab), mpsshare.Client{TaskID: "c", ThreadPct: 25, PID: 300}),
			[]nvml.ProcessUtilizationSample{sample(100, 0), sample(300, 0)}, 1.0 / 3, true},
		{"only the MPS server: fallback", ab, []nvml.ProcessUtilizationSample{sample(7, 90)}, 1, false},
		{"no samples: fallback", ab, nil, 1, false},
		{"clients without PIDs: fallback", []mpsshare.Client{{TaskID: "a"}, {TaskID: "b"}}, []nvml.ProcessUtilizationSample{sample(100, 50)}, 1, false},
		{"task not a client", ab[1:], []nvml.ProcessUtilizationSample{sample(200, 50)}, 1, false},
	}
	for _, tc := range tests {
		got, measured := measuredShare(tc.clients, "a", tc.samples, tree)
		if math.Abs(got-tc.want) > 1e-12 || measured != tc.measured {
			t.Errorf("%s: share %v measured %t, want %v %t", tc.name, got, measured, tc.want, tc.measured)
		}
	}
}

// Two slot tasks on one fake GPU, sampled like the driver does: each interval's energy is
// split by the per-process utilisation the fake GPU reports for the tasks' PIDs, or by the
// thread caps when NVML has no samples of the clients.
func TestSharedEnergyFollowsMeasuredUtilisation(t *testing.T) {
	const pidA, pidB, pidServer = 1001, 1002, 999
	tests := []struct {
		name         string
		capA, capB   int
		loadA, loadB float64 // per-process SM load on the fake GPU; 0: not listed
		serverLoad   float64 // the MPS server's own process
		queryErr     nvml.Return
		wantA        float64 // task a's fraction of the GPU's energy
	}{
		{name: "caps 50/50, measured 80/20", capA: 50, capB: 50, loadA: 0.8, loadB: 0.2, wantA: 0.8},
		{name: "caps 75/25, measured 30/60", capA: 75, capB: 25, loadA: 0.3, loadB: 0.6, wantA: 1.0 / 3},
		{name: "no samples: caps 25/75", capA: 25, capB: 75, wantA: 0.25},
		{name: "only the MPS server listed: caps 25/75", capA: 25, capB: 75, serverLoad: 0.9, wantA: 0.25},
		{name: "NOT_SUPPORTED: caps 60/40", capA: 60, capB: 40, loadA: 0.8, loadB: 0.2, queryErr: nvml.ERROR_NOT_SUPPORTED, wantA: 0.6},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			now := time.Unix(5000, 0)
			fleet, err := fake.New(fake.Spec{GPUs: []string{"1x V100"}, Now: func() time.Time { return now }})
			if err != nil {
				t.Fatal(err)
			}
			uuid := fleet.UUIDs()[0]
			fleet.SetLoad(0, 0.85, 0.5, 0)
			fleet.SetProcessLoad(0, pidA, tc.loadA)
			fleet.SetProcessLoad(0, pidB, tc.loadB)
			fleet.SetProcessLoad(0, pidServer, tc.serverLoad)
			if tc.queryErr != nvml.SUCCESS {
				fleet.SetError(0, "utilization", tc.queryErr)
			}
			root := t.TempDir()
			mgr := newMPSManager(hclog.NewNullLogger(), filepath.Join(root, "pipe"), filepath.Join(root, "log"), fakeMPS{})
			samplers := map[string]*telemetry.Sampler{}
			for _, c := range []mpsshare.Client{{TaskID: "a", ThreadPct: tc.capA}, {TaskID: "b", ThreadPct: tc.capB}} {
				if _, err := mgr.Attach(uuid, c); err != nil {
					t.Fatal(err)
				}
				gpus, err := telemetry.ResolveGPUs(fleet, uuid)
				if err != nil {
					t.Fatal(err)
				}
				s := telemetry.NewSampler(gpus)
				s.SetShare((&utilShare{lib: fleet, mgr: mgr, gpu: uuid, taskID: c.TaskID, tree: procTree(root)}).share)
				samplers[c.TaskID] = s
			}
			for id, pid := range map[string]int{"a": pidA, "b": pidB} {
				if c, err := mgr.SetPID(uuid, id, pid); err != nil || c.PID != pid {
					t.Fatalf("SetPID(%s) = %+v, %v", id, c, err)
				}
			}
			gpus, _ := telemetry.ResolveGPUs(fleet, uuid)
			whole := telemetry.NewSampler(gpus)
			for step := range 4 {
				for _, s := range []*telemetry.Sampler{samplers["a"], samplers["b"], whole} {
					s.Sample(now)
				}
				if step < 3 {
					now = now.Add(10 * time.Second)
				}
			}
			total := whole.Summary().EnergyJ
			a, b := samplers["a"].Summary().EnergyJ, samplers["b"].Summary().EnergyJ
			if total <= 0 || math.Abs(a/total-tc.wantA) > 1e-6 || math.Abs(b/total-(1-tc.wantA)) > 1e-6 {
				t.Errorf("energy a %.1f J b %.1f J of %.1f J: a's share %.4f, want %.4f", a, b, total, a/total, tc.wantA)
			}
		})
	}
}

func TestProcTree(t *testing.T) {
	child := exec.Command("sleep", "30")
	if err := child.Start(); err != nil {
		t.Skip("no sleep binary:", err)
	}
	defer func() { _ = child.Process.Kill(); _ = child.Wait() }()
	got := procTree("/proc")(os.Getpid())
	if !slices.Contains(got, os.Getpid()) || !slices.Contains(got, child.Process.Pid) {
		t.Errorf("tree of %d = %v, want it and its child %d", os.Getpid(), got, child.Process.Pid)
	}
	if got := procTree(t.TempDir())(42); !slices.Equal(got, []int{42}) {
		t.Errorf("tree of an unknown PID = %v, want [42]", got)
	}
}
