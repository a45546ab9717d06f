package fsscope

import (
	"os"
	"testing"
)

func TestMain(m *testing.M) {
	if os.Getenv(probeEnv) != "" {
		probeMain()
		os.Exit(0)
	}
	os.Exit(m.Run())
}
