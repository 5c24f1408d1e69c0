package report

import (
	"bytes"
	"encoding/csv"
	"fmt"
	"html/template"
	"image/color"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"

	"github.com/hetgpu/hetgpu/internal/figure"
	"github.com/hetgpu/hetgpu/model/trace"
	"github.com/hetgpu/hetgpu/sidecar/backends/sim"
)

// Meta says what was compared.
type Meta struct {
	Cluster *sim.Spec
	Trace   *trace.Trace
	Seed    uint64
}

// Files written by WriteDir.
const (
	FileHTML    = "index.html"
	FileResults = "results.csv"
	FileJSON    = "results.json"
	FileJobs    = "jobs.csv"
	FileSeries  = "series.csv"
	FileJCTCDF  = "jct_cdf.png"
	FileUtil    = "utilisation.png"
	FileQueue   = "queue.png"
	FileEnergy  = "energy.png"
	FileAvgJCT  = "avg_jct.png"
)

// seriesPoints bounds the points of each time-series plot and CSV (time-weighted averages).
const seriesPoints = 400

// WriteDir writes results.csv, results.json, jobs.csv, series.csv, PNG plots and index.html.
func WriteDir(dir string, m Meta, rs []*sim.Result) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	files := map[string][]byte{}
	var err error
	if files[FileResults], err = resultsCSV(rs); err != nil {
		return err
	}
	var jb bytes.Buffer
	if err := WriteJSON(&jb, rs); err != nil {
		return err
	}
	files[FileJSON] = jb.Bytes()
	if files[FileJobs], err = jobsCSV(rs); err != nil {
		return err
	}
	if files[FileSeries], err = seriesCSV(m, rs); err != nil {
		return err
	}
	plots := []struct {
		name string
		make func(Meta, []*sim.Result) (*plot.Plot, error)
	}{{FileJCTCDF, jctCDF}, {FileUtil, utilPlot}, {FileQueue, queuePlot}, {FileEnergy, energyPlot}, {FileAvgJCT, avgJCTPlot}}
	for _, p := range plots {
		pl, err := p.make(m, rs)
		if err != nil {
			return fmt.Errorf("report: plot %s: %w", p.name, err)
		}
		wt, err := pl.WriterTo(7*vg.Inch, 4*vg.Inch, "png")
		if err != nil {
			return fmt.Errorf("report: plot %s: %w", p.name, err)
		}
		var b bytes.Buffer
		if _, err := wt.WriteTo(&b); err != nil {
			return fmt.Errorf("report: plot %s: %w", p.name, err)
		}
		files[p.name] = b.Bytes()
	}
	if files[FileHTML], err = HTML(m, rs); err != nil {
		return err
	}
	for _, n := range slices.Sorted(maps.Keys(files)) {
		if err := os.WriteFile(filepath.Join(dir, n), files[n], 0o644); err != nil {
			return fmt.Errorf("report: %w", err)
		}
	}
	return nil
}

func f(v float64) string { return strconv.FormatFloat(v, 'g', 8, 64) }

func resultsCSV(rs []*sim.Result) ([]byte, error) {
	var b bytes.Buffer
	w := csv.NewWriter(&b)
	_ = w.Write([]string{"policy", "cluster", "trace", "jobs", "unfinished", "unschedulable", "avg_jct_s", "p50_jct_s", "p95_jct_s", "p99_jct_s",
		"avg_queue_s", "makespan_s", "gpu_util", "energy_kwh", "energy_per_work_kwh", "bounded_slowdown", "jain_fairness",
		"preemptions", "rounds", "decision_p50_ms", "decision_p95_ms", "decision_p99_ms"})
	for _, r := range rs {
		_ = w.Write([]string{r.Policy, r.Cluster, r.Trace, strconv.Itoa(r.Jobs), strconv.Itoa(r.Unfinished), strconv.Itoa(r.Unschedulable),
			f(r.AvgJCTS), f(r.P50JCTS), f(r.P95JCTS), f(r.P99JCTS), f(r.AvgQueueS), f(r.MakespanS), f(r.GPUUtil), f(r.EnergyKWh),
			f(r.EnergyPerWork), f(r.BoundedSlowdown), f(r.JainFairness), strconv.Itoa(r.Preemptions), strconv.Itoa(r.Rounds),
			f(r.DecisionP50Ms), f(r.DecisionP95Ms), f(r.DecisionP99Ms)})
	}
	w.Flush()
	return b.Bytes(), w.Error()
}

