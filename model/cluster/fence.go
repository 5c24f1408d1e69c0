package cluster

import "context"

// Fence guards writes to the cluster when several sidecar replicas run (sidecar/runtime/ha): only
// the replica whose lease is current may write. Held returns nil when this replica may issue
// its next batch of writes now, and an error saying why not otherwise. A nil Fence (one
// replica) always allows.
type Fence interface {
	Held(ctx context.Context) error
}

// FenceHeld is f.Held(ctx), nil for a nil Fence.
func FenceHeld(ctx context.Context, f Fence) error {
	if f == nil {
		return nil
	}
	return f.Held(ctx)
}
