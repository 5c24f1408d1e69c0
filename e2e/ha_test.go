package e2e

// High availability on a real agent: sidecar replicas elect one leader on a Nomad Variables
// lock; the leader is SIGKILLed over and over, and each time a job submitted right after is
// pinned by the next leader, once, with every run learned before the failover carried over.

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/hetgpu/hetgpu/internal/testcerts"
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
// new leader's store exactly once (with the estimate calibration and the runtime history it
// learned), and the killed replica comes back as a standby. At the
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
	// The second replica starts once the first leads and has learned what a newcomer can
	// only get from the shared state (below).
	replicas := []*proc{startSidecar(t, e.cluster, e.bins, ports[0], haSidecarConfig), nil}
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
	// Each run with an estimate (the example jobspec's 2m, here 1m) calibrates runtime
	// estimates once the leader reports it itself, after its grace. ha-cal is then purged and
	// collected before the second replica starts, so that replica can read the first run from
	// Nomad but never ha-cal's: that sample has to reach it with the shared state when it takes
	// over.
	submitToy(t, e.API, e.bins, "ha-cal", 20, "100ms", map[string]string{"hetgpu.runtime": "1m"})
	waitDead(t, e.API, "ha-cal", 60*time.Second)
	waitFor(t, 60*time.Second, "both runs calibrating runtime estimates", func() bool { return estimateCalibration(t, urls[lead]).Runs == 2 })
	calibrated := estimateCalibration(t, urls[lead])
	// The same two runs are the runtime history (jobs without hetgpu.runtime are read by it);
	// ha-cal's, purged below, reaches the next leader only with the shared state too.
	learned := runtimeHistory(t, urls[lead])
	if learned.Runs != 2 {
		t.Fatalf("the leader's runtime history %+v, want the 2 runs", learned)
	}
	calAllocs, _, err := e.API.Jobs().Allocations("ha-cal", true, nil)
	must(t, err)
	_, _, err = e.API.Jobs().Deregister("ha-cal", true, nil)
	must(t, err)
	must(t, e.API.System().GarbageCollect())
	waitFor(t, 30*time.Second, "ha-cal and its allocations collected", func() bool {
		if _, _, err := e.API.Jobs().Info("ha-cal", nil); err == nil {
			return false
		}
		for _, a := range calAllocs {
			if _, _, err := e.API.Allocations().Info(a.ID, nil); err == nil {
				return false
			}
		}
		return true
	})
	replicas[1] = startSidecar(t, e.cluster, e.bins, ports[1], haSidecarConfig)
	waitFor(t, 30*time.Second, "the second replica to stand by", func() bool {
		h, err := haRole(urls[1])
		return err == nil && h.Role == "standby"
	})
	if c := estimateCalibration(t, urls[1]); c.Runs != 0 {
		t.Fatalf("the standby started after the run was purged, yet its calibration holds %d runs", c.Runs)
	}
	if h := runtimeHistory(t, urls[1]); h.Runs != 0 {
		t.Fatalf("the standby started after the run was purged, yet its runtime history holds %d runs", h.Runs)
	}

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
		if c := estimateCalibration(t, urls[next]); i == 1 && (c.Runs != 2 || c.Bias != calibrated.Bias || c.Sigma != calibrated.Sigma) {
			t.Fatalf("failover %d: the new leader's estimate calibration %+v, want the old leader's %+v", i, c, calibrated)
		}
		if rh := runtimeHistory(t, urls[next]); i == 1 && (rh.Runs != 2 || rh.MedianS != learned.MedianS || rh.Sigma != learned.Sigma) {
			t.Fatalf("failover %d: the new leader's runtime history %+v, want the old leader's %+v", i, rh, learned)
		} else if i == 1 {
			t.Logf("failover %d: the new leader's runtime history %+v (the old leader's %+v)", i, rh, learned)
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

// rawExec enables the raw_exec driver on a client (the sidecar job runs the host binary).
const rawExec = "plugin \"raw_exec\" {\n  config {\n    enabled = true\n  }\n}\n"

// TestHASidecarAsNomadJobWithACL: on a cluster with ACLs, the documented policy
// (jobspecs/hetgpu-sidecar.policy.hcl) is attached to the sidecar job's workload identity
// only, and jobspecs/hetgpu-sidecar.nomad.hcl runs as shipped (secure: no insecure) with its
// certificate, key and tokens in the Nomad variable nomad/jobs/hetgpu-sidecar, written as the
// README says: two replicas on two nodes serve HTTPS, registered as the Nomad service
// hetgpu-sidecar; one leads, one stands by, a GPU job is pinned, /v1/queue answers the read
// token and refuses a request without one (401); Nomad reports both service checks passing.
func TestHASidecarAsNomadJobWithACL(t *testing.T) { runSidecarJobWithACL(t, false, nil) }

// sidecarJob is the documented sidecar job running on a cluster with ACLs.
type sidecarJob struct {
	c     *cluster
	certs testcerts.Files
	urls  []string // https://address:port of each replica
}

// runSidecarJobWithACL is TestHASidecarAsNomadJobWithACL; clientCA adds client_ca to the
// secrets variable (mTLS), and the test's clients then present the client certificate; edit,
// when set, changes the parsed job before it is registered.
func runSidecarJobWithACL(t *testing.T, clientCA bool, edit func(*api.Job)) sidecarJob {
	nomadBin, bins := allBinaries(t, "the sidecar as a Nomad job on a cluster with ACLs")
	c := startClusterOpts(t, nomadBin, bins, []clusterClient{
		{Name: "a100", Fake: []string{"4x A100"}, Extra: rawExec},
		{Name: "t4", Fake: []string{"4x T4"}, Extra: rawExec},
	}, clusterOpts{ACL: true})
	killToys(t, c, bins)
	killTasks(t, c, bins.Hetgpu)
	// Anonymous requests are refused: ACLs are on.
	anon, err := api.NewClient(&api.Config{Address: c.HTTP})
	must(t, err)
	if _, _, err := anon.Jobs().List(nil); err == nil || !strings.Contains(err.Error(), "403") {
		t.Fatalf("anonymous job list on an ACL cluster: %v, want 403", err)
	}
	rules, err := os.ReadFile("../jobspecs/hetgpu-sidecar.policy.hcl")
	must(t, err)
	_, err = c.API.ACLPolicies().Upsert(&api.ACLPolicy{Name: "hetgpu-sidecar", Description: "hetgpu sidecar", Rules: string(rules),
		JobACL: &api.JobACL{Namespace: "default", JobID: "hetgpu-sidecar"}}, nil)
	must(t, err)
	// The operator's step before the job (README): the secrets variable, with the
	// management token. The certificate names this host's addresses: a replica listens on
	// its node's address (NOMAD_ADDR_http), which the clients fingerprint from the host.
	certs := hostCerts(t)
	items := api.VariableItems{"read_token": e2eReadToken, "write_token": e2eWriteToken}
	files := map[string]string{"tls_cert": certs.ServerCert, "tls_key": certs.ServerKey, "ca": certs.CA}
	if clientCA {
		files["client_ca"] = certs.CA
	}
	for k, f := range files {
		b, err := os.ReadFile(f)
		must(t, err)
		items[k] = string(b)
	}
	_, _, err = c.API.Variables().Create(&api.Variable{Namespace: "default", Path: "nomad/jobs/hetgpu-sidecar", Items: items}, nil)
	must(t, err)
	src, err := os.ReadFile("../jobspecs/hetgpu-sidecar.nomad.hcl")
	must(t, err)
	// Only the paths differ from the shipped jobspec: the binary, and the server's HTTP
	// address (the Task API socket path under the test's deep temporary directory exceeds
	// the 108 bytes a unix socket address may have); the replicas authenticate with their
	// workload identity (NOMAD_TOKEN).
	job, err := c.API.Jobs().ParseHCLOpts(&api.JobsParseRequest{JobHCL: string(src),
		Variables: fmt.Sprintf("hetgpu_bin = %q\nnomad_addr = %q\n", bins.Hetgpu, c.HTTP), Canonicalize: true})
	must(t, err)
	if edit != nil {
		edit(job)
	}
	_, _, err = c.API.Jobs().Register(job, nil)
	must(t, err)
	t.Cleanup(func() { _, _, _ = c.API.Jobs().Deregister("hetgpu-sidecar", true, nil) })
	client := tlsClient(t, certs.CA, "", "")
	if clientCA {
		client = tlsClient(t, certs.CA, certs.ClientCert, certs.ClientKey)
	}
	sc := func(u string) *secureSidecar { return &secureSidecar{url: u, client: client} }
	var urls []string
	var leader haHealth
	waitFor(t, 90*time.Second, "two replicas registered over HTTPS, one leading, one standing by", func() bool {
		regs, _, err := c.API.Services().Get("hetgpu-sidecar", nil)
		if err != nil || len(regs) != 2 {
			return false
		}
		urls = urls[:0]
		roles := map[string]int{}
		nodes := map[string]bool{}
		for _, r := range regs {
			u := fmt.Sprintf("https://%s:%d", r.Address, r.Port)
			code, body, _ := sc(u).get(t, "/v1/health", "")
			var h haHealth
			if code != 200 || json.Unmarshal([]byte(body), &h) != nil {
				return false
			}
			if h.Role == "leader" {
				leader = h
			}
			urls = append(urls, u)
			roles[h.Role]++
			nodes[r.NodeID] = true
		}
		return roles["leader"] == 1 && roles["standby"] == 1 && len(nodes) == 2
	}, func() string { return jobState(c.API, "hetgpu-sidecar") + taskLogs(c.API, "hetgpu-sidecar", "sidecar") })
	if !strings.HasPrefix(leader.Leader, "https://") {
		t.Fatalf("the leader advertises %q; want its https:// address", leader.Leader)
	}
	// Plain HTTP is not served (Go's TLS server answers a plain request 400).
	if resp, err := http.Get(strings.Replace(urls[0], "https://", "http://", 1) + "/v1/health"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Fatalf("plain http answered 200 at %s; want HTTPS only", urls[0])
		}
	}
	submitToy(t, c.API, bins, "acl-gpu-job", 20, "100ms", nil)
	waitFor(t, 30*time.Second, "the GPU job pinned by the sidecar job", func() bool {
		j, _, err := c.API.Jobs().Info("acl-gpu-job", nil)
		return err == nil && !scHeld(j)
	}, func() string { return jobState(c.API, "acl-gpu-job") })
	_, pins := pinVersions(t, c.API, "acl-gpu-job")
	if pins != 1 {
		t.Fatalf("acl-gpu-job: %d pin tags, want 1", pins)
	}
	for _, u := range urls {
		for _, tc := range []struct {
			token string
			want  int
		}{{"", http.StatusUnauthorized}, {e2eWriteToken, http.StatusForbidden}, {e2eReadToken, http.StatusOK}} {
			if code, body, _ := sc(u).get(t, "/v1/queue", tc.token); code != tc.want {
				t.Fatalf("GET %s/v1/queue with token %q: %d %s; want %d", u, tc.token, code, body, tc.want)
			}
		}
	}
	// The shared state is where the policy lets the sidecar write.
	v, _, err := c.API.Variables().Read("hetgpu/leader", nil)
	must(t, err)
	t.Logf("replicas %v; leader lock held by %s (%s)", urls, v.Items["id"], v.Items["address"])
	waitChecksPassing(t, c.API, "hetgpu-sidecar", 2)
	return sidecarJob{c: c, certs: certs, urls: urls}
}