func jobsCSV(rs []*sim.Result) ([]byte, error) {
	var b bytes.Buffer
	w := csv.NewWriter(&b)
	_ = w.Write([]string{"policy", "id", "job_type", "gpus", "arrival_s", "start_s", "finish_s", "jct_s", "queue_s", "ideal_s", "gpu_type", "preemptions", "energy_j"})
	for _, r := range rs {
		for _, j := range r.JobResults {
			_ = w.Write([]string{r.Policy, j.ID, j.JobType, strconv.Itoa(j.GPUs), f(j.ArrivalS), f(j.StartS), f(j.FinishS), f(j.JCTS),
				f(j.QueueS), f(j.IdealS), j.GPUType, strconv.Itoa(j.Preemptions), f(j.EnergyJ)})
		}
	}
	w.Flush()
	return b.Bytes(), w.Error()
}

// bucket is a time-weighted average of a step function over [t0, t1).
type bucket struct{ t, util, queue, power float64 }

// downsample averages each policy's step-function series into n equal time buckets.
func downsample(s []sim.Sample, total int, n int) []bucket {
	if len(s) == 0 {
		return nil
	}
	t0, t1 := s[0].T, s[len(s)-1].T
	if t1 <= t0 {
		return []bucket{{t: t0, util: float64(s[0].BusyGPUs) / float64(total), queue: float64(s[0].Queue), power: s[0].PowerW}}
	}
	w := (t1 - t0) / float64(n)
	out := make([]bucket, n)
	for i := range out {
		out[i].t = t0 + (float64(i)+0.5)*w
	}
	for k := 0; k+1 < len(s); k++ {
		a, b := s[k].T, s[k+1].T
		i := min(int((a-t0)/w), n-1)
		for a < b {
			// Rounding can put a on its bucket's upper edge; move on rather than stall.
			for i < n-1 && t0+float64(i+1)*w <= a {
				i++
			}
			end := math.Min(b, t0+float64(i+1)*w)
			if i == n-1 {
				end = b
			}
			d := (end - a) / w
			out[i].util += d * float64(s[k].BusyGPUs) / float64(total)
			out[i].queue += d * float64(s[k].Queue)
			out[i].power += d * s[k].PowerW
			a = end
		}
	}
	return out
}

func seriesCSV(m Meta, rs []*sim.Result) ([]byte, error) {
	var b bytes.Buffer
	w := csv.NewWriter(&b)
	_ = w.Write([]string{"policy", "t_s", "gpu_util", "queue", "power_w"})
	for _, r := range rs {
		for _, p := range downsample(r.Series, m.Cluster.TotalGPUs(), seriesPoints) {
			_ = w.Write([]string{r.Policy, f(p.t), f(p.util), f(p.queue), f(p.power)})
		}
	}
	w.Flush()
	return b.Bytes(), w.Error()
}

func styled(l *plotter.Line, i int) {
	l.Color = plotutil.Color(i)
	l.Dashes = plotutil.Dashes(i / 7)
	l.Width = vg.Points(1.5)
}

// addLine draws one policy's series as the i-th styled line with its legend entry.
func addLine(p *plot.Plot, pts plotter.XYs, i int, policy string) error {
	l, err := plotter.NewLine(pts)
	if err != nil {
		return err
	}
	styled(l, i)
	p.Add(l)
	p.Legend.Add(policy, l)
	return nil
}

func jctCDF(_ Meta, rs []*sim.Result) (*plot.Plot, error) {
	p := figure.New("JCT distribution", "job completion time (hours, log scale)", "fraction of jobs")
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	for i, r := range rs {
		js := make([]float64, 0, len(r.JobResults))
		for _, j := range r.JobResults {
			js = append(js, math.Max(j.JCTS/3600, 1e-3))
		}
		if len(js) == 0 {
			continue
		}
		sort.Float64s(js)
		step := max(1, len(js)/500)
		var pts plotter.XYs
		for k := 0; k < len(js); k += step {
			pts = append(pts, plotter.XY{X: js[k], Y: float64(k+1) / float64(len(js))})
		}
		pts = append(pts, plotter.XY{X: js[len(js)-1], Y: 1})
		if err := addLine(p, pts, i, r.Policy); err != nil {
			return nil, err
		}
	}
	return p, nil
}

func seriesPlot(m Meta, rs []*sim.Result, title, y string, val func(bucket) float64) (*plot.Plot, error) {
	p := figure.New(title, "time (hours)", y)
	for i, r := range rs {
		bs := downsample(r.Series, m.Cluster.TotalGPUs(), seriesPoints)
		if len(bs) == 0 {
			continue
		}
		pts := make(plotter.XYs, len(bs))
		for k, b := range bs {
			pts[k] = plotter.XY{X: b.t / 3600, Y: val(b)}
		}
		if err := addLine(p, pts, i, r.Policy); err != nil {
			return nil, err
		}
	}
	return p, nil
}

