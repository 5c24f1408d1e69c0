package dashboard

import (
	"bytes"
	"fmt"
	"image/color"
	"math"
	"sort"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"

	"github.com/hetgpu/hetgpu/internal/figure"
)

// Plots are drawn on the server with gonum/plot (already the simulator report's plotting
// library) into SVG that is inlined in the page: no JavaScript, nothing to fetch, and the
// pages work offline and behind the API's bearer token with one request each.

// plot sizes in points.
const (
	plotW = 520
	plotH = 260
)

// Series is one named set of points.
type Series struct {
	Name   string
	Points plotter.XYs
}

// colorOf gives every GPU type, namespace or status a stable colour: its index in the sorted
// list of all names on the page.
func colorOf(names []string, name string) color.Color {
	i := sort.SearchStrings(names, name)
	return plotutil.Color(i)
}

func newPlot(title, x, y string) *plot.Plot {
	p := figure.New(title, x, y)
	p.Legend.Left = true
	sans(p)
	return p
}

// sans switches every text of a plot to the sans-serif face, as the pages around it.
func sans(p *plot.Plot) {
	for _, f := range []*vg.Length{&p.Title.TextStyle.Font.Size} {
		*f = vg.Points(11)
	}
	p.Title.TextStyle.Font.Variant = "Sans"
	for _, a := range []*plot.Axis{&p.X, &p.Y} {
		a.Label.TextStyle.Font.Variant = "Sans"
		a.Label.TextStyle.Font.Size = vg.Points(9)
		a.Tick.Label.Font.Variant = "Sans"
		a.Tick.Label.Font.Size = vg.Points(8)
	}
	p.Legend.TextStyle.Font.Variant = "Sans"
	p.Legend.TextStyle.Font.Size = vg.Points(8)
}

// svgOf renders a plot as an inline <svg> element (no XML prelude).
func svgOf(p *plot.Plot) ([]byte, error) {
	c := vgsvg.NewWith(vgsvg.UseWH(vg.Points(plotW), vg.Points(plotH)))
	p.Draw(draw.New(c))
	var b bytes.Buffer
	if _, err := c.WriteTo(&b); err != nil {
		return nil, fmt.Errorf("render plot %q: %w", p.Title.Text, err)
	}
	out := b.Bytes()
	if i := bytes.Index(out, []byte("<svg")); i > 0 {
		out = out[i:]
	}
	// Scale with the page: the viewBox keeps the aspect ratio.
	out = bytes.Replace(out, []byte(fmt.Sprintf(`<svg width="%dpt" height="%dpt"`, plotW, plotH)),
		[]byte(fmt.Sprintf(`<svg class="plot" role="img" aria-label=%q width="%d" height="%d"`, p.Title.Text, plotW*4/3, plotH*4/3)), 1)
	return out, nil
}

// maxLineDots is the most points a line is drawn with dots on; maxScatter the most points
// of one series a scatter draws (the newest, the series' last): each is ~100 bytes of SVG.
const (
	maxLineDots = 100
	maxScatter  = 400
)

// ScatterSVG plots named point sets (log-log when log is set) with the y = x diagonal when
// diag is set: predicted against measured. A series of more than maxScatter points is drawn
// with its last maxScatter.
func ScatterSVG(title, x, y string, series []Series, log, diag bool) ([]byte, error) {
	p := newPlot(title, x, y)
	// Points gather along the diagonal: the bottom-right corner is where the legend hides none.
	p.Legend.Top, p.Legend.Left = false, false
	names := seriesNames(series)
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, s := range series {
		pts := s.Points
		if log {
			pts = positive(pts)
		}
		if len(pts) > maxScatter {
			pts = pts[len(pts)-maxScatter:]
		}
		if len(pts) == 0 {
			continue
		}
		sc, err := dots(pts, names, s.Name)
		if err != nil {
			return nil, fmt.Errorf("scatter %s: %w", s.Name, err)
		}
		p.Add(sc)
		p.Legend.Add(s.Name, sc)
		for _, q := range pts {
			lo, hi = math.Min(lo, math.Min(q.X, q.Y)), math.Max(hi, math.Max(q.X, q.Y))
		}
	}
	if math.IsInf(lo, 1) {
		p.Title.Text += " (no data yet)"
		return svgOf(p)
	}
	// Both axes span the same range, so the diagonal is at 45°; a margin keeps the extreme
	// points inside.
	if log {
		p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
		p.X.Tick.Marker, p.Y.Tick.Marker = plot.LogTicks{Prec: -1}, plot.LogTicks{Prec: -1}
		lo, hi = lo/1.25, hi*1.25
	} else {
		pad := math.Max(hi-lo, math.Abs(hi)) * 0.05
		lo, hi = lo-pad, hi+pad
	}
	p.X.Min, p.X.Max, p.Y.Min, p.Y.Max = lo, hi, lo, hi
	if diag {
		l, err := plotter.NewLine(plotter.XYs{{X: lo, Y: lo}, {X: hi, Y: hi}})
		if err != nil {
			return nil, err
		}
		l.Color = color.Gray{Y: 128}
		l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		p.Add(l)
		p.Legend.Add("predicted = measured", l)
	}
	return svgOf(p)
}