// taskLogs is the tail of each allocation's task stderr, for failure messages.
func taskLogs(c *api.Client, job, task string) string {
	stubs, _, _ := c.Jobs().Allocations(job, true, nil)
	var b strings.Builder
	for _, s := range stubs {
		a, _, err := c.Allocations().Info(s.ID, nil)
		if err != nil {
			continue
		}
		rc, err := c.AllocFS().Cat(a, "alloc/logs/"+task+".stderr.0", nil)
		if err != nil {
			fmt.Fprintf(&b, "\n%s: %v", s.ID[:8], err)
			continue
		}
		data, _ := io.ReadAll(rc)
		rc.Close()
		if len(data) > 4000 {
			data = data[len(data)-4000:]
		}
		fmt.Fprintf(&b, "\n--- %s %s stderr:\n%s", s.ID[:8], task, data)
	}
	return b.String()
}

// blackhole is a TCP proxy to Nomad that can stop answering: while cut, it forwards nothing
// either way (requests hang, as behind a partition); heal drops the connections it held.
type blackhole struct {
	ln     net.Listener
	target string
	cut    atomic.Bool
	mu     sync.Mutex
	conns  []net.Conn
}

func newBlackhole(t *testing.T, target string) *blackhole {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	p := &blackhole{ln: ln, target: target}
	t.Cleanup(func() {
		ln.Close()
		p.heal()
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.handle(c)
		}
	}()
	return p
}

