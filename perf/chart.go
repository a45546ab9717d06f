package perf

import (
	"fmt"
	"image/color"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// DensityChart draws each session's start time against the number of
// sessions live when it was running, one colour per burst size, with the
// median per burst and the amortised cost (wall time / N) as lines, and
// saves it as a PNG.
func DensityChart(levels []DensityLevel, path string) error {
	p := plot.New()
	p.Title.Text = "Session start time vs live sessions (N started at once)"
	p.X.Label.Text = "live sessions when the session was running"
	p.Y.Label.Text = "create+start latency (ms)"
	p.Add(plotter.NewGrid())
	palette := []color.RGBA{
		{R: 31, G: 119, B: 180, A: 255}, {R: 255, G: 127, B: 14, A: 255}, {R: 44, G: 160, B: 44, A: 255},
		{R: 214, G: 39, B: 40, A: 255}, {R: 148, G: 103, B: 189, A: 255}, {R: 140, G: 86, B: 75, A: 255},
	}
	var med, amort, seq plotter.XYs
	for i, lv := range levels {
		pts := make(plotter.XYs, len(lv.Samples))
		for j, s := range lv.Samples {
			pts[j].X, pts[j].Y = s[0], s[1]
		}
		if len(pts) > 0 {
			sc, err := plotter.NewScatter(pts)
			if err != nil {
				return err
			}
			sc.GlyphStyle.Color = palette[i%len(palette)]
			sc.GlyphStyle.Radius = vg.Points(2)
			sc.GlyphStyle.Shape = draw.CircleGlyph{}
			p.Add(sc)
			p.Legend.Add(fmt.Sprintf("N=%d", lv.N), sc)
		}
		if lv.StartMS.N > 0 {
			med = append(med, plotter.XY{X: float64(lv.N), Y: lv.StartMS.Median})
			amort = append(amort, plotter.XY{X: float64(lv.N), Y: lv.WallMS / float64(lv.N)})
		}
		if lv.SequentialMS.N > 0 {
			seq = append(seq, plotter.XY{X: float64(lv.N), Y: lv.SequentialMS.Median})
		}
	}
	for _, l := range []struct {
		name string
		xys  plotter.XYs
		dash []vg.Length
	}{
		{"median latency of the N started at once", med, nil},
		{"wall time / N (amortised)", amort, []vg.Length{vg.Points(4), vg.Points(3)}},
		{"one start while N run (median of 5)", seq, []vg.Length{vg.Points(1), vg.Points(2)}},
	} {
		if len(l.xys) == 0 {
			continue
		}
		line, points, err := plotter.NewLinePoints(l.xys)
		if err != nil {
			return err
		}
		line.Color = color.Black
		line.Dashes = l.dash
		points.Shape = draw.BoxGlyph{}
		points.Color = color.Black
		p.Add(line, points)
		p.Legend.Add(l.name, line, points)
	}
	p.Legend.Top = true
	p.Legend.Left = true
	p.Y.Min = 0
	p.X.Min = 0
	return p.Save(9*vg.Inch, 5.5*vg.Inch, path)
}
