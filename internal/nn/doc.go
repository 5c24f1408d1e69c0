// Package nn is the small neural-network kit shared by the learned ranker (sidecar/stages/rank) and
// the throughput predictor (sidecar/stages/predict): parameters in one flat slice, dense tanh layers
// with forward and backward passes that write only into caller-owned buffers, and Adam over
// the flat vector.
//
// Two evaluation paths exist on purpose. MLP evaluates a batch of rows with gonum's BLAS
// (the ranker scores up to 128 jobs per decision); Dense and Dot evaluate one vector with a
// plain left-to-right sum (the predictor's hand-built RNN and attention cells). Floating-point
// sums depend on their order, and each user's bundled model was fitted with one of them, so
// neither path may change its order of operations: the bundled policy and predictor model
// must score bit for bit as they were trained.
package nn
