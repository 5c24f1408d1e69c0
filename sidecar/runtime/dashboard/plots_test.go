package dashboard_test

import (
	"bytes"
	"encoding/xml"
	"flag"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gonum.org/v1/plot/plotter"

	"github.com/hetgpu/hetgpu/internal/golden"
	"github.com/hetgpu/hetgpu/sidecar/runtime/dashboard"
)

var update = flag.Bool("update", false, "rewrite the golden SVG files in testdata")

// The plots are compared with golden files (`go test ./sidecar/runtime/dashboard -update` rewrites
// them; look at them in a browser before committing) and checked to be well-formed XML that
// an HTML page can inline.
func TestPlotsSVG(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	thr := []dashboard.Series{
		{Name: "T4", Points: plotter.XYs{{X: 1, Y: 1.2}, {X: 3, Y: 2.5}, {X: 0, Y: 4}}}, // the zero cannot be on a log axis: dropped
		{Name: "A100", Points: plotter.XYs{{X: 40, Y: 44}, {X: 120, Y: 100}}},
	}
	for _, tc := range []struct {
		name   string
		render func() ([]byte, error)
		want   []string
	}{
		{"scatter", func() ([]byte, error) {
			return dashboard.ScatterSVG("Throughput: predicted vs measured", "measured", "predicted", thr, true, true)
		}, []string{"Throughput: predicted vs measured", "A100", "T4", "predicted = measured"}},
		{"scatter-empty", func() ([]byte, error) {
			return dashboard.ScatterSVG("Power", "measured (W)", "predicted (W)", nil, true, true)
		}, []string{"Power (no data yet)"}},
		{"line", func() ([]byte, error) {
			return dashboard.LineSVG("Error", "relative error", t0, []dashboard.Series{
				{Name: "V100", Points: plotter.XYs{{X: 0, Y: 0.5}, {X: 7200, Y: 0.2}, {X: 4 * 3600, Y: 0.1}}}})
		}, []string{"hours since 2026-01-01 00:00:00 UTC", "V100"}},
		{"bars", func() ([]byte, error) {
			return dashboard.StackedBarsSVG("Energy per GPU type", "kWh", []string{"00:00", "01:00", "02:00"}, []dashboard.Series{
				{Name: "A100", Points: plotter.XYs{{X: 0, Y: 2}, {X: 2, Y: 1}}},
				{Name: "T4", Points: plotter.XYs{{X: 1, Y: 0.5}, {X: 2, Y: 0.25}}}})
		}, []string{"Energy per GPU type", "01:00", "A100", "T4"}},
		{"timeline", func() ([]byte, error) {
			return dashboard.TimelineSVG("Decisions", t0, []string{"pinned", "reheld"}, []dashboard.Series{
				{Name: "pinned", Points: plotter.XYs{{X: 0, Y: 0}, {X: 90, Y: 0}}},
				{Name: "reheld", Points: plotter.XYs{{X: 400, Y: 1}}}})
		}, []string{"minutes since 2026-01-01 00:00:00 UTC", "pinned", "reheld"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			svg, err := tc.render()
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.HasPrefix(svg, []byte(`<svg class="plot"`)) {
				t.Fatalf("not an inline <svg> element: %.80s", svg)
			}
			dec := xml.NewDecoder(bytes.NewReader(svg))
			for {
				if _, err := dec.Token(); err == io.EOF {
					break
				} else if err != nil {
					t.Fatalf("malformed SVG: %v", err)
				}
			}
			for _, w := range tc.want {
				if !strings.Contains(string(svg), w) {
					t.Errorf("SVG lacks %q", w)
				}
			}
			path := filepath.Join("testdata", tc.name+".svg")
			golden.Compare(t, path, svg, *update)
		})
	}
}

// A long series is drawn with its newest points only, so a page stays small.
func TestScatterDrawsNewestPoints(t *testing.T) {
	var pts plotter.XYs
	for i := 1; i <= 1000; i++ {
		pts = append(pts, plotter.XY{X: float64(i), Y: float64(i) * 1.1})
	}
	all, err := dashboard.ScatterSVG("s", "x", "y", []dashboard.Series{{Name: "A100", Points: pts}}, true, true)
	if err != nil {
		t.Fatal(err)
	}
	newest, err := dashboard.ScatterSVG("s", "x", "y", []dashboard.Series{{Name: "A100", Points: pts[600:]}}, true, true)
	if err != nil {
		t.Fatal(err)
	}
	fewer, err := dashboard.ScatterSVG("s", "x", "y", []dashboard.Series{{Name: "A100", Points: pts[601:]}}, true, true)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(all, newest) || bytes.Equal(newest, fewer) {
		t.Errorf("1000 points drew %d bytes, their newest 400 %d, 399 %d: want the first two equal", len(all), len(newest), len(fewer))
	}
}
