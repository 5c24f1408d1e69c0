package estimates

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/hetgpu/hetgpu/model/cluster"
)

// TestSetPerNamespace: a team that pads its estimates threefold and one that halves them are
// each read with their own habit; a namespace never seen is read with the cluster's; the
// samples a set saves give a new one the same models.
func TestSetPerNamespace(t *testing.T) {
	set, err := NewSet(Config{Prior: cluster.EstimateModel{Sigma: 0.5}})
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(7, 8))
	for i := range 400 {
		ns, habit := "pad", math.Log(3)
		if i%2 == 1 {
			ns, habit = "trim", math.Log(0.5)
		}
		est := time.Duration((0.5 + r.Float64()) * float64(time.Hour))
		// The estimate is the truth times the habit: log(true / estimate) = -log(habit) + noise.
		actual := time.Duration(float64(est) * math.Exp(-habit+0.3*r.NormFloat64()))
		set.ObserveRun(ns, fmt.Sprintf("%s-%d", ns, i), est, actual)
	}
	pad, trim, other := set.Model("pad"), set.Model("trim"), set.Model("new-team")
	// 200 runs each against the cluster's model weighted as 20 runs.
	if math.Abs(pad.Bias+math.Log(3)) > 0.15 || math.Abs(trim.Bias-math.Log(2)) > 0.15 {
		t.Errorf("biases pad %.3f trim %.3f, want near %.3f and %.3f", pad.Bias, trim.Bias, -math.Log(3), math.Log(2))
	}
	if pad.Sigma > 0.5 || trim.Sigma > 0.5 {
		t.Errorf("sigmas pad %.3f trim %.3f: each team's own spread is 0.3", pad.Sigma, trim.Sigma)
	}
	all := set.all.Model()
	if other != all || !(all.Sigma > 0.8) {
		t.Errorf("an unseen namespace reads %+v, want the cluster's %+v (wide: it mixes both habits)", other, all)
	}
	st := set.Stats()
	if len(st.Namespaces) != 2 || st.Namespaces[0].Namespace != "pad" || st.Namespaces[0].Runs != 200 || st.Namespaces[1].Bias != trim.Bias {
		t.Errorf("stats namespaces %+v", st.Namespaces)
	}
	again, _ := NewSet(Config{Prior: cluster.EstimateModel{Sigma: 0.5}})
	if err := again.Restore(set.Samples()); err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{"pad", "trim", "x"} {
		if a, b := set.Model(ns), again.Model(ns); math.Abs(a.Bias-b.Bias) > 1e-9 || math.Abs(a.Sigma-b.Sigma) > 1e-9 {
			t.Errorf("namespace %q restored as %+v, want %+v", ns, b, a)
		}
	}
	if again.ObserveRun("pad", "pad-0", time.Hour, time.Hour) {
		t.Error("a restored run counted again")
	}
	if _, err := NewSet(Config{NamespaceRuns: -1}); err == nil || !strings.Contains(err.Error(), "namespace runs = -1") {
		t.Errorf("NamespaceRuns -1: %v", err)
	}
}
