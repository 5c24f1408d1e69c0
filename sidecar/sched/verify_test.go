package sched

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/hetgpu/hetgpu/model/cluster"
)

// checkedPlacer places every job and rejects decisions for the jobs in bad.
type checkedPlacer struct {
	recordPlacer
	bad     string
	checked int
}

func (c *checkedPlacer) Verify(_ *RoundState, _ *cluster.Snapshot, ds []cluster.Decision) error {
	c.checked++
	for _, d := range ds {
		if d.JobID == c.bad {
			return fmt.Errorf("job %s breaks a rule", d.JobID)
		}
	}
	return nil
}

// A placer that is a Verifier checks every round before the pins: a rejected round pins
// nothing and says why; an accepted one pins as usual.
func TestRunRoundVerifiesBeforePinning(t *testing.T) {
	for _, c := range []struct {
		bad        string
		wantPinned []string
		wantErr    bool
	}{
		{bad: "p2", wantPinned: nil, wantErr: true},
		{bad: "", wantPinned: []string{"p1", "p2"}},
	} {
		fc := &fakeCluster{snap: &cluster.Snapshot{Pending: []cluster.Job{job("p1"), job("p2")}}}
		pl := &checkedPlacer{bad: c.bad}
		_, err := (&Pipeline{Cluster: fc, Ranker: &byID{}, Placer: pl}).RunRound(context.Background())
		if pl.checked != 1 || !slices.Equal(fc.pinned, c.wantPinned) {
			t.Errorf("bad %q: %d checks, pinned %v; want 1 check, pinned %v", c.bad, pl.checked, fc.pinned, c.wantPinned)
		}
		if c.wantErr != errors.Is(err, ErrUnverified) {
			t.Errorf("bad %q: error %v, want ErrUnverified %t", c.bad, err, c.wantErr)
		}
	}
}