func utilPlot(m Meta, rs []*sim.Result) (*plot.Plot, error) {
	p, err := seriesPlot(m, rs, "GPU utilisation", "busy GPUs / all GPUs", func(b bucket) float64 { return b.util })
	if err == nil {
		p.Y.Min, p.Y.Max = 0, 1.05
	}
	return p, err
}

func queuePlot(m Meta, rs []*sim.Result) (*plot.Plot, error) {
	return seriesPlot(m, rs, "Queue length", "waiting jobs", func(b bucket) float64 { return b.queue })
}

func barPlot(rs []*sim.Result, title, y string, val func(*sim.Result) float64) (*plot.Plot, error) {
	p := figure.New(title, "", y)
	vals := make(plotter.Values, len(rs))
	names := make([]string, len(rs))
	for i, r := range rs {
		vals[i], names[i] = val(r), r.Policy
	}
	b, err := plotter.NewBarChart(vals, vg.Points(28))
	if err != nil {
		return nil, err
	}
	b.Color = color.RGBA{R: 70, G: 110, B: 170, A: 255}
	b.LineStyle.Width = 0
	p.Add(b)
	p.NominalX(names...)
	p.Y.Min = 0
	return p, nil
}

func energyPlot(_ Meta, rs []*sim.Result) (*plot.Plot, error) {
	return barPlot(rs, "Energy per policy", "kWh (all GPUs, busy and idle)", func(r *sim.Result) float64 { return r.EnergyKWh })
}

func avgJCTPlot(_ Meta, rs []*sim.Result) (*plot.Plot, error) {
	return barPlot(rs, "Average JCT per policy", "hours", func(r *sim.Result) float64 { return r.AvgJCTS / 3600 })
}

type htmlRow struct {
	Policy                                                         string
	Jobs, Unfinished                                               int
	AvgJCT, P50, P95, P99, Queue, Makespan, Util, Energy, EPerWork string
	BSLD, Jain, DecP50, DecP99                                     string
	Preemptions                                                    int
	BestJCT, BestEnergy                                            bool
}

type htmlData struct {
	Cluster, ClusterDesc, Trace, Network string
	GPUs                                 int
	Classes                              []sim.NodeClass
	Jobs, MultiGPU                       int
	SpanH                                string
	Seed                                 uint64
	Rows                                 []htmlRow
	Plots                                []string
	Alpha, BusyUtil, CrossNode           string
}

