package manifest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/policies"
)

// Write writes p as dir/PROMPTID.hcl (rendered by policies.Marshal) and
// returns the file's path. The file decodes with policies.Load to p with
// defaults applied.
func Write(dir, promptID string, p *policies.Policy) (string, error) {
	if promptID == "" || strings.ContainsAny(promptID, `/\`) || promptID == "." || promptID == ".." {
		return "", fmt.Errorf("write manifest: %q is not a file name: %w", promptID, errdefs.ErrInvalidArgument)
	}
	src, err := policies.Marshal(p)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("write manifest: %w", err)
	}
	path := filepath.Join(dir, promptID+".hcl")
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, src, 0o644); err != nil {
		return "", fmt.Errorf("write manifest: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("write manifest: %w", err)
	}
	return path, nil
}
