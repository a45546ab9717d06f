package api

import (
	"strings"
	"testing"

	"github.com/containerd/errdefs"
)

func TestValidateLabels(t *testing.T) {
	many := map[string]string{}
	for i := range MaxLabels + 1 {
		many[string(rune('a'+i))] = "x"
	}
	for _, tt := range []struct {
		name    string
		labels  map[string]string
		wantErr bool
	}{
		{"none", nil, false},
		{"kubernetes uid", map[string]string{"airlock.dev/session-uid": "2b0c6f3e-8a47-4c1f-9d55-0f5d3b7f2a10", "airlock.dev/session": "default/x"}, false},
		{"longest kubernetes namespace/name", map[string]string{"airlock.dev/session": strings.Repeat("n", 63) + "/" + strings.Repeat("s", 253)}, false},
		{"empty value", map[string]string{"k": ""}, false},
		{"empty key", map[string]string{"": "v"}, true},
		{"key ends with a dash", map[string]string{"k-": "v"}, true},
		{"key with a space", map[string]string{"a b": "v"}, true},
		{"key too long", map[string]string{strings.Repeat("k", MaxLabelKeyLength+1): "v"}, true},
		{"value too long", map[string]string{"k": strings.Repeat("v", MaxLabelValueBytes+1)}, true},
		{"value with a newline", map[string]string{"k": "a\nb"}, true},
		{"value not UTF-8", map[string]string{"k": "\xff"}, true},
		{"too many", many, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := ValidateLabels(tt.labels)
			if (err != nil) != tt.wantErr {
				t.Fatalf("ValidateLabels(%q) = %v, want error %v", tt.labels, err, tt.wantErr)
			}
			if err != nil && !errdefs.IsInvalidArgument(err) {
				t.Errorf("ValidateLabels(%q) = %v, want an invalid-argument error", tt.labels, err)
			}
		})
	}
}
