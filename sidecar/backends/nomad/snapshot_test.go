package nomad

import "testing"

// Pin enforces the JobModifyIndex of the round's view: each Snapshot records a new view, and
// a view never changes after its round.
func TestSnapshotRecordsRoundView(t *testing.T) {
	f := newFixture(t, nil)
	f.srv.Register(heldJob("bert", 1, 1, nil))
	f.resync(t)
	if v := f.b.lastRound(); v != nil {
		t.Fatalf("view before any snapshot = %+v, want none", v)
	}
	snap := f.snapshot(t)
	first := f.b.lastRound()
	key, want := snap.Pending[0].Key(), snap.Pending[0].JobModifyIndex
	if key != "default/bert/train" || want == 0 {
		t.Fatalf("pending = %q at JobModifyIndex %d", key, want)
	}
	if got := first.jobModifyIndex(key); got != want {
		t.Fatalf("view has JobModifyIndex %d for %s, snapshot %d", got, key, want)
	}
	if got := first.jobModifyIndex("default/other/train"); got != 0 {
		t.Errorf("view has JobModifyIndex %d for a job not in the snapshot", got)
	}
	// The user re-runs the job: the next round's view has the new index, the first keeps its own.
	f.srv.Register(heldJob("bert", 2, 1, nil))
	f.resync(t)
	f.snapshot(t)
	if got := first.jobModifyIndex(key); got != want {
		t.Errorf("the first round's view changed to %d after the next snapshot (was %d)", got, want)
	}
	if got := f.b.lastRound().jobModifyIndex(key); got <= want {
		t.Errorf("next round's view has JobModifyIndex %d, want above %d", got, want)
	}
}
