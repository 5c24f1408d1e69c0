package ppo

import (
	"context"
	"fmt"
)

// MultiEnv concatenates environments (for example the same trace on several clusters, so one
// policy learns to rank on all of them): episode i is the i-th episode of the list, counting
// through each environment in turn.
type MultiEnv []Env

// Episodes implements Env.
func (m MultiEnv) Episodes() int {
	n := 0
	for _, e := range m {
		n += e.Episodes()
	}
	return n
}

// Play implements Env.
func (m MultiEnv) Play(ctx context.Context, ep int, a *Agent) (float64, error) {
	for _, e := range m {
		if ep < e.Episodes() {
			return e.Play(ctx, ep, a)
		}
		ep -= e.Episodes()
	}
	return 0, fmt.Errorf("episode %d outside 0..%d", ep, m.Episodes()-1)
}
