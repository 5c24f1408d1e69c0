package rank

import (
	"os/exec"
	"strings"
	"testing"
)

// TestRuntimeDepsExcludeTraining: the sidecar's runtime ranking and prediction packages must
// not pull in training or research code (PPO, plots, the predictor's offline evaluation).
func TestRuntimeDepsExcludeTraining(t *testing.T) {
	const mod = "github.com/hetgpu/hetgpu/"
	cases := []struct {
		pkg       string
		forbidden []string
	}{
		{mod + "sidecar/rank", []string{"gonum.org/v1/plot", mod + "sidecar/rank/ppo", mod + "sidecar/rank/rlsim", mod + "sidecar/rank/rltrain", mod + "sidecar/predict/predicteval"}},
		{mod + "sidecar/predict", []string{"gonum.org/v1/plot", mod + "sidecar/predict/predicteval", mod + "sidecar/rank/ppo"}},
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go tool on PATH")
	}
	for _, c := range cases {
		out, err := exec.Command(gobin, "list", "-deps", c.pkg).Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", c.pkg, err)
		}
		deps := strings.Fields(string(out))
		if len(deps) < 5 {
			t.Fatalf("go list -deps %s listed only %v", c.pkg, deps)
		}
		for _, d := range deps {
			for _, f := range c.forbidden {
				if d == f || strings.HasPrefix(d, f+"/") {
					t.Errorf("%s depends on %s", c.pkg, d)
				}
			}
		}
	}
}
