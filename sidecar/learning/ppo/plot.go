package ppo

import (
	"errors"
	"fmt"
	"image/color"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"github.com/hetgpu/hetgpu/internal/figure"
)

// PlotCurve writes the learning curve (mean rollout reward per epoch with its min-max band, and
// the greedy evaluation reward when measured) as an image; the extension of path picks the
// format (.png, .svg, .pdf).
func PlotCurve(curve []EpochStats, title, path string) error {
	if len(curve) == 0 {
		return errors.New("learning curve: no epochs to plot")
	}
	p := figure.New(title, "epoch", "reward (log ratio of the score, baseline / policy)")
	mean := make(plotter.XYs, len(curve))
	lo := make(plotter.XYs, len(curve))
	hi := make(plotter.XYs, len(curve))
	var eval plotter.XYs
	for i, s := range curve {
		x := float64(s.Epoch)
		mean[i] = plotter.XY{X: x, Y: s.Reward}
		lo[i] = plotter.XY{X: x, Y: s.RewardMin}
		hi[i] = plotter.XY{X: x, Y: s.RewardMax}
		if s.Evaluated {
			eval = append(eval, plotter.XY{X: x, Y: s.EvalReward})
		}
	}
	band := append(append(plotter.XYs{}, lo...), reverse(hi)...)
	poly, err := plotter.NewPolygon(band)
	if err != nil {
		return fmt.Errorf("learning curve: %w", err)
	}
	poly.Color = color.NRGBA{R: 70, G: 130, B: 180, A: 60}
	poly.LineStyle.Width = 0
	p.Add(poly)
	if err := addLine(p, mean, color.RGBA{R: 70, G: 130, B: 180, A: 255}, "rollouts (mean, min-max)"); err != nil {
		return err
	}
	if len(eval) > 0 {
		if err := addLine(p, eval, color.RGBA{R: 220, G: 90, B: 30, A: 255}, "greedy policy, evaluation episodes"); err != nil {
			return err
		}
	}
	// Head room for the legend.
	p.Y.Max += 0.25 * (p.Y.Max - p.Y.Min)
	p.Legend.Left = false
	if err := p.Save(7*vg.Inch, 4*vg.Inch, path); err != nil {
		return fmt.Errorf("learning curve %s: %w", path, err)
	}
	return nil
}

// addLine draws xys on p as a 1.5 pt line of colour c, named legend in the legend.
func addLine(p *plot.Plot, xys plotter.XYs, c color.Color, legend string) error {
	l, err := plotter.NewLine(xys)
	if err != nil {
		return fmt.Errorf("learning curve: %w", err)
	}
	l.Color = c
	l.Width = vg.Points(1.5)
	p.Add(l)
	p.Legend.Add(legend, l)
	return nil
}

func reverse(xs plotter.XYs) plotter.XYs {
	out := make(plotter.XYs, len(xs))
	for i, v := range xs {
		out[len(xs)-1-i] = v
	}
	return out
}
