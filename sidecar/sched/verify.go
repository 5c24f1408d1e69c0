package sched

import (
	"errors"

	"github.com/hetgpu/hetgpu/model/cluster"
)

// Verifier checks a round's decisions against its snapshot independently of how they were
// found (place.Placer implements it with place.Verify and its own configuration). RunRound
// verifies before pinning when the Placer is a Verifier, and pins nothing of a round whose
// decisions fail: a wrong placement is a bug, and pinning it would start jobs on GPUs they must
// not have. The check costs a few per cent of a placement (BenchmarkVerify* in sidecar/stages/place).
type Verifier interface {
	Verify(st *RoundState, snap *cluster.Snapshot, decisions []cluster.Decision) error
}

// ErrUnverified wraps a Verifier's rejection of a round's decisions.
var ErrUnverified = errors.New("decisions failed verification, none pinned")
