package daemon

import (
	"testing"

	"github.com/airlock-sandbox/airlock/internal/logwriter"
	"github.com/airlock-sandbox/airlock/policies"
)

func TestLogCapDefaultsAgree(t *testing.T) {
	if logwriter.DefaultLimit != policies.DefaultLogSize {
		t.Errorf("logwriter.DefaultLimit %d != policies.DefaultLogSize %d", logwriter.DefaultLimit, policies.DefaultLogSize)
	}
}
