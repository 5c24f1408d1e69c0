package history

import (
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"
)

func newModel(t *testing.T, cfg Config) *Model {
	t.Helper()
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// runs returns n runs of job j lasting d each (keys unique by prefix).
func runs(prefix string, j Job, d time.Duration, n int) []Run {
	out := make([]Run, n)
	for i := range out {
		out[i] = Run{Key: fmt.Sprintf("%s-%d", prefix, i), Job: j, RuntimeS: d.Seconds()}
	}
	return out
}

func observeAll(t *testing.T, m *Model, rs []Run) {
	t.Helper()
	for _, r := range rs {
		if !m.Observe(r) {
			t.Fatalf("run %q not counted", r.Key)
		}
	}
}

func TestPriorBeforeAnyRun(t *testing.T) {
	m := newModel(t, Config{PriorMedian: 2 * time.Hour, PriorSigma: 1})
	e := m.Estimate(Job{Namespace: "ml", GPUs: 2}, 0)
	if e.Level != LevelPrior || e.Runs != 0 || e.Confidence != 0 {
		t.Fatalf("level %v runs %d confidence %v, want the prior with no runs", e.Level, e.Runs, e.Confidence)
	}
	if e.Median != 2*time.Hour || e.Sigma != 1 {
		t.Fatalf("median %v sigma %v, want the prior's 2h and 1", e.Median, e.Sigma)
	}
	// Not started: the log-normal's mean, median x e^(sigma²/2).
	want := 2 * math.Exp(0.5)
	if got := e.Left.Hours(); math.Abs(got-want) > 1e-3 {
		t.Fatalf("left %.4f h, want the mean %.4f h", got, want)
	}
}

// The most specific level with runs of its own decides, shrunk towards the levels above.
func TestLevels(t *testing.T) {
	resnet := Job{Namespace: "ml", Family: "train-resnet", Model: "resnet/ResNet-50", Batch: 64, GPUs: 4}
	cases := []struct {
		name  string
		runs  []Run
		ask   Job
		level Level
		count int
		// the median lies within [lo, hi]
		lo, hi time.Duration
	}{
		{"own job's runs", runs("a", resnet, 10*time.Minute, 20), resnet, LevelJob, 20, 9 * time.Minute, 12 * time.Minute},
		{"a new job of the same model", runs("a", resnet, 10*time.Minute, 20),
			Job{Namespace: "ml", Family: "other", Model: resnet.Model, Batch: 64, GPUs: 4}, LevelModel, 20, 9 * time.Minute, 12 * time.Minute},
		{"another batch size: the namespace's 4-GPU jobs", runs("a", resnet, 10*time.Minute, 20),
			Job{Namespace: "ml", Family: "other", Model: resnet.Model, Batch: 32, GPUs: 4}, LevelGPUs, 20, 9 * time.Minute, 12 * time.Minute},
		{"another GPU count: the namespace", runs("a", resnet, 10*time.Minute, 20),
			Job{Namespace: "ml", Family: "other", GPUs: 1}, LevelNamespace, 20, 9 * time.Minute, 13 * time.Minute},
		{"another namespace: the cluster", runs("a", resnet, 10*time.Minute, 20),
			Job{Namespace: "web", Family: "other", GPUs: 1}, LevelCluster, 20, 9 * time.Minute, 15 * time.Minute},
		{"one run moves a level little", runs("a", resnet, 10*time.Minute, 1),
			Job{Namespace: "web", GPUs: 1}, LevelCluster, 1, 40 * time.Minute, 59 * time.Minute},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := newModel(t, Config{})
			observeAll(t, m, c.runs)
			e := m.Estimate(c.ask, 0)
			if e.Level != c.level || e.Runs != c.count {
				t.Fatalf("level %v with %d runs, want %v with %d", e.Level, e.Runs, c.level, c.count)
			}
			if e.Median < c.lo || e.Median > c.hi {
				t.Fatalf("median %v, want %v to %v", e.Median, c.lo, c.hi)
			}
		})
	}
}

