package policies

import (
	"github.com/hashicorp/hcl/v2/hclparse"
	"github.com/hashicorp/hcl/v2/hclwrite"
)

// Format returns src in canonical HCL layout. Source that does not parse
// is returned as a *DiagnosticsError and nothing is formatted. Format does
// not check the manifest's schema; use Load for that.
func Format(src []byte) ([]byte, error) {
	return FormatSource("<input>", src)
}

// FormatSource is Format with a filename for the diagnostics.
func FormatSource(filename string, src []byte) ([]byte, error) {
	parser := hclparse.NewParser()
	if _, diags := parser.ParseHCL(src, filename); diags.HasErrors() {
		return nil, &DiagnosticsError{diags: diags, files: parser.Files()}
	}
	return hclwrite.Format(src), nil
}
