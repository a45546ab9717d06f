package audit

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// each collects what Each passes to its callback.
func each(t *testing.T, path string) ([]string, error) {
	t.Helper()
	var lines []string
	err := Each(t.Context(), path, func(raw json.RawMessage) error {
		lines = append(lines, string(raw))
		return nil
	})
	return lines, err
}

func TestEach(t *testing.T) {
	path := filepath.Join(t.TempDir(), File)
	if lines, err := each(t, path); err != nil || len(lines) != 0 {
		t.Fatalf("a missing log: %q, %v; want no events", lines, err)
	}
	evs := []string{`{"a":1}`, `{"b":"x\ny"}`, `{"c":[1,2]}`}
	if err := os.WriteFile(path, []byte(strings.Join(evs, "\n")+"\n"+`{"partial":`), 0o600); err != nil {
		t.Fatal(err)
	}
	lines, err := each(t, path)
	if err != nil || strings.Join(lines, "|") != strings.Join(evs, "|") {
		t.Fatalf("got %q, %v; want %q without the partial last line", lines, err, evs)
	}

	// The callback's error stops the read.
	stop := errors.New("stop")
	calls := 0
	if err := Each(t.Context(), path, func(json.RawMessage) error { calls++; return stop }); err != stop || calls != 1 {
		t.Errorf("Each: %v after %d calls, want the callback's error after 1", err, calls)
	}

	// A line that is not JSON fails the read, naming its number.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = f.WriteString("\n")
	f.Close()
	if lines, err := each(t, path); err == nil || !strings.Contains(err.Error(), "line 4") || len(lines) != 3 {
		t.Errorf("a corrupt line 4: %d events, %v", len(lines), err)
	}
}
