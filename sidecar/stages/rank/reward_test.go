package rank

import (
	"math"
	"testing"
)

func TestSummarize(t *testing.T) {
	s := Summarize([]JobOutcome{
		{SubmitS: 0, StartS: 10, FinishS: 110, IdealS: 50},   // jct 110, bsld 2.2
		{SubmitS: 5, StartS: 5, FinishS: 8},                  // jct 3, run 3 -> floor 10 -> bsld 1
		{SubmitS: 0, StartS: 100, FinishS: 200, IdealS: 100}, // jct 200, bsld 2
	})
	if s.Jobs != 3 || !near(s.AvgJCT, 313.0/3) || !near(s.AvgWait, 110.0/3) || !near(s.AvgBSLD, 5.2/3) {
		t.Fatalf("%+v", s)
	}
}

func TestReward(t *testing.T) {
	// Symmetric: doubling and halving weigh the same.
	if up, down := Reward(ScoreBSLD, Summary{AvgBSLD: 1}, Summary{AvgBSLD: 2}), Reward(ScoreBSLD, Summary{AvgBSLD: 4}, Summary{AvgBSLD: 2}); math.Abs(up+down) > 1e-12 {
		t.Errorf("halving gives %v, doubling %v; want opposite values", up, down)
	}
	base := Summary{AvgJCT: 100, AvgWait: 50, AvgBSLD: 4, Util: 0.5, EnergyPerWork: 2}
	pol := Summary{AvgJCT: 80, AvgWait: 25, AvgBSLD: 2, Util: 0.6, EnergyPerWork: 1.5}
	for _, c := range []struct {
		kind ScoreKind
		want float64
	}{
		{ScoreJCT, math.Log(100.0 / 80)}, {ScoreWait, math.Log(2)}, {ScoreBSLD, math.Log(2)}, {ScoreUtil, math.Log(1.2)},
		// BSLD 4 -> 2 weighs 0.7, energy per work 2 -> 1.5 weighs 0.3.
		{ScoreEnergyMix, 0.7*math.Log(2) + 0.3*math.Log(2/1.5)},
		// JCT 100 -> 80 and BSLD 4 -> 2 weigh half each.
		{ScoreJCTBSLD, 0.5*math.Log(1.25) + 0.5*math.Log(2)},
	} {
		if got := Reward(c.kind, pol, base); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("%s: reward %v, want %v", c.kind, got, c.want)
		}
		if got := Reward(c.kind, base, base); got != 0 {
			t.Errorf("%s: reward against itself %v, want 0", c.kind, got)
		}
	}
	// ln(1/100) = -4.6 and ln(100/1) = 4.6 are clipped to -2 and 2; ln(1/5) = -1.609 is not.
	for _, c := range []struct{ pol, base, want float64 }{{100, 1, -2}, {1, 100, 2}, {5, 1, -1.6094379124341003}} {
		if got := Reward(ScoreBSLD, Summary{AvgBSLD: c.pol}, Summary{AvgBSLD: c.base}); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("BSLD %v against %v: reward %v, want %v", c.pol, c.base, got, c.want)
		}
	}
	if _, err := ParseScore("makespan"); err == nil {
		t.Error("unknown score accepted")
	}
	if k, err := ParseScore("energy-mix"); err != nil || k != ScoreEnergyMix {
		t.Errorf("ParseScore(energy-mix) = %v, %v", k, err)
	}
}