func (p *blackhole) url() string { return "http://" + p.ln.Addr().String() }

func (p *blackhole) handle(c net.Conn) {
	u, err := net.Dial("tcp", p.target)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	p.conns = append(p.conns, c, u)
	p.mu.Unlock()
	pipe := func(dst, src net.Conn) {
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 && !p.cut.Load() {
				if _, werr := dst.Write(buf[:n]); werr != nil {
					err = werr
				}
			}
			if err != nil {
				dst.Close()
				src.Close()
				return
			}
		}
	}
	go pipe(u, c)
	pipe(c, u)
}

// heal forwards again; the connections that lost bytes while cut are closed.
func (p *blackhole) heal() {
	p.cut.Store(false)
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// TestHAPartitionedLeaderStopsWriting: the leader's path to Nomad stops answering (a TCP
// blackhole). Its fence closes (health says standby) within ttl - margin of its last renewal,
// well before Nomad frees its lock (2 x ttl + lock_delay = 21 s); the other replica takes
// the lock only then (the old leader's process still answers, so no fast takeover) and pins
// the job submitted during the partition, once; after the partition heals the old leader
// stands by and writes nothing.
func TestHAPartitionedLeaderStopsWriting(t *testing.T) {
	e := newFaultEnv(t, "a partitioned sidecar leader", []clusterClient{{Name: "a100", Fake: []string{"8x A100"}}}, "")
	target := strings.TrimPrefix(e.HTTP, "http://")
	hole := newBlackhole(t, target)
	urls := []string{e.sidecarURL, fmt.Sprintf("http://127.0.0.1:%d", freePort(t))}
	// Replica 0 reaches Nomad through the blackhole, and leads: it starts first.
	startSidecar(t, &cluster{agent: &agent{HTTP: hole.url()}, dir: e.dir}, e.bins, e.port, haSidecarConfig)
	waitFor(t, 30*time.Second, "replica 0 to lead", func() bool { h, err := haRole(urls[0]); return err == nil && h.Role == "leader" })
	port1, _ := strconv.Atoi(urls[1][strings.LastIndex(urls[1], ":")+1:])
	startSidecar(t, e.cluster, e.bins, port1, haSidecarConfig)
	waitFor(t, 30*time.Second, "replica 1 to stand by", func() bool { h, err := haRole(urls[1]); return err == nil && h.Role == "standby" })

	hole.cut.Store(true)
	cut := time.Now()
	submitToy(t, e.API, e.bins, "ha-partition", 20, "100ms", nil)
	var stopped, taken time.Duration
	waitFor(t, 15*time.Second, "the partitioned leader to stop writing", func() bool {
		h, err := haRole(urls[0])
		if err == nil && h.Role != "leader" {
			stopped = time.Since(cut)
			return true
		}
		return false
	})
	if j, _, err := e.API.Jobs().Info("ha-partition", nil); err != nil || !scHeld(j) {
		t.Fatalf("the job was pinned while the lock was the partitioned leader's: %v", err)
	}
	waitFor(t, 40*time.Second, "replica 1 to take the freed lock and pin the job", func() bool {
		j, _, err := e.API.Jobs().Info("ha-partition", nil)
		if err == nil && !scHeld(j) {
			taken = time.Since(cut)
			return true
		}
		return false
	}, func() string { return jobState(e.API, "ha-partition") })
	if stopped >= taken {
		t.Fatalf("the old leader stopped writing %.1f s after the cut, the new one pinned at %.1f s", stopped.Seconds(), taken.Seconds())
	}
	hole.heal()
	waitFor(t, 15*time.Second, "the healed replica to stand by behind replica 1", func() bool {
		h, err := haRole(urls[0])
		return err == nil && h.Role == "standby" && h.Leader == urls[1]
	})
	waitDead(t, e.API, "ha-partition", 60*time.Second)
	if versions, pins := pinVersions(t, e.API, "ha-partition"); versions != 2 || pins != 1 {
		t.Fatalf("ha-partition: %d pin tags over %d versions; want pinned once", pins, versions)
	}
	t.Logf("partition: the leader stopped writing %.1f s after the cut (its lease: ttl 10 s - margin 2 s after its last renewal); the other replica pinned the job %.1f s after the cut, once Nomad freed the lock",
		stopped.Seconds(), taken.Seconds())
}

// hostCerts writes a test CA and a server certificate naming every address of this host's
// interfaces: a replica or the installed sidecar listens on its node's address, which the
// clients fingerprint from the host.
func hostCerts(t *testing.T) testcerts.Files {
	t.Helper()
	var ips []net.IP
	addrs, err := net.InterfaceAddrs()
	must(t, err)
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			ips = append(ips, n.IP)
		}
	}
	certs, err := testcerts.WriteFor(t.TempDir(), ips...)
	must(t, err)
	return certs
}
