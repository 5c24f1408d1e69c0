// Package figure holds what every plot the project draws with gonum/plot starts from (the
// simulator's report, the dashboard's pages, the ranker's learning curve).
package figure

import (
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
)

// New is an empty plot with its title and axis labels, a grid, and the legend at the top.
func New(title, x, y string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = x
	p.Y.Label.Text = y
	p.Legend.Top = true
	p.Add(plotter.NewGrid())
	return p
}
