package authgate

import "testing"

// mustDefault loads the shipped set or fails the test with every
// diagnostic.
func mustDefault(t *testing.T) *Set {
	t.Helper()
	set, err := Default()
	if err != nil {
		if de, ok := err.(*DiagnosticsError); ok {
			for _, d := range de.Errors() {
				t.Error(d)
			}
		}
		t.Fatalf("Default: %v", err)
	}
	return set
}
