package rank

import (
	"fmt"

	"github.com/hetgpu/hetgpu/internal/nn"
)

// Decider orders one ranking window. Greedy is the production one; training supplies an agent
// that samples and records its decisions (sidecar/learning/ppo) through WithDecider.
type Decider interface {
	// Act orders n jobs. raw holds their n x NumFeatures raw feature rows (not modified),
	// globals the raw cluster-level inputs, mask the jobs the decider chooses among (nil =
	// all; the others follow, by score), k how many leading picks influence the outcome (0:
	// none does). order receives the job indices first to last, scores a value per job that
	// sorts the same way (higher first).
	Act(raw []float64, n int, globals []float64, mask []bool, k int, order []int, scores []float64) error
	// Policy is the policy the decider scores with.
	Policy() *Policy
}

// Greedy orders jobs by the policy's scores, without exploring or recording. Its buffers are
// sized for MaxWindow jobs, so a decision allocates nothing. Not safe for concurrent use.
type Greedy struct {
	// Starvation is the starvation guard's threshold (Heuristic.Starvation; 0 off), its boost
	// added to every job's score.
	Starvation float64

	pol *Policy
	ws  *nn.Workspace
	x   []float64 // normalised job rows
}

// NewGreedy returns the greedy decider of p.
func NewGreedy(p *Policy) *Greedy {
	return &Greedy{pol: p, ws: p.Actor.NewWorkspace(MaxWindow), x: make([]float64, MaxWindow*p.NumFeatures())}
}

// Policy implements Decider.
func (g *Greedy) Policy() *Policy { return g.pol }

// Act implements Decider.
func (g *Greedy) Act(raw []float64, n int, globals []float64, mask []bool, k int, order []int, scores []float64) error {
	x, err := g.pol.Normalise(g.x, raw, n, globals, order, scores)
	if err != nil || n == 0 {
		return err
	}
	logits := g.pol.Actor.Forward(g.ws, x, n)
	g.pol.AddBase(logits, raw, n)
	if g.Starvation > 0 {
		h, f := Heuristic{Starvation: g.Starvation}, g.pol.NumFeatures()
		for j := 0; j < n; j++ {
			logits[j] += h.Boost(raw[j*f : (j+1)*f])
		}
	}
	OrderJobs(logits, ChoiceMask(mask, n), k, nil, order[:n], scores[:n])
	return nil
}

// Normalise checks a decision's buffers for n jobs and writes their normalised rows into x
// (MaxWindow x NumFeatures), returning the n rows.
func (p *Policy) Normalise(x, raw []float64, n int, globals []float64, order []int, scores []float64) ([]float64, error) {
	f := p.NumFeatures()
	if n > MaxWindow {
		return nil, fmt.Errorf("rank: %d jobs exceed the window of %d", n, MaxWindow)
	}
	if len(raw) < n*f || len(globals) < p.NumGlobals() || len(order) < n || len(scores) < n {
		return nil, fmt.Errorf("rank: buffers too short for %d jobs of %d features", n, f)
	}
	copy(x[:n*f], raw[:n*f])
	p.Norm.Apply(x[:n*f])
	return x[:n*f], nil
}

// ChoiceMask is the mask a decision over n jobs chooses among: mask[:n], or nil (every job)
// when mask is nil or selects none.
func ChoiceMask(mask []bool, n int) []bool {
	if mask == nil {
		return nil
	}
	for _, ok := range mask[:n] {
		if ok {
			return mask[:n]
		}
	}
	return nil
}