// Children of one parent share its history; the teams' runs stay apart.
func TestNamespacesAndFamiliesApart(t *testing.T) {
	m := newModel(t, Config{})
	observeAll(t, m, runs("short", Job{Namespace: "a", Family: "sweep", GPUs: 1}, 5*time.Minute, 30))
	observeAll(t, m, runs("long", Job{Namespace: "b", Family: "pretrain", GPUs: 1}, 20*time.Hour, 30))
	a := m.Estimate(Job{Namespace: "a", Family: "sweep", GPUs: 1}, 0)
	b := m.Estimate(Job{Namespace: "b", Family: "pretrain", GPUs: 1}, 0)
	if a.Level != LevelJob || b.Level != LevelJob {
		t.Fatalf("levels %v and %v, want job for both", a.Level, b.Level)
	}
	if !(a.Left < 15*time.Minute && b.Left > 10*time.Hour) {
		t.Fatalf("sweep %v left and pretrain %v: the teams' histories mixed", a.Left, b.Left)
	}
}

// What a job has run raises what is left of it: the mean residual life of a heavy tail.
func TestAttainedServiceRaisesWhatIsLeft(t *testing.T) {
	m := newModel(t, Config{})
	j := Job{Namespace: "ml", GPUs: 1}
	// A wide spread: half of the runs take a minute, half ten hours.
	observeAll(t, m, runs("s", j, time.Minute, 50))
	observeAll(t, m, runs("l", j, 10*time.Hour, 50))
	prev := time.Duration(0)
	for _, ran := range []time.Duration{0, time.Hour, 5 * time.Hour, 20 * time.Hour, 100 * time.Hour} {
		left := m.Estimate(j, ran).Left
		if ran > 0 && left <= prev {
			t.Fatalf("ran %v: left %v, not above %v at the shorter run", ran, left, prev)
		}
		prev = left
	}
}

func TestWindowForgetsAndKeysCountOnce(t *testing.T) {
	m := newModel(t, Config{Window: 10})
	j := Job{Namespace: "ml", GPUs: 1}
	observeAll(t, m, runs("old", j, 10*time.Hour, 10))
	observeAll(t, m, runs("new", j, time.Minute, 10))
	if e := m.Estimate(j, 0); e.Runs != 10 || e.Median > 5*time.Minute {
		t.Fatalf("%d runs, median %v: the window kept old runs", e.Runs, e.Median)
	}
	if m.Observe(Run{Key: "new-3", Job: j, RuntimeS: 60}) {
		t.Fatal("a run already in the window counted again")
	}
	// An evicted run's key may come back (a new run of the same name after a long while).
	if !m.Observe(Run{Key: "old-0", Job: j, RuntimeS: 60}) {
		t.Fatal("a key no longer in the window was refused")
	}
	for _, bad := range []float64{0, 0.5, -3, math.NaN(), math.Inf(1), 400 * 24 * 3600} {
		if m.Observe(Run{Job: j, RuntimeS: bad}) {
			t.Fatalf("runtime %v counted", bad)
		}
	}
	st := m.Stats()
	if st.Runs != 10 || st.Observed != 28 || st.Skipped != 7 || st.Namespaces != 1 {
		t.Fatalf("stats %+v, want 10 runs, 28 observed, 7 skipped, 1 namespace", st)
	}
}

func TestRunsRestoreRoundTrip(t *testing.T) {
	m := newModel(t, Config{Window: 50})
	observeAll(t, m, runs("a", Job{Namespace: "ml", Family: "x", Model: "bert", Batch: 8, GPUs: 2}, 30*time.Minute, 7))
	observeAll(t, m, runs("b", Job{Namespace: "cv", GPUs: 1}, 3*time.Hour, 5))
	saved := m.Runs()
	if len(saved) != 12 || saved[0].Key != "a-0" || saved[11].Key != "b-4" {
		t.Fatalf("runs %d, first %q, last %q: want 12, oldest first", len(saved), saved[0].Key, saved[len(saved)-1].Key)
	}
	n := newModel(t, Config{Window: 50})
	if err := n.Restore(saved); err != nil {
		t.Fatal(err)
	}
	// Restoring again (a new leader loading the same state twice) counts nothing twice.
	if err := n.Restore(saved); err != nil {
		t.Fatal(err)
	}
	for _, j := range []Job{{Namespace: "ml", Family: "x", Model: "bert", Batch: 8, GPUs: 2}, {Namespace: "cv", GPUs: 1}, {}} {
		a, b := m.Estimate(j, time.Hour), n.Estimate(j, time.Hour)
		if a != b {
			t.Fatalf("job %+v: restored %+v, original %+v", j, b, a)
		}
	}
	if err := n.Restore([]Run{{Key: "ok", RuntimeS: 60}, {Key: "broken", RuntimeS: -1}}); err == nil ||
		!strings.Contains(err.Error(), `run 1 ("broken"): runtime_s = -1`) {
		t.Fatalf("bad restore: %v, want the run, the field and the value named", err)
	}
	if n.Stats().Runs != 12 {
		t.Fatal("a failed restore added runs")
	}
}

