package livebench

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// BenchmarkLiveRound measures sidecar rounds on the Nomad backend against the fake Nomad API
// with 2 ms per call (b.N measured rounds after one warm-up): 1,280 nodes x 8 GPUs (4 types),
// 4,000 running allocations, 1,024 pending groups per round (targets: round p99 < 1 s,
// maintenance < 5 s, RSS < 1 GiB), and the same at a tenth of the size. Run with
// `go test -run '^$' -bench LiveRound -benchtime 10x ./sidecar/research/livebench`.
func BenchmarkLiveRound(b *testing.B) {
	for _, c := range []Config{
		{Nodes: 128, GPUsPerNode: 8, GPUTypes: 4, Pending: 102, Running: 400},
		{Nodes: 1280, GPUsPerNode: 8, GPUTypes: 4, Pending: 1024, Running: 4000},
	} {
		b.Run(fmt.Sprintf("nodes=%d", c.Nodes), func(b *testing.B) {
			c.Latency, c.Rounds, c.Seed = 2*time.Millisecond, b.N, 1
			b.ResetTimer()
			res, _, err := Run(context.Background(), c)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(res.RoundP50MS, "round-p50-ms")
			b.ReportMetric(res.RoundP99MS, "round-p99-ms")
			b.ReportMetric(res.MaintP99MS, "maint-p99-ms")
			b.ReportMetric(res.CallsPerRnd, "calls/round")
			b.ReportMetric(res.MaintenanceCalls, "maint-calls")
			b.ReportMetric(res.PinsPerSec, "pins/s")
			b.ReportMetric(res.RSSMB, "rss-MiB")
		})
	}
}
