package ppo

import (
	"errors"
	"fmt"
	"image/color"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// PlotCurve writes the learning curve (mean rollout reward per epoch with its min-max band, and
// the greedy evaluation reward when measured) as an image; the extension of path picks the
// format (.png, .svg, .pdf).
func PlotCurve(curve []EpochStats, title, path string) error {
	if len(curve) == 0 {
		return errors.New("learning curve: no epochs to plot")
	}
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "epoch"
	p.Y.Label.Text = "reward (log ratio of the score, baseline / policy)"
	p.Add(plotter.NewGrid())
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
	l, err := plotter.NewLine(mean)
	if err != nil {
		return fmt.Errorf("learning curve: %w", err)
	}
	l.Color = color.RGBA{R: 70, G: 130, B: 180, A: 255}
	l.Width = vg.Points(1.5)
	p.Add(l)
	p.Legend.Add("rollouts (mean, min-max)", l)
	if len(eval) > 0 {
		e, err := plotter.NewLine(eval)
		if err != nil {
			return fmt.Errorf("learning curve: %w", err)
		}
		e.Color = color.RGBA{R: 220, G: 90, B: 30, A: 255}
		e.Width = vg.Points(1.5)
		p.Add(e)
		p.Legend.Add("greedy policy, evaluation episodes", e)
	}
	// Head room for the legend.
	p.Y.Max += 0.25 * (p.Y.Max - p.Y.Min)
	p.Legend.Top = true
	p.Legend.Left = false
	if err := p.Save(7*vg.Inch, 4*vg.Inch, path); err != nil {
		return fmt.Errorf("learning curve %s: %w", path, err)
	}
	return nil
}

func reverse(xs plotter.XYs) plotter.XYs {
	out := make(plotter.XYs, len(xs))
	for i, v := range xs {
		out[len(xs)-1-i] = v
	}
	return out
}