func TestConfigErrors(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{Window: -1}, "window = -1"},
		{Config{PriorMedian: -time.Second}, "prior median = -1s"},
		{Config{PriorSigma: 4}, "prior sigma = 4"},
		{Config{PriorRuns: math.Inf(1)}, "prior runs = +Inf"},
		{Config{LevelRuns: -1}, "level runs = -1"},
		{Config{MinSigma: 5}, "min sigma = 5"},
	} {
		if _, err := New(c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.cfg, err, c.want)
		}
	}
}

func TestConcurrentUse(t *testing.T) {
	m := newModel(t, Config{Window: 100})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				j := Job{Namespace: fmt.Sprint("ns", w), GPUs: 1 + i%4}
				m.Observe(Run{Key: fmt.Sprint(w, "-", i), Job: j, RuntimeS: float64(60 + i)})
				_ = m.Estimate(j, time.Duration(i)*time.Second)
			}
		}()
	}
	wg.Wait()
	if st := m.Stats(); st.Runs != 100 || st.Observed != 800 {
		t.Fatalf("stats %+v, want a full window of 100 from 800 runs", st)
	}
}

func BenchmarkEstimate(b *testing.B) {
	m, _ := New(Config{})
	for i := range 2000 {
		m.Observe(Run{Key: fmt.Sprint(i), Job: Job{Namespace: fmt.Sprint("ns", i%7), Family: fmt.Sprint("job", i%50),
			Model: "resnet", Batch: 64, GPUs: 1 << (i % 4)}, RuntimeS: float64(60 + i*37%100000)})
	}
	j := Job{Namespace: "ns3", Family: "job10", Model: "resnet", Batch: 64, GPUs: 4}
	b.ReportAllocs()
	for b.Loop() {
		_ = m.Estimate(j, time.Hour)
	}
}

func TestGittins(t *testing.T) {
	mu := math.Log(3600)
	// A known runtime: what is left.
	if g := Gittins(mu, 0, 600); math.Abs(g-3000) > 1e-9 {
		t.Fatalf("sigma 0: %v, want 3000 s left", g)
	}
	// A narrow spread is close to what is left at the median.
	if g := Gittins(mu, 0.05, 0); math.Abs(g/3600-1) > 0.1 {
		t.Fatalf("sigma 0.05: %v s, want about an hour", g)
	}
	// A wide spread: a fresh job ranks far below its mean (most finish soon)...
	fresh := Gittins(mu, 2, 0)
	mean := 3600 * math.Exp(2)
	if !(fresh < mean/4) {
		t.Fatalf("sigma 2, fresh: %v s, want well below the mean %v s", fresh, mean)
	}
	// ...and one that outran most of its peers ranks long.
	for _, ran := range []float64{3600, 36000, 360000} {
		if g := Gittins(mu, 2, ran); !(g > fresh) {
			t.Fatalf("ran %v s: %v, want above the fresh job's %v", ran, g, fresh)
		}
	}
	if g := Gittins(mu, 1, 1e12); !(g > 1e12) {
		t.Fatalf("far in the tail: %v, want at least what it ran", g)
	}
}

func BenchmarkGittins(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		_ = Gittins(8, 1.7, 5000)
	}
}

func TestGittinsMix(t *testing.T) {
	mu, sigma := math.Log(3600), 1.0
	// A mixture of one component is that component's Gittins (up to the coarser quanta).
	for _, ran := range []float64{0, 1800, 36000} {
		one, mix := Gittins(mu, sigma, ran), GittinsMix(Component{1, mu, sigma}, Component{0, 0, 1}, ran)
		if math.Abs(mix/one-1) > 0.1 {
			t.Fatalf("ran %v: mixture of one %v, want about %v", ran, mix, one)
		}
	}
	// A long group (median 100 h) with a share of short jobs (median 10 min): a fresh job ranks
	// far below the long group alone, and once it has outrun the short ones it ranks long.
	long, short := math.Log(100*3600), math.Log(600)
	alone := Gittins(long, 0.5, 0)
	fresh := GittinsMix(Component{0.6, long, 0.5}, Component{0.4, short, 0.5}, 0)
	if !(fresh < alone/10) {
		t.Fatalf("fresh job of a mixed group ranks %v s, want well below the long group's %v s", fresh, alone)
	}
	outran := GittinsMix(Component{0.6, long, 0.5}, Component{0.4, short, 0.5}, 6*3600)
	if !(outran > alone/2) {
		t.Fatalf("a job that ran 6 h ranks %v s, want about the long group's %v s", outran, alone)
	}
}

