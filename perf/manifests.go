package perf

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Manifest describes a generated session manifest.
type Manifest struct {
	Label string
	// CPUs, Memory (e.g. "128MiB") and Pids are the session's limits.
	CPUs   float64
	Memory string
	Pids   int
	// Workspace is an overlay workspace's host directory ("" for none).
	Workspace string
	// Allow is the egress allowlist (nil: no egress block).
	Allow []string
	// Credential adds one credential for this audience ("" for none).
	Credential string
	// LoadDir is bound read-only at /opt/perf ("" for none).
	LoadDir string
	// Pool is the warm pool's size (0: no pool block).
	Pool int
}

// HCL renders the manifest. The command is always given on the command
// line (`-- CMD`); the manifest's own is `true`.
func (m Manifest) HCL() string {
	var b strings.Builder
	fmt.Fprintf(&b, "session %q {\n", m.Label)
	fmt.Fprintf(&b, "  image   = %q\n", AgentImage)
	b.WriteString("  command = [\"true\"]\n")
	b.WriteString("  timeout = \"30m\"\n\n")
	b.WriteString("  resources {\n")
	fmt.Fprintf(&b, "    cpus   = %s\n", strconv.FormatFloat(m.CPUs, 'f', -1, 64))
	fmt.Fprintf(&b, "    memory = %q\n", m.Memory)
	fmt.Fprintf(&b, "    pids   = %d\n", m.Pids)
	b.WriteString("  }\n")
	if m.Workspace != "" {
		fmt.Fprintf(&b, "\n  workspace %q {\n    target = \"/workspace\"\n    mode   = \"overlay\"\n  }\n", m.Workspace)
	}
	if m.LoadDir != "" {
		fmt.Fprintf(&b, "\n  mount %q {\n    target    = \"/opt/perf\"\n    read_only = true\n  }\n", m.LoadDir)
	}
	if m.Allow != nil {
		quoted := make([]string, len(m.Allow))
		for i, a := range m.Allow {
			quoted[i] = strconv.Quote(a)
		}
		fmt.Fprintf(&b, "\n  egress {\n    allow = [%s]\n  }\n", strings.Join(quoted, ", "))
	}
	if m.Credential != "" {
		fmt.Fprintf(&b, "\n  credential \"api\" {\n    audience = %q\n    scopes   = [\"git.fetch repo=app\"]\n    ttl      = \"15m\"\n  }\n", m.Credential)
	}
	if m.Pool > 0 {
		fmt.Fprintf(&b, "\n  pool {\n    size = %d\n  }\n", m.Pool)
	}
	b.WriteString("}\n")
	return b.String()
}

// Write renders the manifest to dir/<label>.hcl and returns the path.
func (m Manifest) Write(dir string) (string, error) {
	p := filepath.Join(dir, m.Label+".hcl")
	return p, os.WriteFile(p, []byte(m.HCL()), 0o644)
}

// FullPerimeter is the full-perimeter manifest of the cold-start and
// teardown measurements: the limits of examples/hello.hcl plus an overlay
// workspace, egress to one world host and one credential.
func FullPerimeter(workspace string) Manifest {
	return Manifest{
		Label: "perf-full", CPUs: 0.5, Memory: "128MiB", Pids: 64,
		Workspace: workspace, Allow: []string{EgressHost + ":80"}, Credential: EgressHost,
	}
}

// makeWorkspace fills dir with a small tree (a few source files and a
// README), the "small temp dir" of the full perimeter.
func makeWorkspace(dir string) error {
	if err := os.MkdirAll(filepath.Join(dir, "src"), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "README.md"), []byte("# perf workspace\n"), 0o644); err != nil {
		return err
	}
	for i := range 10 {
		src := fmt.Sprintf("package src\n\nconst N%d = %d\n", i, i)
		if err := os.WriteFile(filepath.Join(dir, "src", fmt.Sprintf("f%d.go", i)), []byte(src), 0o644); err != nil {
			return err
		}
	}
	return nil
}