// timeAxis picks the unit of a time axis from the span of the data (x in seconds since t0)
// and rescales the series to it.
func timeAxis(t0 time.Time, series []Series) (string, []Series) {
	span := 0.0
	for _, s := range series {
		for _, q := range s.Points {
			span = math.Max(span, q.X)
		}
	}
	unit, div := "seconds", 1.0
	switch {
	case span >= 3*86400:
		unit, div = "days", 86400
	case span >= 3*3600:
		unit, div = "hours", 3600
	case span >= 3*60:
		unit, div = "minutes", 60
	}
	out := make([]Series, len(series))
	for i, s := range series {
		pts := make(plotter.XYs, len(s.Points))
		for k, q := range s.Points {
			pts[k] = plotter.XY{X: q.X / div, Y: q.Y}
		}
		out[i] = Series{Name: s.Name, Points: pts}
	}
	return unit + " since " + t0.UTC().Format("2006-01-02 15:04:05 MST"), out
}

// LineSVG plots named lines against time (x in seconds since t0).
func LineSVG(title, y string, t0 time.Time, series []Series) ([]byte, error) {
	label, series := timeAxis(t0, series)
	p := newPlot(title, label, y)
	names := seriesNames(series)
	empty := true
	for _, s := range series {
		if len(s.Points) == 0 {
			continue
		}
		empty = false
		l, sc, err := plotter.NewLinePoints(s.Points)
		if err != nil {
			return nil, fmt.Errorf("line %s: %w", s.Name, err)
		}
		l.Color = colorOf(names, s.Name)
		l.Width = vg.Points(1.5)
		p.Add(l)
		// Dots only where they can be told apart (and where they do not weigh down the page).
		if len(s.Points) <= maxLineDots {
			sc.Color = l.Color
			sc.Radius = vg.Points(1.5)
			p.Add(sc)
		}
		p.Legend.Add(s.Name, l)
	}
	p.Y.Min = 0
	if empty {
		p.Title.Text += " (no data yet)"
	}
	return svgOf(p)
}

// CurveSVG plots named lines with points against a plain x axis (a learning curve); unlike
// LineSVG the y axis may go below zero.
func CurveSVG(title, x, y string, series []Series) ([]byte, error) {
	p := newPlot(title, x, y)
	p.Legend.Top, p.Legend.Left = false, false
	names := seriesNames(series)
	for _, s := range series {
		if len(s.Points) == 0 {
			continue
		}
		l, sc, err := plotter.NewLinePoints(s.Points)
		if err != nil {
			return nil, fmt.Errorf("curve %s: %w", s.Name, err)
		}
		l.Color = colorOf(names, s.Name)
		l.Width = vg.Points(1.5)
		sc.Color = l.Color
		sc.Radius = vg.Points(2)
		p.Add(l, sc)
		p.Legend.Add(s.Name, l)
	}
	zero, err := plotter.NewLine(plotter.XYs{{X: p.X.Min, Y: 0}, {X: p.X.Max, Y: 0}})
	if err != nil {
		return nil, err
	}
	zero.Color = color.Gray{Y: 128}
	zero.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
	p.Add(zero)
	return svgOf(p)
}

