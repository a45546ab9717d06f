package perf

import (
	"testing"
	"time"
)

func TestEstimateLevel(t *testing.T) {
	if got := estimateLevel(nil, 100); got != 0 {
		t.Errorf("estimate with no level run = %v, want 0", got)
	}
	done := []DensityLevel{{N: 10, WallMS: 800, RemoveWallMS: 200, SequentialMS: sum(100)}}
	// (800+200)/10 ms per session × 50 + 2×5×100 ms of probes + 1 s.
	if got, want := estimateLevel(done, 50), 7*time.Second; got != want {
		t.Errorf("estimate for 50 = %v, want %v", got, want)
	}
}
