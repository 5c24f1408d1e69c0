package report

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/hetgpu/hetgpu/sidecar/backends/sim"
)

// WriteQueues prints, for every result run with queues, one row per queue: GPU-hours against
// the guarantee's, the time below the guarantee with pending work, the queue's share and
// average JCT, then Jain's index over the shares. Results without queues print nothing.
func WriteQueues(w io.Writer, rs []*sim.Result) error {
	for _, r := range rs {
		if len(r.Queues) == 0 {
			continue
		}
		fmt.Fprintf(w, "\nqueues of %s (Jain's index over the shares %.3f, gangs pinned in part %d):\n", r.Policy, r.QueueJain, r.PartialGangPins)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "queue\tweight\tguarantee\tjobs\tGPU-h\tguarantee GPU-h\tpending h\tbelow, any pending h\tbelow, admitted h\tbelow %\tshare\tavg JCT h\t")
		for _, q := range r.Queues {
			fmt.Fprintf(tw, "%s\t%g\t%d\t%d\t%.0f\t%.0f\t%.1f\t%.2f\t%.2f\t%.2f%%\t%.2f\t%.2f\t\n", q.Name, q.Weight, q.Guarantee, q.Jobs,
				q.GPUHours, q.GuaranteeGPUHours, q.PendingS/3600, q.BelowAnyS/3600, q.BelowGuaranteeS/3600, q.BelowGuaranteePct, q.Share, q.AvgJCTS/3600)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}
