package e2e

// High availability on a real agent: sidecar replicas elect one leader on a Nomad Variables
// lock; the leader is SIGKILLed over and over, and each time a job submitted right after is
// pinned by the next leader, once, with every run learned before the failover carried over.

import (
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

// haSidecarConfig is the replicas' configuration: the reconcile period of the fault tests,
// a 1 s renewal of the 10 s lease.
const haSidecarConfig = `
reconcile = "1s"
ha {
  enabled = true
  ttl     = "10s"
  renew   = "1s"
}
`

type haHealth struct {
	Status       string `json:"status"`
	Role         string `json:"role"`
	Leader       string `json:"leader"`
	ReplicaID    string `json:"replica_id"`
	Observations int    `json:"observations"`
}

func haRole(url string) (haHealth, error) {
	var h haHealth
	err := scGet(url+"/v1/health", &h)
	return h, err
}

// pinVersions counts a job's versions and its hetgpu pin tags.
func pinVersions(t *testing.T, c *api.Client, id string) (versions, pins int) {
	t.Helper()
	vs, _, _, err := c.Jobs().Versions(id, false, nil)
	must(t, err)
	for _, v := range vs {
		if v.VersionTag != nil && strings.HasPrefix(v.VersionTag.Name, "hetgpu-pin-") {
			pins++
		}
	}
	return len(vs), pins
}

// TestHAFailover: two replicas with -ha; the leader is SIGKILLed HETGPU_E2E_FAILOVERS times
// (default 3; 10 for the measurement). Each time a job submitted right after the kill
// is pinned within 20 s by the other replica, the run the old leader learned last is in the
// new leader's store exactly once, and the killed replica comes back as a standby. At the
// end every job was pinned exactly once (one pin tag, two versions) and every run is stored
// exactly once.
func TestHAFailover(t *testing.T) {
	failovers := 3
	if v := os.Getenv("HETGPU_E2E_FAILOVERS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("HETGPU_E2E_FAILOVERS = %q: expected a positive number of failovers", v)
		}
		failovers = n
	}
	e := newFaultEnv(t, "sidecar replicas failing over", []clusterClient{{Name: "a100", Fake: []string{"8x A100"}}}, "")
	ports := []int{e.port, freePort(t)}
	urls := []string{e.sidecarURL, fmt.Sprintf("http://127.0.0.1:%d", ports[1])}
	replicas := []*proc{
		startSidecar(t, e.cluster, e.bins, ports[0], haSidecarConfig),
		startSidecar(t, e.cluster, e.bins, ports[1], haSidecarConfig),
	}
	leaderIndex := func() int {
		idx := -1
		waitFor(t, 30*time.Second, "exactly one leader", func() bool {
			idx = -1
			n := 0
			for i, u := range urls {
				if h, err := haRole(u); err == nil && h.Role == "leader" {
					idx = i
					n++
				}
			}
			return n == 1
		})
		return idx
	}
	job := func(i int) string { return fmt.Sprintf("ha-fo-%02d", i) }
	// A first job, pinned and learned before any failover.
	lead := leaderIndex()
	submitToy(t, e.API, e.bins, job(0), 20, "100ms", nil)
	waitDead(t, e.API, job(0), 60*time.Second)
	waitFor(t, 30*time.Second, "the first run learned", func() bool { return finishedRuns(t, urls[lead], job(0)) == 1 })

	var took []time.Duration
	for i := 1; i <= failovers; i++ {
		prev := job(i - 1)
		before, err := haRole(urls[lead])
		must(t, err)
		// The leader dies without a word; a job arrives at once.
		replicas[lead].Stop(syscall.SIGKILL)
		killed := time.Now()
		submitToy(t, e.API, e.bins, job(i), 20, "100ms", nil)
		var pinnedAt time.Time
		waitFor(t, 20*time.Second, job(i)+" pinned after the leader was killed", func() bool {
			j, _, err := e.API.Jobs().Info(job(i), nil)
			if err == nil && !scHeld(j) {
				pinnedAt = time.Now()
				return true
			}
			return false
		}, func() string { return jobState(e.API, job(i)) })
		d := pinnedAt.Sub(killed)
		took = append(took, d)
		next := 1 - lead
		h, err := haRole(urls[next])
		must(t, err)
		if h.Role != "leader" {
			t.Fatalf("failover %d: replica %d pinned the job but reports role %q", i, next, h.Role)
		}
		// The run the old leader learned last is in the new leader's store, once.
		if n := finishedRuns(t, urls[next], prev); n != 1 {
			t.Fatalf("failover %d: the new leader holds %d records of %s, learned before the failover; want 1", i, n, prev)
		}
		if h.Observations < before.Observations {
			t.Fatalf("failover %d: the new leader holds %d runs, the old one held %d", i, h.Observations, before.Observations)
		}
		t.Logf("failover %d: job %s pinned %.2f s after the leader (replica %d) was killed; runs before %d, new leader %d",
			i, job(i), d.Seconds(), lead, before.Observations, h.Observations)
		// The killed replica comes back (as Nomad would restart it) and stands by.
		replicas[lead].Start()
		waitFor(t, 30*time.Second, "the restarted replica to stand by", func() bool {
			h, err := haRole(urls[lead])
			return err == nil && h.Role == "standby" && h.Leader == urls[next]
		})
		lead = next
		waitDead(t, e.API, job(i), 60*time.Second)
		// The driver reports to the first replica's address; a standby sends it on (307).
		waitFor(t, 30*time.Second, job(i)+"'s run learned by the leader", func() bool { return finishedRuns(t, urls[lead], job(i)) == 1 })
	}
	// Never pinned twice, never learned twice, none lost.
	for i := 0; i <= failovers; i++ {
		versions, pins := pinVersions(t, e.API, job(i))
		if pins != 1 || versions != 2 {
			t.Errorf("job %s: %d pin tags over %d versions; want pinned exactly once (2 versions)", job(i), pins, versions)
		}
		if recs := runRecords(t, urls[lead], job(i)); len(recs) != 1 {
			t.Errorf("job %s: %d run records at the leader; want 1", job(i), len(recs))
		}
	}
	sorted := append([]time.Duration(nil), took...)
	sort.Slice(sorted, func(a, b int) bool { return sorted[a] < sorted[b] })
	var secs []string
	for _, d := range took {
		secs = append(secs, fmt.Sprintf("%.2f", d.Seconds()))
	}
	t.Logf("takeover to pin over %d failovers (s): %s; median %.2f, max %.2f", len(took), strings.Join(secs, " "),
		sorted[len(sorted)/2].Seconds(), sorted[len(sorted)-1].Seconds())
}
