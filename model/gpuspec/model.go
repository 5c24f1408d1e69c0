package gpuspec

// The constants of the GPU model that the simulator, the predictors, the ranker and the fake
// devices share. Each lives here once so an estimate and the figure it is checked against (a
// simulated or fake reading) use the same curve.
const (
	// ReferenceGPU is the type user runtime estimates (hetgpu.runtime), oracle runtimes and
	// "energy per unit of work" (kWh per V100 GPU-hour) refer to: Gavel's and Philly's V100.
	ReferenceGPU = "v100"

	// PowerAlpha is the exponent of Spec.Power's utilisation curve: power rises fast at low
	// load and flattens towards TDP.
	PowerAlpha = 0.7

	// BusyUtil is the utilisation of a GPU that one data-parallel training job that scales
	// perfectly keeps busy: the SM activity nvidia-smi reports for such jobs sits around 90 %
	// (input pipelines and collectives leave the rest). The simulator charges it and every
	// predictor assumes it without a measurement, so predicted and simulated power agree; a
	// measurement (predict's catalog) replaces it.
	BusyUtil = 0.9
)

// RuntimeOn scales a runtime from one GPU type to another by their throughputs: a job that
// takes runtime (any unit) where it runs at from runs runtime x from / to where it runs at
// to. From the reference type (from = its throughput on ReferenceGPU) it is a user's
// hetgpu.runtime on another type; the other way round a measured runtime on the reference.
// Where either throughput is unknown (not above 0) the runtime stays as it is: the type
// counts as fast as the other.
func RuntimeOn(runtime, from, to float64) float64 {
	if from > 0 && to > 0 {
		return runtime * from / to
	}
	return runtime
}
