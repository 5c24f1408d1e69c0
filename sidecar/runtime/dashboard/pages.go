package dashboard

import (
	"bytes"
	"fmt"
	"html/template"
	"maps"
	"math"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"gonum.org/v1/plot/plotter"

	"github.com/hetgpu/hetgpu/internal/httpjson"
	"github.com/hetgpu/hetgpu/model/cluster"
	"github.com/hetgpu/hetgpu/model/constraint"
	"github.com/hetgpu/hetgpu/model/gpuspec"
	"github.com/hetgpu/hetgpu/sidecar/runtime/service"
	"github.com/hetgpu/hetgpu/sidecar/runtime/store"
)

// pageNames are the pages, in navigation order.
var pageNames = []string{"fleet", "queue", "decisions", "learning", "energy"}

// page is what every page template gets.
type page struct {
	Name      string
	Pages     []string
	Backend   string
	SnapTime  time.Time
	NodeCount int
	GPUCount  int
	Refresh   int
	CSS       template.CSS
	Body      any
}

var funcs = template.FuncMap{
	"upper": strings.ToUpper,
	"title": func(s string) string {
		if s == "" {
			return s
		}
		return strings.ToUpper(s[:1]) + s[1:]
	},
	"num": func(v float64) string {
		if v == 0 || math.IsNaN(v) {
			return "–"
		}
		return strconv.FormatFloat(v, 'g', 4, 64)
	},
	"fixed": func(prec int, v float64) string { return strconv.FormatFloat(v, 'f', prec, 64) },
	"pct":   func(v float64) string { return strconv.FormatFloat(100*v, 'f', 1, 64) + " %" },
	"kwh": func(j float64) string {
		return strconv.FormatFloat(j/3.6e6, 'f', 2, 64)
	},
	"ptr": func(p *float64) string {
		if p == nil {
			return "–"
		}
		return strconv.FormatFloat(*p, 'f', 0, 64)
	},
	"dur": func(s float64) string {
		d := time.Duration(s * float64(time.Second)).Round(time.Second)
		if d >= 48*time.Hour {
			return fmt.Sprintf("%.1f d", d.Hours()/24)
		}
		return d.String()
	},
	"when": func(t time.Time) string {
		if t.IsZero() {
			return "–"
		}
		return t.UTC().Format("2006-01-02 15:04:05")
	},
	"deref": func(p *float64) float64 {
		if p == nil {
			return 0
		}
		return *p
	},
	"kw":      func(w float64) float64 { return w / 1000 },
	"hours":   func(s float64) float64 { return s / 3600 },
	"states":  func() []string { return []string{StateFree, StateBusy, StateShared, StateUnhealthy, StateUnavailable} },
	"svg":     func(b []byte) template.HTML { return template.HTML(b) }, // #nosec: our own plots
	"join":    strings.Join,
	"short":   func(s string) string { return strings.TrimPrefix(s, "GPU-") },
	"explain": explainURL,
	"bar": func(v, max float64) string {
		if max <= 0 {
			return "0"
		}
		return strconv.FormatFloat(math.Min(100, 100*v/max), 'f', 0, 64)
	},
}

// pageTemplates are parsed once per page (the layout plus the page's own content) from the
// embedded assets, when the program starts: a broken template fails every test at once.
var pageTemplates = func() map[string]*template.Template {
	t := map[string]*template.Template{}
	for _, n := range pageNames {
		t[n] = template.Must(template.New(n).Funcs(funcs).ParseFS(assets, "assets/layout.html", "assets/"+n+".html"))
	}
	return t
}()

