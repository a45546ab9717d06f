package perf

import (
	"fmt"
	"image/color"
	"os"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

var palette = []color.RGBA{
	{R: 31, G: 119, B: 180, A: 255}, {R: 255, G: 127, B: 14, A: 255}, {R: 44, G: 160, B: 44, A: 255},
	{R: 214, G: 39, B: 40, A: 255}, {R: 148, G: 103, B: 189, A: 255}, {R: 140, G: 86, B: 75, A: 255},
}

// DensityChart saves a two-panel PNG. Top: each session's create+start
// latency against the number of sessions of its burst already running,
// one colour per burst size (N started at once queue behind each other).
// Bottom: the cost of a start against the number of live sessions: one
// start made while N idle sessions run (median, p10–p90 bars), and the
// burst's wall time divided by N.
func DensityChart(levels []DensityLevel, path string) error {
	top := plot.New()
	top.Title.Text = "N sessions started at once: each one's create+start latency"
	top.X.Label.Text = "sessions of the burst running when it was running"
	top.Y.Label.Text = "latency (ms)"
	top.Add(plotter.NewGrid())
	for i, lv := range levels {
		if len(lv.Samples) == 0 {
			continue
		}
		pts := make(plotter.XYs, len(lv.Samples))
		for j, s := range lv.Samples {
			pts[j].X, pts[j].Y = s[0], s[1]
		}
		sc, err := plotter.NewScatter(pts)
		if err != nil {
			return err
		}
		sc.GlyphStyle.Color = palette[i%len(palette)]
		sc.GlyphStyle.Radius = vg.Points(2)
		sc.GlyphStyle.Shape = draw.CircleGlyph{}
		top.Add(sc)
		top.Legend.Add(fmt.Sprintf("N=%d", lv.N), sc)
	}
	top.Legend.Top, top.Legend.Left = true, true
	top.X.Min, top.Y.Min = 0, 0

	bottom := plot.New()
	bottom.Title.Text = "Cost of one start against live sessions"
	bottom.X.Label.Text = "live sessions (N)"
	bottom.Y.Label.Text = "ms per session"
	bottom.Add(plotter.NewGrid())
	var seq, amort plotter.XYs
	var seqErr plotter.YErrors
	highest := 0.0
	for _, lv := range levels {
		if lv.SequentialMS.N > 0 {
			m := lv.SequentialMS
			seq = append(seq, plotter.XY{X: float64(lv.N), Y: m.Median})
			seqErr = append(seqErr, struct{ Low, High float64 }{m.Median - m.P10, m.P90 - m.Median})
			highest = max(highest, m.P90)
		}
		if lv.StartMS.N > 0 {
			amort = append(amort, plotter.XY{X: float64(lv.N), Y: lv.WallMS / float64(lv.N)})
			highest = max(highest, lv.WallMS/float64(lv.N))
		}
	}
	for i, l := range []struct {
		name string
		xys  plotter.XYs
	}{
		{"one start while N sessions idle (median, p10–p90)", seq},
		{"burst of N: wall time / N", amort},
	} {
		if len(l.xys) == 0 {
			continue
		}
		line, points, err := plotter.NewLinePoints(l.xys)
		if err != nil {
			return err
		}
		c := palette[i%len(palette)]
		line.Color, points.Color = c, c
		points.Shape = draw.BoxGlyph{}
		bottom.Add(line, points)
		bottom.Legend.Add(l.name, line, points)
	}
	if len(seq) > 0 {
		bars, err := plotter.NewYErrorBars(struct {
			plotter.XYs
			plotter.YErrors
		}{seq, seqErr})
		if err != nil {
			return err
		}
		bars.Color = palette[0]
		bottom.Add(bars)
	}
	bottom.Legend.Top, bottom.Legend.Left = true, true
	bottom.X.Min, bottom.Y.Min = 0, 0
	// Room above the data for the legend.
	bottom.Y.Max = 1.4 * highest

	img := vgimg.New(9*vg.Inch, 9*vg.Inch)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 2, Cols: 1, PadX: vg.Millimeter, PadY: 6 * vg.Millimeter,
		PadTop: 2 * vg.Millimeter, PadBottom: 2 * vg.Millimeter, PadLeft: 2 * vg.Millimeter, PadRight: 4 * vg.Millimeter}
	canvases := plot.Align([][]*plot.Plot{{top}, {bottom}}, tiles, dc)
	top.Draw(canvases[0][0])
	bottom.Draw(canvases[1][0])

	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
