package policies

import (
	"path/filepath"
	"testing"
)

// TestExamples loads every example manifest: each must decode with no
// error diagnostic and validate.
func TestExamples(t *testing.T) {
	for _, path := range examples(t) {
		t.Run(filepath.Base(path), func(t *testing.T) {
			p, err := LoadFile(path, nil)
			if err != nil {
				t.Fatalf("LoadFile: %v", err)
			}
			if err := p.Validate(); err != nil {
				t.Errorf("Validate: %v", err)
			}
			// The images `make images` builds (images/*/recipe.env).
			switch p.Image {
			case "airlock/agent:bookworm", "airlock/claude-code:bookworm", "airlock/codex:bookworm":
			default:
				t.Errorf("image = %q, want one of the images airlock builds", p.Image)
			}
		})
	}
}

// TestReferenceIsComplete checks that reference.hcl sets every attribute
// the schema knows, so that it stays the schema's documentation.
func TestReferenceIsComplete(t *testing.T) {
	p, err := LoadFile("../examples/reference.hcl", nil)
	if err != nil {
		t.Fatal(err)
	}
	if p.Label == "" || p.Image == "" || len(p.Command) == 0 || len(p.Env) == 0 || p.User == DefaultUser ||
		p.Workdir == DefaultWorkdir || p.Timeout == DefaultTimeout || len(p.Capabilities) == 0 {
		t.Errorf("session attributes missing: %+v", p)
	}
	if r := p.Resources; r.CPUs == 0 || r.Memory == DefaultMemory || r.Pids == 0 || r.Disk == 0 {
		t.Errorf("resources attributes missing: %+v", r)
	}
	if len(p.Workspaces) == 0 || len(p.Mounts) == 0 || p.Egress == nil || len(p.Credentials) < 2 || p.Pool == nil {
		t.Fatalf("blocks missing: %+v", p)
	}
	w := p.Workspaces[0]
	if w.Target == "" || len(w.DenyRead) == 0 || len(w.Protect) == 0 || !w.PreserveUntracked || len(w.ProtectRefs) == 0 {
		t.Errorf("workspace attributes missing: %+v", w)
	}
	if e := p.Egress; len(e.Allow) == 0 || len(e.Deny) == 0 || len(e.AllowPrivate) == 0 || e.L7 == "" || e.Inspect == "" || len(e.HTTP) == 0 {
		t.Errorf("egress attributes missing: %+v", e)
	}
	var method, path, refs, jsonField bool
	for _, h := range p.Egress.HTTP {
		if h.Default == "" {
			t.Errorf("http %q has no default", h.Host)
		}
		for _, r := range h.Rules {
			method, path, refs = method || len(r.Methods) > 0, path || r.Path != "", refs || len(r.Refs) > 0
			jsonField = jsonField || len(r.JSON) > 0
		}
	}
	if !method || !path || !refs || !jsonField {
		t.Errorf("http rule attributes missing: %+v", p.Egress.HTTP)
	}
	var from, secretPath, header, bearer bool
	for _, s := range p.Secrets {
		from, secretPath = from || s.From != "", secretPath || s.Path != ""
		for _, in := range s.Inject {
			header, bearer = header || in.Header != "", bearer || in.Bearer
		}
	}
	if !from || !secretPath || !header || !bearer {
		t.Errorf("secret attributes missing: %+v", p.Secrets)
	}
	if a := p.Approval; a == nil || a.Timeout == 0 || a.OnTimeout == "" {
		t.Errorf("approval attributes missing: %+v", a)
	}
	if p.Pool.Size == 0 {
		t.Errorf("pool attributes missing: %+v", p.Pool)
	}
	var deliverEnv, deliverFile bool
	for _, c := range p.Credentials {
		deliverEnv = deliverEnv || c.Deliver == DeliverEnv
		deliverFile = deliverFile || c.Deliver == DeliverFile
	}
	if !deliverEnv || !deliverFile {
		t.Errorf("credentials do not show both deliveries: %+v", p.Credentials)
	}
}
