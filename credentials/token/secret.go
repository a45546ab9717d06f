package token

import (
	"fmt"
	"log/slog"
)

// Redacted is what a Secret prints, logs and marshals as.
const Redacted = "[REDACTED]"

// Secret holds a credential. It prints, formats, logs and marshals as
// Redacted with every verb and encoder; Reveal is the only way to read it, so
// each place that hands a credential on is visible in the code.
type Secret string

// Reveal returns the credential itself.
func (s Secret) Reveal() string { return string(s) }

// String returns Redacted.
func (s Secret) String() string { return Redacted }

// GoString returns Redacted.
func (s Secret) GoString() string { return Redacted }

// Format writes Redacted for every verb, including %q, %x and %#v.
func (s Secret) Format(f fmt.State, verb rune) { fmt.Fprint(f, Redacted) }

// LogValue implements slog.LogValuer.
func (s Secret) LogValue() slog.Value { return slog.StringValue(Redacted) }

// MarshalText returns Redacted, so JSON, XML and text encoders never write
// the credential.
func (s Secret) MarshalText() ([]byte, error) { return []byte(Redacted), nil }
