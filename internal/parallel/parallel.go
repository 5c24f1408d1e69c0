// Package parallel runs index-addressed work on a bounded number of goroutines. Callers write
// results into per-index slots, so the outcome does not depend on scheduling order (the
// predictor's and the prioritiser's determinism rests on that).
package parallel

import "golang.org/x/sync/errgroup"

// For runs fn(0..n-1) on up to workers goroutines (at least one) and waits for all. fn reports
// failures through its own results.
func For(n, workers int, fn func(i int)) {
	var g errgroup.Group
	g.SetLimit(max(1, workers))
	for i := 0; i < n; i++ {
		g.Go(func() error { fn(i); return nil })
	}
	_ = g.Wait()
}
