// Package report renders simulation results: the text table and JSON of `hetgpu sim`, and the
// --out directory (CSV, JSON, an HTML report with PNG plots drawn with gonum/plot).
package report

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/hetgpu/hetgpu/sidecar/backends/sim"
)

// WriteTable prints one row per policy.
func WriteTable(w io.Writer, rs []*sim.Result) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "policy\tjobs\tavg JCT h\tp50 h\tp99 h\tavg queue h\tmakespan h\tGPU util\tenergy kWh\tkWh/V100-h\tBSLD\tp99 BSLD\tJain\tpreempt\tdecide p50 ms\tp99 ms\t")
	for _, r := range rs {
		jobs := fmt.Sprint(r.Jobs)
		if r.Unfinished > 0 {
			jobs += fmt.Sprintf(" (+%d unfinished)", r.Unfinished)
		}
		fmt.Fprintf(tw, "%s\t%s\t%.2f\t%.2f\t%.2f\t%.2f\t%.1f\t%.1f%%\t%.1f\t%.3f\t%.2f\t%.1f\t%.3f\t%d\t%.3f\t%.3f\t\n",
			r.Policy, jobs, r.AvgJCTS/3600, r.P50JCTS/3600, r.P99JCTS/3600, r.AvgQueueS/3600, r.MakespanS/3600,
			100*r.GPUUtil, r.EnergyKWh, r.EnergyPerWork, r.BoundedSlowdown, r.P99BoundedSlowdown, r.JainFairness, r.Preemptions,
			r.DecisionP50Ms, r.DecisionP99Ms)
	}
	return tw.Flush()
}

// WriteJSON prints the results as a JSON array, one object per policy.
func WriteJSON(w io.Writer, rs []*sim.Result) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rs)
}
