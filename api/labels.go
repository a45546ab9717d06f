package api

import (
	"fmt"
	"regexp"
	"unicode"
	"unicode/utf8"

	"github.com/containerd/errdefs"
)

// Bounds of a session's labels (CreateRequest.Labels). A value holds a
// Kubernetes namespace/name (the node agent's airlock.dev/session label):
// up to 63 + 1 + 253 bytes.
const (
	MaxLabels          = 16
	MaxLabelKeyLength  = 128
	MaxLabelValueBytes = 320
)

var labelKey = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9._/-]*[A-Za-z0-9])?$`)

// ValidateLabels checks a create request's labels: at most MaxLabels; each
// key of letters, digits and [._/-], beginning and ending with a letter or
// digit, at most MaxLabelKeyLength bytes (Kubernetes' qualified names fit);
// each value valid UTF-8 without control characters, at most
// MaxLabelValueBytes. A failure is an errdefs.ErrInvalidArgument error
// naming the label.
func ValidateLabels(labels map[string]string) error {
	if len(labels) > MaxLabels {
		return fmt.Errorf("%d labels, at most %d: %w", len(labels), MaxLabels, errdefs.ErrInvalidArgument)
	}
	for k, v := range labels {
		if len(k) > MaxLabelKeyLength || !labelKey.MatchString(k) {
			return fmt.Errorf("label key %q: want letters, digits and . _ / -, beginning and ending with a letter or digit, at most %d bytes: %w", k, MaxLabelKeyLength, errdefs.ErrInvalidArgument)
		}
		if len(v) > MaxLabelValueBytes || !utf8.ValidString(v) {
			return fmt.Errorf("label %q: the value must be UTF-8 of at most %d bytes: %w", k, MaxLabelValueBytes, errdefs.ErrInvalidArgument)
		}
		for _, r := range v {
			if unicode.IsControl(r) {
				return fmt.Errorf("label %q: the value holds a control character: %w", k, errdefs.ErrInvalidArgument)
			}
		}
	}
	return nil
}
