// Package baselines holds the published schedulers hetgpu is measured against, as pipeline
// stages: Gavel (OSDI 2020; ranker, preemption stage, placer and round clock in one value),
// Tiresias' discretised least-attained service (LAS, NSDI 2019), shortest-job-first (SJF),
// Slurm's multifactor priority and Carastan-Santos and de Camargo's F1. They sit in the policies
// layer because only the policy registry (sidecar/policies) builds them; hetgpu's own stages
// and the engine's stand-alone defaults (place.FIFO, place.PriorPredictor) stay in
// sidecar/stages, so no stage depends on a baseline.
package baselines
