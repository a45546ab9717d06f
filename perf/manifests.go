package perf

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/airlock-sandbox/airlock/policies"
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

// Policy is the manifest as a policy. The command is always given on the
// command line (`-- CMD`); the manifest's own is `true`.
func (m Manifest) Policy() (*policies.Policy, error) {
	mem, err := policies.ParseSize(m.Memory)
	if err != nil {
		return nil, fmt.Errorf("manifest %s: memory: %w", m.Label, err)
	}
	p := &policies.Policy{
		Label:     m.Label,
		Image:     AgentImage,
		Command:   []string{"true"},
		Timeout:   policies.Duration(30 * time.Minute),
		Resources: policies.Resources{CPUs: m.CPUs, Memory: mem, Pids: int64(m.Pids)},
	}
	if m.Workspace != "" {
		p.Workspaces = []policies.Workspace{{HostPath: m.Workspace, Target: "/workspace", Mode: policies.ModeOverlay, DefaultDenyRead: true}}
	}
	if m.LoadDir != "" {
		p.Mounts = []policies.Mount{{HostPath: m.LoadDir, Target: "/opt/perf", ReadOnly: true, DefaultDenyRead: true}}
	}
	if m.Allow != nil {
		p.Egress = &policies.Egress{Allow: m.Allow}
	}
	if m.Credential != "" {
		p.Credentials = []policies.Credential{{Name: "api", Audience: m.Credential, Scopes: []string{"git.fetch repo=app"}, TTL: policies.Duration(15 * time.Minute)}}
	}
	if m.Pool > 0 {
		p.Pool = &policies.Pool{Size: m.Pool}
	}
	return p, nil
}

// HCL renders the manifest with policies.Marshal.
func (m Manifest) HCL() ([]byte, error) {
	p, err := m.Policy()
	if err != nil {
		return nil, err
	}
	return policies.Marshal(p)
}

// Write renders the manifest to dir/<label>.hcl and returns the path.
func (m Manifest) Write(dir string) (string, error) {
	src, err := m.HCL()
	if err != nil {
		return "", err
	}
	p := filepath.Join(dir, m.Label+".hcl")
	return p, os.WriteFile(p, src, 0o644)
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

// startManifests are the two manifests the start and teardown sections
// run: examples/hello.hcl (no layers) and the full perimeter, written to
// the work directory with its workspace.
func (e *Env) startManifests() (hello, full string, err error) {
	ws := filepath.Join(e.WorkDir, "workspace")
	if err := makeWorkspace(ws); err != nil {
		return "", "", err
	}
	if full, err = FullPerimeter(ws).Write(e.WorkDir); err != nil {
		return "", "", err
	}
	return filepath.Join(e.cfg.Repo, "examples", "hello.hcl"), full, nil
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
