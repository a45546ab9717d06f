package stats

import (
	"math"
	"testing"
	"time"
)

func TestSummarize(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   []float64
		want Summary
	}{
		{"empty", nil, Summary{}},
		{"one", []float64{7}, Summary{N: 1, Min: 7, P10: 7, Median: 7, P90: 7, P99: 7, Max: 7, Mean: 7}},
		{"two", []float64{10, 0}, Summary{N: 2, Min: 0, P10: 1, Median: 5, P90: 9, P99: 9.9, Max: 10, Mean: 5}},
		{"unsorted 1..11", []float64{11, 1, 10, 2, 9, 3, 8, 4, 7, 5, 6},
			Summary{N: 11, Min: 1, P10: 2, Median: 6, P90: 10, P99: 10.9, Max: 11, Mean: 6}},
		{"NaN ignored", []float64{math.NaN(), 3, 1, 2}, Summary{N: 3, Min: 1, P10: 1.2, Median: 2, P90: 2.8, P99: 2.98, Max: 3, Mean: 2}},
		{"only NaN", []float64{math.NaN()}, Summary{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Summarize(tc.in)
			if got.N != tc.want.N {
				t.Fatalf("N = %d, want %d", got.N, tc.want.N)
			}
			for _, f := range []struct {
				name      string
				got, want float64
			}{
				{"min", got.Min, tc.want.Min}, {"p10", got.P10, tc.want.P10}, {"median", got.Median, tc.want.Median},
				{"p90", got.P90, tc.want.P90}, {"p99", got.P99, tc.want.P99}, {"max", got.Max, tc.want.Max},
				{"mean", got.Mean, tc.want.Mean},
			} {
				if math.Abs(f.got-f.want) > 1e-9 {
					t.Errorf("%s = %v, want %v", f.name, f.got, f.want)
				}
			}
		})
	}
}

func TestSummarizeDoesNotReorderInput(t *testing.T) {
	in := []float64{3, 1, 2}
	Summarize(in)
	if in[0] != 3 || in[1] != 1 || in[2] != 2 {
		t.Fatalf("input reordered: %v", in)
	}
	Quantile(in, 0.5)
	if in[0] != 3 {
		t.Fatalf("Quantile reordered its input: %v", in)
	}
}

func TestQuantileBounds(t *testing.T) {
	xs := []float64{5, 1, 3}
	for _, tc := range []struct{ q, want float64 }{{-1, 1}, {0, 1}, {0.5, 3}, {1, 5}, {2, 5}} {
		if got := Quantile(xs, tc.q); got != tc.want {
			t.Errorf("Quantile(%v) = %v, want %v", tc.q, got, tc.want)
		}
	}
	if !math.IsNaN(Quantile(nil, 0.5)) {
		t.Error("Quantile of no samples is not NaN")
	}
}

func TestUnits(t *testing.T) {
	ds := []time.Duration{1500 * time.Microsecond, 2 * time.Second}
	ms, us := Millis(ds), Micros(ds)
	if ms[0] != 1.5 || ms[1] != 2000 || us[0] != 1500 || us[1] != 2e6 {
		t.Fatalf("Millis = %v, Micros = %v", ms, us)
	}
}

func TestSpread(t *testing.T) {
	if got := (Summary{}).Spread("%.0f"); got != "–" {
		t.Errorf("empty Spread = %q", got)
	}
	s := Summarize([]float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11})
	if got, want := s.Spread("%.0f"), "6 (2–10)"; got != want {
		t.Errorf("Spread = %q, want %q", got, want)
	}
}
