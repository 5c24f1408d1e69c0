package sim_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/hetgpu/hetgpu/model/cluster"
	"github.com/hetgpu/hetgpu/sidecar/place"
	"github.com/hetgpu/hetgpu/sidecar/sched"
	"github.com/hetgpu/hetgpu/sidecar/sim"
	"github.com/hetgpu/hetgpu/sidecar/trace"
)

// estRecorder ranks in arrival order and records the runtime estimate of every job it ranks.
type estRecorder struct {
	place.FIFO
	at  []time.Time
	key []string
	est []time.Duration
}

func (r *estRecorder) Rank(ctx context.Context, snap *cluster.Snapshot, pred sched.Predictor) ([]sched.Ranked, error) {
	for _, j := range snap.Pending {
		r.at = append(r.at, snap.Now)
		r.key = append(r.key, j.Key())
		r.est = append(r.est, j.Hetgpu.EstRuntime)
	}
	return r.FIFO.Rank(ctx, snap, pred)
}

// TestLiveEstimates: by default a job's noisy estimate is its remaining runtime times its error
// factor; with LiveEstimates it is its whole runtime times the factor read after the time it has
// run as the Nomad backend reads hetgpu.runtime (cluster.EstimateModel with EstimateError). The
// job runs 1,000 s on the reference V100 and is preempted (and restarted) at 500 s.
func TestLiveEstimates(t *testing.T) {
	jt := "ResNet-50 (batch size 32)"
	thr, _ := table(t).Measured(jt, "v100", 1)
	tr := &trace.Trace{Name: "e", Jobs: []trace.Job{{ID: "x", JobType: jt, Model: "ResNet-50", BatchSize: 32, GPUs: 1, TotalSteps: 1000 * thr}}}
	s := oneClass(t, "Tesla V100-SXM2-16GB", 1, 1)
	est := sim.Estimates{Seed: 7}
	for _, c := range []struct {
		live  bool
		sigma float64
	}{{false, 0}, {true, 0}, {true, 0.5}} {
		live := c.live
		rec := &estRecorder{}
		p := &sim.PipelinePolicy{PolicyName: "est", Estimates: est,
			Stages: sched.Stages{Ranker: rec, Placer: place.FirstFit{}, Preemptor: &preemptOnce{}, Predictor: sim.TablePredictor{Table: table(t)}}}
		if _, err := sim.Simulate(context.Background(), sim.Setup{Spec: s, Throughput: table(t), Trace: tr, LiveEstimates: live, EstimateError: c.sigma}, p, nil); err != nil {
			t.Fatal(err)
		}
		if len(rec.at) < 2 {
			t.Fatalf("live %v: %d estimates recorded, want the arrival's and the preemption round's", live, len(rec.at))
		}
		f := est.Factor(rec.key[0])
		if math.Abs(f-1) < 0.05 {
			t.Fatalf("seed gives factor %v: too close to 1 to tell the models apart", f)
		}
		t0 := rec.at[0]
		checked := 0
		for i := range rec.at {
			ran := rec.at[i].Sub(t0).Seconds()
			want := (1000 - ran) * f
			if live {
				want = cluster.EstimateModel{Sigma: c.sigma}.Remaining(time.Duration(1000*f*1e9), time.Duration(ran*1e9)).Seconds()
			}
			if live && c.sigma == 0 && math.Abs(want-math.Max(1000*f-ran, 60)) > 1e-6 {
				t.Fatalf("the trusting model gives %v, want the estimate minus the time run", want)
			}
			if got := rec.est[i].Seconds(); math.Abs(got-want) > 1 {
				t.Errorf("live %v, after %v s: estimate %v s, want %v s (factor %.3f)", live, ran, got, want, f)
			}
			if ran > 0 {
				checked++
			}
		}
		if checked == 0 {
			t.Errorf("live %v: no estimate recorded after the job started", live)
		}
	}
}
