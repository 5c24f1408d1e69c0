package policies

import "time"

// Solve limits of the simulated pipelines. A MILP stopped by a wall-clock limit ends wherever
// the machine got to, so the same replay could schedule differently on a loaded machine (as
// training's parallel rollouts did); a node limit ends it at the same point everywhere.
// SimTimeLimit only guards against a runaway solve: no round of the bundled traces comes near
// it, and one that did would again depend on the machine.
const (
	SimNodeLimit = 2000
	SimTimeLimit = time.Minute
)