// render writes a page; a template failure answers 500 without a half-written page.
func (d *Dashboard) render(w http.ResponseWriter, r *http.Request, name string, fl *Fleet, body any) {
	css, err := assets.ReadFile("assets/style.css")
	if err != nil {
		httpjson.Error(w, http.StatusInternalServerError, err)
		return
	}
	if fl == nil {
		// The header needs counts only: no device readings (one request per node on Nomad).
		f := BuildFleet(d.svc.FleetSnapshot(), nil, d.svc.BackendName(), FleetFilter{})
		fl = &f
	}
	p := page{Name: name, Pages: pageNames, Backend: fl.Backend, SnapTime: fl.Time, NodeCount: fl.NodeCount, GPUCount: fl.GPUCount,
		CSS: template.CSS(css), Body: body}
	if v, err := strconv.Atoi(r.URL.Query().Get("refresh")); err == nil && v >= 2 && v <= 3600 {
		p.Refresh = v
	}
	var buf bytes.Buffer
	if err := pageTemplates[name].ExecuteTemplate(&buf, "layout", p); err != nil {
		d.log.Error("rendering a dashboard page failed", "page", name, "error", err)
		httpjson.Error(w, http.StatusInternalServerError, fmt.Errorf("render %s: %w", name, err))
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = w.Write(buf.Bytes())
}

// --- Fleet ---

type fleetBody struct {
	Fleet
	PowerSVG []byte
	Explain  map[string]string
}

func (d *Dashboard) fleetPage(w http.ResponseWriter, r *http.Request) {
	f, err := fleetFilter(r)
	if err != nil {
		httpjson.Error(w, http.StatusBadRequest, err)
		return
	}
	whole := d.Fleet(r.Context(), FleetFilter{})
	fl := whole
	if f != (FleetFilter{}) {
		fl = d.Fleet(r.Context(), f)
	}
	d.render(w, r, "fleet", &whole, fleetBody{Fleet: fl})
}

// --- Queue ---

// queueRow is a queue entry as the page shows it: the service's entry with what the page
// derives.
type queueRow struct {
	service.QueueEntry
	Why      []string
	NomadURL string
}

// heldText is the row's line in the words its job's own ui description carries (written by
// the Nomad backend): rank, what it waits for, the preferred types and the free estimate.
func (j *queueRow) heldText(ranked int) string {
	return cluster.HeldText(&cluster.Wait{Kind: j.Wait, Rank: j.Rank, Of: ranked, GPUs: j.GPUs, Device: j.Device,
		FreeIn: time.Duration(j.FreeInS * float64(time.Second)), Preferred: j.PreferredTypes})
}

// invalidRow is a held job with invalid annotations and its links.
type invalidRow struct {
	service.InvalidEntry
	JobID, Namespace, NomadURL string
}

type queueBody struct {
	Round   uint64
	Time    time.Time
	Jobs    []queueRow
	Invalid []invalidRow
	Free    []TypeTotals
	// Total is the queue's length; Jobs holds its first maxQueueRows.
	Total int
}

// maxQueueRows bounds the queue table (a long simulated backlog made a 1 MB page); the
// whole queue is in /v1/queue.
const maxQueueRows = 500

func (d *Dashboard) queuePage(w http.ResponseWriter, r *http.Request) {
	fl := BuildFleet(d.svc.FleetSnapshot(), nil, d.svc.BackendName(), FleetFilter{})
	v := d.svc.Queue()
	q := queueBody{Round: v.Round, Time: v.Time, Free: fl.Totals, Total: len(v.Jobs)}
	jobs := v.Jobs[:min(len(v.Jobs), maxQueueRows)]
	q.Jobs = make([]queueRow, len(jobs))
	ranked := 0
	for i := range jobs {
		q.Jobs[i].QueueEntry = jobs[i]
		if jobs[i].Rank > 0 {
			ranked++
		}
	}
	for i := range q.Jobs {
		j := &q.Jobs[i]
		j.Why = whyWaiting(j, q.Jobs[:i], q.Free)
		if held := j.heldText(ranked); held != "" {
			j.Why = append([]string{held}, j.Why...)
		}
		j.NomadURL = d.nomadJobURL(j.Namespace, j.JobID)
	}
	for _, in := range v.Invalid {
		row := invalidRow{InvalidEntry: in}
		if ns, id, _, ok := cluster.SplitGroupKey(in.JobKey); ok {
			row.Namespace, row.JobID = ns, id
			row.NomadURL = d.nomadJobURL(ns, id)
		}
		q.Invalid = append(q.Invalid, row)
	}
	d.render(w, r, "queue", &fl, q)
}

// whyWaiting explains a queue entry. The queue's own fields (wait kind, reason, infeasible)
// win when it carries them; otherwise the page derives a reason from the jobs ranked ahead and
// the free capacity.
func whyWaiting(j *queueRow, ahead []queueRow, totals []TypeTotals) []string {
	var why []string
	if j.Status == "decided" {
		return []string{"placed in this round; being pinned"}
	}
	if j.Infeasible && j.Wait != cluster.WaitInfeasible { // the wait kind below says it already
		why = append(why, "infeasible")
	}
	switch {
	case j.Wait != "" && j.Reason != "":
		why = append(why, j.Wait+": "+j.Reason)
	case j.Wait != "":
		why = append(why, j.Wait)
	case j.Reason != "":
		why = append(why, j.Reason)
	}
	if len(why) > 0 {
		return why
	}
	waiting, first := 0, ""
	for _, a := range ahead {
		if a.Status != "decided" {
			if waiting == 0 {
				first = a.JobKey
			}
			waiting++
		}
	}
	if waiting > 0 {
		why = append(why, fmt.Sprintf("behind %d waiting job(s) ranked ahead, first %s", waiting, first))
	}
	want := deviceType(j.Device)
	best, bestType := 0, ""
	for _, t := range totals {
		if want != "" && t.GPUType != want {
			continue
		}
		if t.Free > best {
			best, bestType = t.Free, t.GPUType
		}
	}
	switch {
	case best == 0:
		why = append(why, fmt.Sprintf("no free GPU%s now", typeSuffix(want)))
	case best < j.GPUs:
		why = append(why, fmt.Sprintf("needs %d GPUs; at most %d free of one type (%s)", j.GPUs, best, strings.ToUpper(bestType)))
	default:
		why = append(why, fmt.Sprintf("%d %s free: not placed by the last round (node fit, constraints, T_min or jobs ahead)", best, strings.ToUpper(bestType)))
	}
	return why
}

// deviceType is the GPU type a device request names ("nvidia/gpu/Tesla T4" → t4), "" for any.
func deviceType(dev string) string {
	if m := constraint.RequestedModel(dev); m != "" {
		return gpuspec.Canonical(m)
	}
	return ""
}

func typeSuffix(t string) string {
	if t == "" {
		return ""
	}
	return " of type " + strings.ToUpper(t)
}

// --- Decisions ---

type decisionsBody struct {
	Namespace, Job, Status string
	Statuses               []string
	Namespaces             []string
	Records                []decisionRow
	Shown, Total           int
	TimelineSVG            []byte
}

type decisionRow struct {
	store.DecisionRecord
	GPUs  int
	Nodes []string
}

// maxDecisionRows bounds the table; the timeline shows every record read.
const maxDecisionRows = 200

func (d *Dashboard) decisionsPage(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	b := decisionsBody{Namespace: q.Get("namespace"), Job: q.Get("job"), Status: q.Get("status")}
	recs := d.svc.Decisions(1000, 0)
	statuses, nss := map[string]bool{}, map[string]bool{}
	var kept []store.DecisionRecord
	for _, rec := range recs {
		statuses[rec.Status] = true
		nss[rec.Namespace] = true
		if b.Namespace != "" && rec.Namespace != b.Namespace || b.Status != "" && rec.Status != b.Status ||
			b.Job != "" && !strings.Contains(rec.JobID, b.Job) {
			continue
		}
		kept = append(kept, rec)
	}
	b.Statuses, b.Namespaces = slices.Sorted(maps.Keys(statuses)), slices.Sorted(maps.Keys(nss))
	b.Total = len(kept)
	for i, rec := range kept {
		if i == maxDecisionRows {
			break
		}
		row := decisionRow{DecisionRecord: rec}
		if rec.Decision != nil {
			row.GPUs = rec.Decision.GPUs()
			for _, a := range rec.Decision.Assign {
				row.Nodes = append(row.Nodes, a.NodeID)
			}
		}
		b.Records = append(b.Records, row)
	}
	b.Shown = len(b.Records)
	svg, err := decisionTimeline(kept)
	if err != nil {
		httpjson.Error(w, http.StatusInternalServerError, err)
		return
	}
	b.TimelineSVG = svg
	d.render(w, r, "decisions", nil, b)
}

func decisionTimeline(recs []store.DecisionRecord) ([]byte, error) {
	var t0 time.Time
	for _, r := range recs {
		if t0.IsZero() || r.Time.Before(t0) {
			t0 = r.Time
		}
	}
	lanes := map[string]bool{}
	for _, r := range recs {
		lanes[r.Status] = true
	}
	names := slices.Sorted(maps.Keys(lanes))
	by := map[string]plotter.XYs{}
	for _, r := range recs {
		by[r.Status] = append(by[r.Status], plotter.XY{X: r.Time.Sub(t0).Seconds(), Y: float64(sort.SearchStrings(names, r.Status))})
	}
	var series []Series
	for _, n := range names {
		series = append(series, Series{Name: n, Points: by[n]})
	}
	return TimelineSVG("Decisions over time", t0, names, series)
}

// --- Learning ---

type learningBody struct {
	Learning
	ThrSVG, PowerSVG, ErrSVG, CurveSVG []byte
	Recent                             []LearnPoint
	MetaKeys                           []string
}

func (d *Dashboard) learningPage(w http.ResponseWriter, r *http.Request) {
	l, err := d.Learning()
	if err != nil {
		httpjson.Error(w, http.StatusInternalServerError, err)
		return
	}
	b := learningBody{Learning: l}
	thr, pw, errs := map[string]plotter.XYs{}, map[string]plotter.XYs{}, map[string]plotter.XYs{}
	var t0 time.Time
	for _, p := range l.Points {
		if t0.IsZero() || p.Time.Before(t0) {
			t0 = p.Time
		}
	}
	for _, p := range l.Points {
		thr[p.GPUType] = append(thr[p.GPUType], plotter.XY{X: p.Throughput, Y: p.PredThroughput})
		if p.PowerErr >= 0 {
			pw[p.GPUType] = append(pw[p.GPUType], plotter.XY{X: p.PowerW, Y: p.PredPowerW})
		}
		errs[p.GPUType] = append(errs[p.GPUType], plotter.XY{X: p.Time.Sub(t0).Seconds(), Y: p.ThrErr})
	}
	if b.ThrSVG, err = ScatterSVG("Throughput: predicted vs measured", "measured (steps/s)", "predicted (steps/s)", seriesOf(thr, true), true, true); err == nil {
		if b.PowerSVG, err = ScatterSVG("Power: predicted vs measured", "measured (W)", "predicted (W)", seriesOf(pw, true), true, true); err == nil {
			b.ErrSVG, err = LineSVG("Throughput error over time (rolling median of 10 runs)", "|predicted − measured| / measured", t0, rolling(seriesOf(errs, true), 10))
		}
	}
	if err != nil {
		httpjson.Error(w, http.StatusInternalServerError, err)
		return
	}
	if pi := l.PolicyInfo; pi != nil {
		b.MetaKeys = slices.Sorted(maps.Keys(pi.Meta))
		if len(pi.Curve) > 0 {
			var train, eval plotter.XYs
			for _, c := range pi.Curve {
				train = append(train, plotter.XY{X: float64(c.Epoch), Y: c.Reward})
				if c.Evaluated {
					eval = append(eval, plotter.XY{X: float64(c.Epoch), Y: c.EvalReward})
				}
			}
			b.CurveSVG, err = CurveSVG("Ranking policy training (reward > 0 beats the baseline)", "epoch", "ln(baseline / policy score)",
				[]Series{{Name: "rollouts (mean)", Points: train}, {Name: "greedy evaluation", Points: eval}})
			if err != nil {
				httpjson.Error(w, http.StatusInternalServerError, err)
				return
			}
		}
	}
	for i := len(l.Points) - 1; i >= 0 && len(b.Recent) < 20; i-- {
		b.Recent = append(b.Recent, l.Points[i])
	}
	d.render(w, r, "learning", nil, b)
}

// rolling replaces each series by the running median of its last n points (sorted by x), so
// the trend shows through run-to-run noise.
func rolling(series []Series, n int) []Series {
	out := make([]Series, len(series))
	for i, s := range series {
		pts := append(plotter.XYs(nil), s.Points...)
		sort.Slice(pts, func(a, b int) bool { return pts[a].X < pts[b].X })
		med := make(plotter.XYs, len(pts))
		for k := range pts {
			lo := max(0, k-n+1)
			w := make([]float64, 0, n)
			for _, q := range pts[lo : k+1] {
				w = append(w, q.Y)
			}
			sort.Float64s(w)
			m := w[len(w)/2]
			if len(w)%2 == 0 {
				m = (w[len(w)/2-1] + w[len(w)/2]) / 2
			}
			med[k] = plotter.XY{X: pts[k].X, Y: m}
		}
		out[i] = Series{Name: s.Name, Points: med}
	}
	return out
}

// --- Energy ---

type energyBody struct {
	Energy
	TypeSVG, NamespaceSVG, PerStepSVG []byte
	PowerNowW, PowerLimitW            float64
	Readings                          bool
}

func (d *Dashboard) energyPage(w http.ResponseWriter, r *http.Request) {
	en, err := d.Energy()
	if err != nil {
		httpjson.Error(w, http.StatusInternalServerError, err)
		return
	}
	fl := d.Fleet(r.Context(), FleetFilter{})
	b := energyBody{Energy: en, Readings: fl.Readings}
	for _, t := range fl.Totals {
		b.PowerNowW += t.PowerW
		b.PowerLimitW += t.PowerLimitW
	}
	labels := make([]string, len(en.Buckets))
	byType, byNS := map[string]plotter.XYs{}, map[string]plotter.XYs{}
	for i, bk := range en.Buckets {
		labels[i] = bucketLabel(bk.Start, en.BucketS)
		for k, v := range bk.ByType {
			byType[k] = append(byType[k], plotter.XY{X: float64(i), Y: v / 3.6e6})
		}
		for k, v := range bk.ByNamespace {
			byNS[k] = append(byNS[k], plotter.XY{X: float64(i), Y: v / 3.6e6})
		}
	}
	var perStep []Series
	var stepLabels []string
	for i, g := range en.ByType {
		stepLabels = append(stepLabels, strings.ToUpper(g.Key))
		perStep = append(perStep, Series{Name: strings.ToUpper(g.Key), Points: plotter.XYs{{X: float64(i), Y: g.JPerStep}}})
	}
	span := "per " + spanName(en.BucketS)
	if b.TypeSVG, err = StackedBarsSVG("Energy per GPU type ("+span+")", "kWh", labels, seriesOf(byType, true)); err == nil {
		if b.NamespaceSVG, err = StackedBarsSVG("Energy per namespace ("+span+")", "kWh", labels, seriesOf(byNS, false)); err == nil {
			b.PerStepSVG, err = StackedBarsSVG("Energy per unit of work", "J per step", stepLabels, perStep)
		}
	}
	if err != nil {
		httpjson.Error(w, http.StatusInternalServerError, err)
		return
	}
	d.render(w, r, "energy", &fl, b)
}

// spanName names a bucket width: "30 min", "3 h", "1 d".
func spanName(s float64) string {
	switch {
	case s >= 86400:
		return strconv.FormatFloat(s/86400, 'g', 3, 64) + " d"
	case s >= 3600:
		return strconv.FormatFloat(s/3600, 'g', 3, 64) + " h"
	}
	return strconv.FormatFloat(s/60, 'g', 3, 64) + " min"
}

func bucketLabel(t time.Time, bucketS float64) string {
	if bucketS >= 86400 {
		return t.UTC().Format("01-02")
	}
	return t.UTC().Format("01-02 15:04")
}

// seriesOf makes one series per key, sorted; upper names them in capitals (GPU types).
func seriesOf(m map[string]plotter.XYs, upper bool) []Series {
	out := make([]Series, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		name := k
		if upper {
			name = strings.ToUpper(k)
		}
		out = append(out, Series{Name: name, Points: m[k]})
	}
	return out
}
