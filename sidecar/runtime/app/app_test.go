package app

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/hetgpu/hetgpu/sidecar/learning/ppo"
	"github.com/hetgpu/hetgpu/sidecar/learning/rlsim"
	"github.com/hetgpu/hetgpu/sidecar/runtime/service"
	"github.com/hetgpu/hetgpu/sidecar/stages/rank"
)

// simConfig parses a test config and finishes it on a fresh state directory.
func simConfig(t *testing.T, src string) *Config { return mustConfig(t, src, t.TempDir()) }

// mustConfig parses a test config and finishes it with stateDir (the default when "").
func mustConfig(t *testing.T, src, stateDir string) *Config {
	t.Helper()
	c, err := ParseConfig("t.hcl", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if stateDir != "" {
		c.StateDir = stateDir
	}
	if err := c.Finish(); err != nil {
		t.Fatal(err)
	}
	return c
}

// The sidecar with no Nomad address runs on the simulated cluster and serves the same API.
func TestSimulatedSidecar(t *testing.T) {
	t.Setenv("NOMAD_ADDR", "")
	c := simConfig(t, `
listen    = "127.0.0.1:0"
reconcile = "200ms"
debounce  = "10ms"
simulator {
  trace = "synthetic:jobs=30,rate=3600,seed=3"
  speed = 20000
}
`)
	s, err := New(c, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	var addr string
	select {
	case addr = <-s.Addr:
	case <-time.After(10 * time.Second):
		t.Fatal("API did not start")
	}
	get := func(path string, v any) {
		t.Helper()
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
			t.Fatal(err)
		}
	}
	var h struct {
		Backend      string
		Rounds       int
		Decisions    int
		Observations int
		StateFile    string `json:"state_file"`
		Ranker       *struct {
			Policy, Reason string
			Verdict        *rank.Verdict
			History        *struct{ Runs, Observed int }
		}
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		get("/v1/health", &h)
		if h.Decisions >= 5 && h.Observations >= 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("simulated sidecar made %d decisions and %d observations in 20 s: %+v", h.Decisions, h.Observations, h)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if h.Backend != "simulated" || !strings.Contains(h.StateFile, "simulated") {
		t.Errorf("health = %+v", h)
	}
	// The health API names the ranking policy and why: the bundled policy's verdict decides.
	v, _ := bundledVerdict(t)
	wantPolicy := PolicyHeuristic
	if v.Beats() {
		wantPolicy = PolicyBundled
	}
	if h.Ranker == nil || h.Ranker.Policy != wantPolicy || h.Ranker.Reason == "" || h.Ranker.Verdict == nil || h.Ranker.Verdict.Result != v.Result {
		t.Errorf("health ranker = %+v, want policy %s with the bundled verdict %s", h.Ranker, wantPolicy, v)
	}
	// The sidecar's runtime history learns from the runs that finish (ranker.history).
	if h.Ranker == nil || h.Ranker.History == nil || h.Ranker.History.Observed < 1 {
		t.Errorf("health ranker.history = %+v, want the finished runs observed", h.Ranker)
	}
	var d struct {
		Decisions []struct {
			JobKey string `json:"job_key"`
			Status string
		}
	}
	get("/v1/decisions?limit=5", &d)
	if len(d.Decisions) == 0 || d.Decisions[0].Status != "pinned" {
		t.Errorf("decisions = %+v", d)
	}
	var ex struct{ Groups []struct{ Status string } }
	get("/v1/jobs/"+strings.Replace(strings.TrimSuffix(d.Decisions[0].JobKey, "/train"), "/", "/", 1)+"/explain", &ex)
	if len(ex.Groups) != 1 {
		t.Errorf("explain = %+v", ex)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run = %v", err)
	}
}

// Online tuning is on by default with the bundled policy (it carries its training state), off
// when configured so; a tuned policy in the state directory that beat the heuristic is
// preferred to the bundled one.
func TestStagesTuningAndPreemption(t *testing.T) {
	dir := t.TempDir()
	load := func(src string) *Config { return mustConfig(t, src, dir) }
	st, ref, err := Stages(load(""), dir, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	want := PolicyHeuristic
	if v, _ := bundledVerdict(t); v.Beats() {
		want = PolicyBundled
	}
	if st.Tuner == nil || st.Preemptor == nil || ref != want {
		t.Fatalf("defaults: tuner %v, preemptor %v, policy %q", st.Tuner != nil, st.Preemptor != nil, ref)
	}
	st, _, err = Stages(load("ranker {\n online_tuning = false\n}\npreemption {\n enabled = false\n}"), dir, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	if st.Tuner != nil || st.Preemptor != nil {
		t.Fatal("online_tuning = false or preemption.enabled = false ignored")
	}
	ck, err := rank.DefaultCheckpoint()
	if err != nil || ck == nil {
		t.Fatalf("bundled checkpoint: %v", err)
	}
	tuned := filepath.Join(dir, TunedPolicyFile)
	if err := ck.Save(tuned); err != nil {
		t.Fatal(err)
	}
	// A tuned policy ranks only with the evidence that online tuning adopted it over the heuristic.
	if _, ref, err = Stages(load(""), dir, hclog.NewNullLogger()); err != nil || ref != PolicyHeuristic {
		t.Fatalf("with a tuned policy saved without evidence: policy %q, err %v", ref, err)
	}
	ck.Meta = map[string]string{rank.MetaTunedBeatsBaseline: "true"}
	if err := ck.Save(tuned); err != nil {
		t.Fatal(err)
	}
	if _, ref, err = Stages(load(""), dir, hclog.NewNullLogger()); err != nil || ref != "tuned:"+tuned {
		t.Fatalf("with a tuned policy saved: policy %q, err %v", ref, err)
	}
	if err := os.WriteFile(tuned, []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err = Stages(load(""), dir, hclog.NewNullLogger()); err == nil || !strings.Contains(err.Error(), "delete it") {
		t.Fatalf("a corrupt tuned policy: %v", err)
	}
}

func bundledVerdict(t *testing.T) (*rank.Verdict, *rank.Checkpoint) {
	t.Helper()
	ck, err := rank.DefaultCheckpoint()
	if err != nil || ck == nil {
		t.Fatalf("bundled checkpoint: %v %v", ck, err)
	}
	v, err := rank.VerdictFromMeta(ck.Meta)
	if err != nil {
		t.Fatal(err)
	}
	return v, ck
}

// The ranking policy is decided by evidence unless configured: the bundled policy only with a
// held-out verdict that beats the heuristic, a tuned one only with the evidence its adoption
// recorded; ranker.policy forces one. The log line and the status name the verdict.
func TestChooseRanker(t *testing.T) {
	_, real := bundledVerdict(t)
	withVerdict := func(ratio float64) func() (*rank.Checkpoint, error) {
		v, err := rank.JudgeVerdict([]rank.VerdictRatio{{Cluster: "c", Metric: "jct", Ratio: ratio}, {Cluster: "c", Trace: "w", Metric: "bsld", Ratio: ratio}},
			rank.VerdictPooledMax, rank.VerdictWindowMax)
		if err != nil {
			t.Fatal(err)
		}
		ck := *real
		ck.Meta = v.SetMeta(map[string]string{"cluster": "c"})
		return func() (*rank.Checkpoint, error) { return &ck, nil }
	}
	noVerdict := func() (*rank.Checkpoint, error) {
		ck := *real
		ck.Meta = map[string]string{"cluster": "c"}
		return &ck, nil
	}
	none := func() (*rank.Checkpoint, error) { return nil, nil }
	file := filepath.Join(t.TempDir(), "p.json")
	if err := real.Save(file); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, config string
		bundled      func() (*rank.Checkpoint, error)
		tuned        map[string]string // meta of a tuned policy in the state directory; nil: none
		policy       string
		learned      bool
		tuner        bool
		reason, log  string
	}{
		{"bundled beats", "", withVerdict(0.9), nil, PolicyBundled, true, true, "beats the heuristic", "ranking with a learned policy"},
		{"bundled does not beat", "", withVerdict(1.17), nil, PolicyHeuristic, false, true, "does not beat the heuristic on held-out traces: not-better: worst pooled learned/heuristic ratio 1.1700", "worst_pooled_ratio=1.17"},
		{"bundled short of the margin", "", withVerdict(0.98), nil, PolicyHeuristic, false, true, "limit 0.9700", "ranking with the fallback heuristic"},
		{"bundled without a verdict", "", noVerdict, nil, PolicyHeuristic, false, true, "has no held-out verdict", "ranking with the fallback heuristic"},
		{"no bundled policy", "", none, nil, PolicyHeuristic, false, false, "no bundled policy", "ranking with the fallback heuristic"},
		{"forced bundled", `ranker { policy = "bundled:default" }`, withVerdict(1.17), nil, PolicyBundled, true, true, "forces it; held-out verdict not-better", "does not beat the heuristic on held-out traces"},
		{"forced heuristic", `ranker { policy = "heuristic" }`, withVerdict(0.9), nil, PolicyHeuristic, false, false, "configured", "ranking with the fallback heuristic"},
		{"forced file", `ranker { policy = "` + file + `" }`, none, nil, file, true, true, "forces it", "ranking with a learned policy"},
		{"tuned with evidence", "", withVerdict(1.17), map[string]string{rank.MetaTunedBeatsBaseline: "true", rank.MetaTunedReward: "0.0412"}, "tuned:", true, true, "mean reward 0.0412", "ranking with a learned policy"},
		{"tuned without evidence", "", withVerdict(0.9), map[string]string{"cluster": "c"}, PolicyHeuristic, false, true, "records no evidence", "ranking with the fallback heuristic"},
		{"tuned ignored when tuning is off", "ranker { online_tuning = false }", withVerdict(0.9), map[string]string{rank.MetaTunedBeatsBaseline: "true"}, PolicyBundled, true, false, "beats", "ranking with a learned policy"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			cfg := mustConfig(t, c.config, dir)
			tunedPath := filepath.Join(dir, TunedPolicyFile)
			if c.tuned != nil {
				ck := *real
				ck.Meta = c.tuned
				if err := ck.Save(tunedPath); err != nil {
					t.Fatal(err)
				}
			}
			ch, err := chooseRanker(cfg, tunedPath, c.bundled)
			if err != nil {
				t.Fatal(err)
			}
			want := c.policy
			if want == "tuned:" {
				want += tunedPath
			}
			if ch.status.Policy != want || ch.use != c.learned || !strings.Contains(ch.status.Reason, c.reason) {
				t.Fatalf("policy %q (learned %v), reason %q; want %q (learned %v), reason with %q", ch.status.Policy, ch.use, ch.status.Reason, want, c.learned, c.reason)
			}
			// The dashboard reads the ranking policy's provenance from the status: its checkpoint
			// while a learned policy ranks, none while the heuristic does.
			if (ch.status.Checkpoint != nil) != c.learned || c.learned && ch.status.Checkpoint != ch.ck {
				t.Fatalf("status checkpoint %p, learned %v; want the choice's checkpoint %p exactly when learned", ch.status.Checkpoint, c.learned, ch.ck)
			}
			if tuner := ch.ck != nil && ch.ck.Training != nil && cfg.Ranker.onlineTuning(); tuner != c.tuner {
				t.Fatalf("online tuning %v, want %v", tuner, c.tuner)
			}
			var b strings.Builder
			logRanker(hclog.New(&hclog.LoggerOptions{Output: &b, Level: hclog.Info}), ch)
			if !strings.Contains(b.String(), c.log) {
				t.Fatalf("log %q lacks %q", b.String(), c.log)
			}
		})
	}
	cfg := mustConfig(t, `ranker { policy = "bundled:default" }`, t.TempDir())
	if _, err := chooseRanker(cfg, filepath.Join(cfg.StateDir, TunedPolicyFile), none); err == nil || !strings.Contains(err.Error(), "no bundled policy") {
		t.Fatalf("forcing a bundled policy the build lacks: %v", err)
	}
}

// When online tuning adopts a policy the ranker state (health, store) switches to it with the
// step's evidence, and the tuner requires a step to beat the heuristic.
func TestTunerAdoptionUpdatesRankerState(t *testing.T) {
	dir := t.TempDir()
	c := mustConfig(t, "", dir)
	st, rs, err := StagesWithRanker(c, dir, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	lt, ok := st.Tuner.(*rlsim.LiveTuner)
	if !ok || !lt.Online.Tuner.BeatBaseline || lt.Online.OnAdopt == nil {
		t.Fatalf("tuner %T: want a live tuner that must beat the heuristic and reports adoptions", st.Tuner)
	}
	var changed []string
	rs.OnChange(func(s service.RankerStatus) { changed = append(changed, s.Policy) })
	ck := *lt.Online.Tuner.Good()
	ck.Meta = map[string]string{rank.MetaTunedReward: "0.0300", rank.MetaTunedEpisodes: "3", rank.MetaTunedRewardBefore: "-0.0100"}
	lt.Online.OnAdopt(&ck, ppo.StepResult{After: 0.03, Before: -0.01, Accepted: true, Episodes: 3})
	want := "tuned:" + filepath.Join(dir, TunedPolicyFile)
	if s := rs.Status(); s.Policy != want || s.Checkpoint != &ck || !strings.Contains(s.Reason, "mean reward 0.0300") || len(changed) != 1 || changed[0] != want {
		t.Fatalf("after adoption: %+v, changes %v; want policy %s", s, changed, want)
	}
}