func TestExploreRanksFreshJobsOfALongGroupShort(t *testing.T) {
	runs := func(m *Model) {
		for i := range 50 { // the cluster: short runs
			m.Observe(Run{Key: fmt.Sprint("s", i), Job: Job{Namespace: "ml", Family: fmt.Sprint("s", i), GPUs: 1}, RuntimeS: 600 + float64(i)})
		}
		for i := range 20 { // twenty 8-GPU runs, all long
			m.Observe(Run{Key: fmt.Sprint("w", i), Job: Job{Namespace: "ml", Family: fmt.Sprint("w", i), GPUs: 8}, RuntimeS: 90 * 3600})
		}
	}
	for _, tc := range []struct {
		name    string
		explore float64
		below   time.Duration
		above   time.Duration
	}{
		{"default", 0, 10 * time.Hour, 0},
		{"off", -1, 0, 15 * time.Hour},
	} {
		m, err := New(Config{Explore: tc.explore})
		if err != nil {
			t.Fatal(err)
		}
		runs(m)
		e := m.Estimate(Job{Namespace: "ml", Family: "new", GPUs: 8}, 0)
		if tc.below > 0 && !(e.Rank < tc.below) || tc.above > 0 && !(e.Rank > tc.above) {
			t.Errorf("%s: fresh 8-GPU job ranks %v, want below %v / above %v", tc.name, e.Rank, tc.below, tc.above)
		}
		if e.Level != LevelGPUs || e.Left < 30*time.Hour {
			t.Errorf("%s: level %v left %v, want the 8-GPU group's long mean left", tc.name, e.Level, e.Left)
		}
	}
	if _, err := New(Config{Explore: 1}); err == nil || !strings.Contains(err.Error(), "explore = 1") {
		t.Fatalf("explore 1: %v, want an error naming it", err)
	}
}

// A job of a model whose own kind has no finished run is a stranger to its GPU-count group,
// however many runs that group holds: it gets the whole exploration weight and ranks short,
// while a fresh job of a kind the history knows ranks as that kind.
func TestExploreStrangerOfAFullGroup(t *testing.T) {
	m, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 50 { // the cluster: short 1-GPU runs
		m.Observe(Run{Key: fmt.Sprint("s", i), Job: Job{Namespace: "ml", Family: fmt.Sprint("s", i), Model: "tiny", GPUs: 1}, RuntimeS: 600 + float64(i)})
	}
	for i := range 60 { // sixty 2-GPU runs of one long kind: the 2-GPU group is sure of itself
		m.Observe(Run{Key: fmt.Sprint("l", i), Job: Job{Namespace: "ml", Family: fmt.Sprint("l", i), Model: "lm", Batch: 5, GPUs: 2}, RuntimeS: 30 * 3600})
	}
	known := m.Estimate(Job{Namespace: "ml", Family: "k", Model: "lm", Batch: 5, GPUs: 2}, 0)
	stranger := m.Estimate(Job{Namespace: "ml", Family: "n", Model: "recommendation", Batch: 512, GPUs: 2}, 0)
	unnamed := m.Estimate(Job{Namespace: "ml", Family: "u", GPUs: 2}, 0)
	if known.Level != LevelModel || stranger.Level != LevelGPUs || unnamed.Level != LevelGPUs {
		t.Fatalf("levels known %v stranger %v unnamed %v, want model, gpus, gpus", known.Level, stranger.Level, unnamed.Level)
	}
	if !(stranger.Rank < 4*time.Hour) || !(known.Rank > 15*time.Hour) {
		t.Errorf("fresh stranger ranks %v (want < 4h), fresh job of the known long kind %v (want > 15h)", stranger.Rank, known.Rank)
	}
	// Without a model there is no kind to be a stranger to: the 2-GPU group's confidence holds.
	if !(unnamed.Rank > 2*stranger.Rank) {
		t.Errorf("job without a model ranks %v, want well above the stranger's %v", unnamed.Rank, stranger.Rank)
	}
	// Both read the same time left: exploration moves the rank only.
	if stranger.Left != unnamed.Left {
		t.Errorf("time left stranger %v, unnamed %v: want the 2-GPU group's for both", stranger.Left, unnamed.Left)
	}
}
