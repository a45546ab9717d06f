//go:build !unix

package load

import "time"

// processCPU is not measured here.
func processCPU() time.Duration { return 0 }
