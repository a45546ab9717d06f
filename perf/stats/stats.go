// Package stats summarises samples the way airlock's performance report
// shows them: median and spread (p10/p90), a tail (p99), and the extremes.
package stats

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// Summary describes a set of samples in one unit.
type Summary struct {
	N      int     `json:"n"`
	Min    float64 `json:"min"`
	P10    float64 `json:"p10"`
	Median float64 `json:"median"`
	P90    float64 `json:"p90"`
	P99    float64 `json:"p99"`
	Max    float64 `json:"max"`
	Mean   float64 `json:"mean"`
}

// Summarize computes a Summary; an empty input gives the zero Summary.
// NaN samples are ignored.
func Summarize(samples []float64) Summary {
	xs := make([]float64, 0, len(samples))
	for _, x := range samples {
		if !math.IsNaN(x) {
			xs = append(xs, x)
		}
	}
	if len(xs) == 0 {
		return Summary{}
	}
	slices.Sort(xs)
	sum := 0.0
	for _, x := range xs {
		sum += x
	}
	return Summary{
		N:      len(xs),
		Min:    xs[0],
		P10:    quantile(xs, 0.10),
		Median: quantile(xs, 0.50),
		P90:    quantile(xs, 0.90),
		P99:    quantile(xs, 0.99),
		Max:    xs[len(xs)-1],
		Mean:   sum / float64(len(xs)),
	}
}

// Quantile returns the q-quantile (0 <= q <= 1) of samples, interpolating
// linearly between the closest ranks (the R-7 / NumPy default definition).
func Quantile(samples []float64, q float64) float64 {
	if len(samples) == 0 {
		return math.NaN()
	}
	xs := slices.Clone(samples)
	slices.Sort(xs)
	return quantile(xs, q)
}

// quantile is Quantile on sorted, non-empty xs.
func quantile(xs []float64, q float64) float64 {
	q = min(max(q, 0), 1)
	pos := q * float64(len(xs)-1)
	lo := int(math.Floor(pos))
	hi := min(lo+1, len(xs)-1)
	frac := pos - float64(lo)
	return xs[lo] + (xs[hi]-xs[lo])*frac
}

// Millis converts durations to milliseconds.
func Millis(ds []time.Duration) []float64 {
	out := make([]float64, len(ds))
	for i, d := range ds {
		out[i] = float64(d) / float64(time.Millisecond)
	}
	return out
}

// Micros converts durations to microseconds.
func Micros(ds []time.Duration) []float64 {
	out := make([]float64, len(ds))
	for i, d := range ds {
		out[i] = float64(d) / float64(time.Microsecond)
	}
	return out
}

// Spread formats the median with its p10–p90 range, e.g. "412 (398–431)".
func (s Summary) Spread(format string) string {
	if s.N == 0 {
		return "–"
	}
	f := func(x float64) string { return fmt.Sprintf(format, x) }
	return fmt.Sprintf("%s (%s–%s)", f(s.Median), f(s.P10), f(s.P90))
}
