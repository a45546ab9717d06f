package report

import (
	"fmt"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"

	"github.com/airlock-sandbox/airlock/bench/eval"
)

// Chart size.
const (
	chartW = 8 * vg.Inch
	chartH = 4.5 * vg.Inch
)

// series is one group of bars: a value per category.
type series struct {
	name   string
	values []float64
}

// barChart draws grouped bars: one group per category, one bar per series.
func barChart(path, title, ylabel string, categories []string, ss []series, ymax float64) error {
	p := plot.New()
	p.Title.Text = title
	p.Y.Label.Text = ylabel
	if ymax <= 0 {
		for _, s := range ss {
			for _, v := range s.values {
				ymax = max(ymax, v)
			}
		}
		ymax = max(ymax, 1)
	}
	// Head room for the legend.
	p.Y.Min, p.Y.Max = 0, ymax*1.25
	p.X.Min, p.X.Max = -0.5, float64(len(categories))-0.5
	p.Legend.Top = true
	n := len(ss)
	// Each group takes 80% of its category's share of the plot's width.
	plotW := chartW - vg.Inch
	width := plotW * 0.8 / vg.Length(max(1, n*len(categories)))
	for i, s := range ss {
		bars, err := plotter.NewBarChart(plotter.Values(s.values), width)
		if err != nil {
			return fmt.Errorf("series %q: %w", s.name, err)
		}
		bars.Color = plotutil.Color(i)
		bars.LineStyle.Width = 0
		bars.Offset = vg.Length(float64(i)-float64(n-1)/2) * width
		p.Add(bars)
		p.Legend.Add(s.name, bars)
	}
	p.NominalX(categories...)
	return p.Save(chartW, chartH, path)
}

// chartHarmful: harmful false negatives per family and mode, headline gate.
func chartHarmful(path string, s *Summary) error {
	cats := append([]string{eval.FamilyAll}, s.Families...)
	var ss []series
	for _, mode := range s.Modes {
		v := make([]float64, len(cats))
		for i, fam := range cats {
			if r, ok := s.row(s.HeadlineGate, mode, fam); ok {
				v[i] = float64(r.Harmful)
			}
		}
		ss = append(ss, series{mode, v})
	}
	return barChart(path, "Harmful false negatives ("+s.HeadlineGate+")", "distinct cases", cats, ss, 0)
}

// chartAblation: HarmlessFNRate per family for each mode (layer).
func chartAblation(path string, s *Summary) error {
	cats := append([]string{eval.FamilyAll}, s.Families...)
	var ss []series
	for _, mode := range s.Modes {
		v := make([]float64, len(cats))
		for i, fam := range cats {
			if r, ok := s.row(s.HeadlineGate, mode, fam); ok {
				v[i] = r.HarmlessFNRate.Value
			}
		}
		ss = append(ss, series{mode, v})
	}
	return barChart(path, "HarmlessFNRate per layer ("+s.HeadlineGate+")", "share of FNs made harmless", cats, ss, 1)
}

// chartAxes: HarmlessFNRate and PerimeterFPR per S, B and R value under
// the full perimeter.
func chartAxes(path string, s *Summary) error {
	var cats []string
	var harmless, fpr []float64
	for _, axis := range []string{eval.AxisS, eval.AxisB, eval.AxisR} {
		for _, v := range s.axisValues(axis) {
			r, ok := s.find(s.HeadlineGate, PerimeterMode, eval.FamilyAll, axis, v)
			if !ok {
				continue
			}
			cats = append(cats, v)
			harmless = append(harmless, r.HarmlessFNRate.Value)
			fpr = append(fpr, r.PerimeterFPR.Value)
		}
	}
	if len(cats) == 0 {
		cats = []string{"(no " + PerimeterMode + " runs)"}
		harmless, fpr = []float64{0}, []float64{0}
	}
	return barChart(path, "S/B/R breakdown ("+PerimeterMode+", "+s.HeadlineGate+")", "rate", cats,
		[]series{{"HarmlessFNRate", harmless}, {"PerimeterFPR", fpr}}, 1)
}