// StackedBarsSVG stacks one bar series per name over labelled positions.
func StackedBarsSVG(title, y string, labels []string, series []Series) ([]byte, error) {
	p := newPlot(title, "", y)
	p.Legend.Left = false
	names := seriesNames(series)
	w := vg.Points(math.Max(2, math.Min(24, 380/math.Max(1, float64(len(labels))))))
	var below *plotter.BarChart
	any := false
	for _, s := range series {
		vals := make(plotter.Values, len(labels))
		for _, q := range s.Points {
			if i := int(q.X); i >= 0 && i < len(vals) {
				vals[i] = q.Y
			}
		}
		b, err := plotter.NewBarChart(vals, w)
		if err != nil {
			return nil, fmt.Errorf("bars %s: %w", s.Name, err)
		}
		b.Color = colorOf(names, s.Name)
		b.LineStyle.Width = 0
		if below != nil {
			b.StackOn(below)
		}
		below = b
		p.Add(b)
		p.Legend.Add(s.Name, b)
		any = true
	}
	if any {
		// Room above the highest stack for the legend, and half a bar at both ends.
		top := 0.0
		for i := range labels {
			sum := 0.0
			for _, s := range series {
				for _, q := range s.Points {
					if int(q.X) == i {
						sum += q.Y
					}
				}
			}
			top = math.Max(top, sum)
		}
		p.Y.Max = top * (1.1 + 0.07*float64(len(series)))
		p.X.Min, p.X.Max = -0.7, float64(len(labels))-0.3
		// Label at most ~8 positions so the labels never overlap.
		step := max(1, (len(labels)+7)/8)
		var ticks []plot.Tick
		for i, l := range labels {
			t := plot.Tick{Value: float64(i)}
			if i%step == 0 {
				t.Label = l
			}
			ticks = append(ticks, t)
		}
		p.X.Tick.Marker = plot.ConstantTicks(ticks)
	} else {
		p.Title.Text += " (no data yet)"
	}
	p.Y.Min = 0
	return svgOf(p)
}

// dots is a series as small circles in the series' colour, the one style of both scatter plots.
func dots(pts plotter.XYs, names []string, name string) (*plotter.Scatter, error) {
	sc, err := plotter.NewScatter(pts)
	if err != nil {
		return nil, err
	}
	sc.GlyphStyle.Color = colorOf(names, name)
	sc.GlyphStyle.Radius = vg.Points(2.5)
	sc.GlyphStyle.Shape = draw.CircleGlyph{}
	return sc, nil
}

// TimelineSVG draws events as dots on one lane per category over time (x in seconds since
// t0).
func TimelineSVG(title string, t0 time.Time, lanes []string, series []Series) ([]byte, error) {
	label, series := timeAxis(t0, series)
	p := newPlot(title, label, "")
	p.Legend.Top, p.Legend.Left = false, false
	names := seriesNames(series)
	for _, s := range series {
		if len(s.Points) == 0 {
			continue
		}
		sc, err := dots(s.Points, names, s.Name)
		if err != nil {
			return nil, fmt.Errorf("timeline %s: %w", s.Name, err)
		}
		p.Add(sc)
	}
	ticks := make([]plot.Tick, len(lanes))
	for i, l := range lanes {
		ticks[i] = plot.Tick{Value: float64(i), Label: l}
	}
	p.Y.Tick.Marker = plot.ConstantTicks(ticks)
	p.Y.Min, p.Y.Max = -0.5, math.Max(0.5, float64(len(lanes))-0.5)
	if len(series) == 0 {
		p.Title.Text += " (no decisions yet)"
	}
	return svgOf(p)
}

func seriesNames(series []Series) []string {
	names := make([]string, len(series))
	for i, s := range series {
		names[i] = s.Name
	}
	sort.Strings(names)
	return names
}

func positive(pts plotter.XYs) plotter.XYs {
	out := make(plotter.XYs, 0, len(pts))
	for _, q := range pts {
		if q.X > 0 && q.Y > 0 {
			out = append(out, q)
		}
	}
	return out
}
