package app

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/hetgpu/hetgpu/model/cluster"
	"github.com/hetgpu/hetgpu/model/throughput/throughputtest"
	"github.com/hetgpu/hetgpu/sidecar/backends/sim"
	"github.com/hetgpu/hetgpu/sidecar/backends/sim/simtest"
	"github.com/hetgpu/hetgpu/sidecar/runtime/server"
	"github.com/hetgpu/hetgpu/sidecar/runtime/service"
	"github.com/hetgpu/hetgpu/sidecar/runtime/store"
)

// defaultStages are the production stages of the default configuration with their state
// (catalog file and bbolt store) in a fresh folder; the store closes when the test ends.
func defaultStages(tb testing.TB) (service.Stages, *store.Store) {
	tb.Helper()
	dir := tb.TempDir()
	cfg, err := LoadConfig("")
	if err != nil {
		tb.Fatal(err)
	}
	stages, _, err := Stages(cfg, dir, hclog.NewNullLogger())
	if err != nil {
		tb.Fatal(err)
	}
	st, err := store.Open(filepath.Join(dir, StateFile), store.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { st.Close() })
	return stages, st
}

// obsAPI is the sidecar's API over the production stages (predictor with its catalog file,
// bbolt store) on an idle simulated backend: what POST /v1/observations costs for real.
func obsAPI(tb testing.TB) (*httptest.Server, *store.Store) {
	tb.Helper()
	stages, st := defaultStages(tb)
	e, err := sim.New(sim.Config{Spec: simtest.Spec(tb, "modern-mix"), Throughput: throughputtest.Bundled(tb), NoSeries: true})
	if err != nil {
		tb.Fatal(err)
	}
	svc, err := service.New(service.Config{BackendName: "simulated"}, WrapEngine(e, 1, 0, nil), stages, st)
	if err != nil {
		tb.Fatal(err)
	}
	// The batch benchmark posts service.MaxBatch records: raise the API's limits to it.
	srv := httptest.NewServer(server.New(server.Config{MaxBodyBytes: 64 << 20, MaxObservations: service.MaxBatch}, svc).Handler())
	tb.Cleanup(srv.Close)
	return srv, st
}

var benchModels = []struct {
	name  string
	batch int
	gpu   string
	thr   float64
}{{"ResNet-50", 64, "v100", 4.5}, {"Transformer", 128, "a100", 9}, {"LM", 20, "t4", 30}, {"ResNet-18", 128, "h100", 40}}

func benchObs(i int) cluster.Observation {
	m := benchModels[i%len(benchModels)]
	return cluster.Observation{Namespace: "default", JobID: "bench-" + strconv.Itoa(i), Group: "train", Task: "train",
		AllocID: fmt.Sprintf("%08x-bench", i), ModelName: m.name, BatchSize: m.batch, GPUType: m.gpu, GPUs: 1 + i%4,
		Throughput: m.thr * float64(1+i%4) * (0.9 + 0.2*float64(i%7)/7), EnergyJ: 150 * 600, AvgPowerW: 150, RuntimeS: 600,
		Time: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(i) * time.Second)}
}

type obsAnswer struct {
	Accepted   int `json:"accepted"`
	Duplicates int `json:"duplicates"`
}

func postObs(c *http.Client, url string, body []byte) (int, obsAnswer, error) {
	resp, err := c.Post(url+"/v1/observations", "application/json", bytes.NewReader(body))
	if err != nil {
		return 0, obsAnswer{}, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var a obsAnswer
	if resp.StatusCode == http.StatusAccepted {
		err = json.Unmarshal(b, &a)
	} else {
		err = fmt.Errorf("status %d: %s", resp.StatusCode, b)
	}
	return resp.StatusCode, a, err
}

// BenchmarkObservationsBatch posts 10,000 records in one request (service.MaxBatch): one
// transaction, one catalog write. Target: under 2 s.
func BenchmarkObservationsBatch(b *testing.B) {
	srv, _ := obsAPI(b)
	next := 0
	var total time.Duration
	for i := 0; i < b.N; i++ {
		obs := make([]cluster.Observation, service.MaxBatch)
		for k := range obs {
			obs[k] = benchObs(next)
			next++
		}
		body, _ := json.Marshal(obs)
		t0 := time.Now()
		_, a, err := postObs(srv.Client(), srv.URL, body)
		total += time.Since(t0)
		if err != nil || a.Accepted != service.MaxBatch {
			b.Fatalf("answer %+v, %v", a, err)
		}
	}
	b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "ms/10k-records")
}

// BenchmarkObservationsConcurrent: 200 clients each post single records as fast as the
// sidecar answers (every b.N iteration: 20 records per client). Targets: at least 2,000
// records/s with p99 under 100 ms.
func BenchmarkObservationsConcurrent(b *testing.B) {
	srv, st := obsAPI(b)
	const clients, each = 200, 20
	tr := &http.Transport{MaxIdleConns: clients, MaxIdleConnsPerHost: clients}
	c := &http.Client{Transport: tr}
	defer tr.CloseIdleConnections()
	var next atomic.Int64
	var lat []time.Duration
	var mu sync.Mutex
	var wall time.Duration
	for i := 0; i < b.N; i++ {
		var wg sync.WaitGroup
		errs := make(chan error, clients)
		t0 := time.Now()
		for k := 0; k < clients; k++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var mine []time.Duration
				for r := 0; r < each; r++ {
					body, _ := json.Marshal(benchObs(int(next.Add(1))))
					s := time.Now()
					_, a, err := postObs(c, srv.URL, body)
					mine = append(mine, time.Since(s))
					if err != nil || a.Accepted != 1 {
						errs <- fmt.Errorf("answer %+v: %v", a, err)
						return
					}
				}
				mu.Lock()
				lat = append(lat, mine...)
				mu.Unlock()
			}()
		}
		wg.Wait()
		wall += time.Since(t0)
		close(errs)
		for err := range errs {
			b.Fatal(err)
		}
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	q := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))]) / float64(time.Millisecond) }
	b.ReportMetric(float64(clients*each*b.N)/wall.Seconds(), "records/s")
	b.ReportMetric(q(0.5), "p50-ms")
	b.ReportMetric(q(0.99), "p99-ms")
	if n := st.ObservationCount(); n != clients*each*b.N {
		b.Fatalf("stored %d, want %d", n, clients*each*b.N)
	}
}