var page = template.Must(template.New("report").Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>hetgpu sim: {{.Cluster}} / {{.Trace}}</title>
<style>
body{font-family:system-ui,sans-serif;margin:2em;max-width:1100px;color:#222}
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:4px 8px;text-align:right}
th{background:#f3f3f3}td:first-child,th:first-child{text-align:left}.best{font-weight:bold;background:#e8f4e8}
img{max-width:100%;border:1px solid #eee;margin:.5em 0}code{background:#f6f6f6;padding:1px 3px}
</style></head><body>
<h1>hetgpu simulation report</h1>
<p>Cluster <b>{{.Cluster}}</b> ({{.GPUs}} GPUs{{if .ClusterDesc}}: {{.ClusterDesc}}{{end}}), trace <b>{{.Trace}}</b> ({{.Jobs}} jobs, {{.MultiGPU}} multi-GPU, arrivals over {{.SpanH}} h), seed {{.Seed}}.</p>
<table><tr><th>node class</th><th>GPU</th><th>GPUs/node</th><th>nodes</th><th>interconnect</th></tr>
{{range .Classes}}<tr><td>{{.Name}}</td><td>{{.GPUName}}</td><td>{{.GPUsPerNode}}</td><td>{{.Count}}</td><td>{{.Interconnect}}</td></tr>
{{end}}</table>
<h2>Results</h2>
<table><tr><th>policy</th><th>jobs</th><th>avg JCT (h)</th><th>p50 (h)</th><th>p95 (h)</th><th>p99 (h)</th><th>avg queue (h)</th><th>makespan (h)</th><th>GPU util</th><th>energy (kWh)</th><th>kWh / V100 GPU-h of work</th><th>bounded slowdown</th><th>Jain (finish-time)</th><th>preemptions</th><th>decision p50 / p99 (ms)</th></tr>
{{range .Rows}}<tr><td>{{.Policy}}</td><td>{{.Jobs}}{{if .Unfinished}} (+{{.Unfinished}} unfinished){{end}}</td><td{{if .BestJCT}} class="best"{{end}}>{{.AvgJCT}}</td><td>{{.P50}}</td><td>{{.P95}}</td><td>{{.P99}}</td><td>{{.Queue}}</td><td>{{.Makespan}}</td><td>{{.Util}}</td><td{{if .BestEnergy}} class="best"{{end}}>{{.Energy}}</td><td>{{.EPerWork}}</td><td>{{.BSLD}}</td><td>{{.Jain}}</td><td>{{.Preemptions}}</td><td>{{.DecP50}} / {{.DecP99}}</td></tr>
{{end}}</table>
<p>Data: <a href="results.csv">results.csv</a>, <a href="results.json">results.json</a>, <a href="jobs.csv">jobs.csv</a> (every job under every policy), <a href="series.csv">series.csv</a>.</p>
<h2>Plots</h2>
{{range .Plots}}<img src="{{.}}" alt="{{.}}">
{{end}}
<h2>Model</h2>
<p>Job speed is the measured throughput of its job type on the GPU type and count it got (Gavel, ElasticFlow; documented fallbacks otherwise); jobs spread over nodes run at Gavel's unconsolidated throughput or x{{.CrossNode}}; co-located pairs at the measured pair throughputs. GPU power is idle + (TDP - idle) x util^{{.Alpha}} with util = {{.BusyUtil}} x scaling efficiency for a busy GPU, 0 when idle; energy integrates every GPU from the first arrival to the last completion of any policy compared (GPUs idle after a policy's last job draw idle power), so every policy is charged over one window. Network: {{.Network}}.</p>
</body></html>
`))

// HTML renders the report page.
func HTML(m Meta, rs []*sim.Result) ([]byte, error) {
	st := m.Trace.Stats()
	d := htmlData{Cluster: m.Cluster.Name, ClusterDesc: m.Cluster.Description, Trace: m.Trace.Name, GPUs: m.Cluster.TotalGPUs(),
		Classes: m.Cluster.Classes, Jobs: st.Jobs, MultiGPU: st.MultiGPU, SpanH: fmt.Sprintf("%.1f", st.SpanS/3600), Seed: m.Seed,
		Plots: []string{FileJCTCDF, FileAvgJCT, FileUtil, FileQueue, FileEnergy},
		Alpha: f(m.Cluster.Power.Alpha), BusyUtil: f(m.Cluster.Power.BusyUtil), CrossNode: f(m.Cluster.Network.CrossNodeEfficiency),
		Network: fmt.Sprintf("%s, %g Gb/s", m.Cluster.Network.Kind, m.Cluster.Network.BandwidthGbps)}
	bestJCT, bestE := math.Inf(1), math.Inf(1)
	for _, r := range rs {
		if r.Jobs > 0 && r.Unfinished == 0 {
			bestJCT = math.Min(bestJCT, r.AvgJCTS)
			bestE = math.Min(bestE, r.EnergyKWh)
		}
	}
	h := func(s float64) string { return fmt.Sprintf("%.2f", s/3600) }
	for _, r := range rs {
		d.Rows = append(d.Rows, htmlRow{Policy: r.Policy, Jobs: r.Jobs, Unfinished: r.Unfinished, AvgJCT: h(r.AvgJCTS), P50: h(r.P50JCTS),
			P95: h(r.P95JCTS), P99: h(r.P99JCTS), Queue: h(r.AvgQueueS), Makespan: h(r.MakespanS),
			Util: fmt.Sprintf("%.1f%%", 100*r.GPUUtil), Energy: fmt.Sprintf("%.1f", r.EnergyKWh), EPerWork: fmt.Sprintf("%.3f", r.EnergyPerWork),
			BSLD: fmt.Sprintf("%.2f", r.BoundedSlowdown), Jain: fmt.Sprintf("%.3f", r.JainFairness), Preemptions: r.Preemptions,
			DecP50: fmt.Sprintf("%.3f", r.DecisionP50Ms), DecP99: fmt.Sprintf("%.3f", r.DecisionP99Ms),
			BestJCT: r.Unfinished == 0 && r.AvgJCTS == bestJCT, BestEnergy: r.Unfinished == 0 && r.EnergyKWh == bestE})
	}
	var b bytes.Buffer
	if err := page.Execute(&b, d); err != nil {
		return nil, fmt.Errorf("report: html: %w", err)
	}
	return b.Bytes(), nil
}
