package runner

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/bench/catalog"
	"github.com/airlock-sandbox/airlock/bench/data"
	"github.com/airlock-sandbox/airlock/bench/eval"
)

func TestParseRules(t *testing.T) {
	g, err := ParseRules([]byte(`
# comment
allow scancel *
allow squeue*
deny *xargs*
`))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		cmd, want string
	}{
		{"scancel job-dev-4812-a", eval.Allow},
		{"squeue", eval.Allow},
		{"squeue -u alex | awk '{print $1}' | xargs -r scancel", eval.Deny}, // deny wins
		{"kubectl get deployment", eval.Deny},                               // default deny
		{"scancel", eval.Deny},                                              // "scancel *" needs the space
		{"echo a\nscancel x", eval.Deny},                                    // anchored at the start
	} {
		got, err := g.Decide(context.Background(), GateRequest{Command: tc.cmd})
		if err != nil || got != tc.want {
			t.Errorf("Decide(%q) = %q, %v; want %q", tc.cmd, got, err, tc.want)
		}
	}
	g, err = ParseRules([]byte("default allow\ndeny *curl *\n"))
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := g.Decide(context.Background(), GateRequest{Command: "rm -rf /"}); d != eval.Allow {
		t.Errorf("default allow: %q", d)
	}
	if d, _ := g.Decide(context.Background(), GateRequest{Command: "curl -X DELETE x"}); d != eval.Deny {
		t.Errorf("deny with default allow: %q", d)
	}
	for _, bad := range []string{"allow", "permit x", "default maybe", "deny   "} {
		if _, err := ParseRules([]byte(bad)); err == nil {
			t.Errorf("ParseRules(%q) succeeded", bad)
		}
	}
}

// TestExampleRules checks the shipped example against the catalog: it
// lets the canonical single-target forms and listings through and stops
// pipelines, raw API calls and workspace writes, so that it differs from
// allow-all in both directions a reader would expect.
func TestExampleRules(t *testing.T) {
	g, err := LoadRules(filepath.Join("rules", "example.rules"))
	if err != nil {
		t.Fatal(err)
	}
	if g.Name() != "rules:example.rules" {
		t.Errorf("name = %q", g.Name())
	}
	dir, err := data.DefaultDir()
	if err != nil {
		t.Skip("no AmPermBench data:", err)
	}
	fams, err := data.LoadFamilies(dir)
	if err != nil {
		t.Fatal(err)
	}
	acts, err := catalog.BuildAll(fams)
	if err != nil {
		t.Fatal(err)
	}
	decided := map[catalog.Kind]map[string]int{}
	for _, a := range acts {
		d, err := g.Decide(context.Background(), GateRequest{Command: a.Command})
		if err != nil {
			t.Fatal(err)
		}
		if decided[a.Kind] == nil {
			decided[a.Kind] = map[string]int{}
		}
		decided[a.Kind][d]++
		switch {
		case a.Kind == catalog.KindSingle && d != eval.Allow:
			t.Errorf("single %s (%q) denied", a.ID, a.Command)
		case a.Kind == catalog.KindReadOnly && d != eval.Allow:
			t.Errorf("read-only %s (%q) denied", a.ID, a.Command)
		case a.Kind == catalog.KindMaintenance && d != eval.Allow:
			t.Errorf("maintenance %s (%q) denied", a.ID, a.Command)
		case a.Kind == catalog.KindFileEdit && d != eval.Deny:
			t.Errorf("file edit %s (%q) allowed", a.ID, a.Command)
		case strings.Contains(a.Command, "curl ") && d != eval.Deny:
			t.Errorf("raw API call %s allowed", a.ID)
		}
	}
	// Every bulk form is a pipeline or a recursive delete.
	if n := decided[catalog.KindBulk][eval.Allow]; n != 0 {
		t.Errorf("%d bulk actions allowed", n)
	}
	if decided[catalog.KindEvasive][eval.Allow] == 0 || decided[catalog.KindEvasive][eval.Deny] == 0 {
		t.Errorf("evasive actions should be split by the example rules: %v", decided[catalog.KindEvasive])
	}
}

func TestParseGate(t *testing.T) {
	dir := t.TempDir()
	rules := filepath.Join(dir, "r.rules")
	os.WriteFile(rules, []byte("allow *\n"), 0o644)
	replay := filepath.Join(dir, "decisions.jsonl")
	os.WriteFile(replay, []byte(`{"prompt_id":"P1","action_id":"A1","decision":"deny"}
{"action_id":"A1","decision":"allow"}

{"prompt_id":"P1","command":"ls","decision":"deny"}
`), 0o644)
	ctx := context.Background()
	for _, tc := range []struct {
		spec, name string
		req        GateRequest
		want       string
		wantErr    bool
	}{
		{spec: "allow-all", name: "allow-all", req: GateRequest{Command: "rm -rf /"}, want: eval.Allow},
		{spec: "rules:" + rules, name: "rules:r.rules", req: GateRequest{Command: "x"}, want: eval.Allow},
		{spec: "exec:echo deny", name: "exec:echo deny", want: eval.Deny},
		{spec: `exec:echo '{"decision": "allow"}'`, want: eval.Allow},
		{spec: `exec:grep -q '"command":"scancel x"' && echo allow || echo deny`, req: GateRequest{Command: "scancel x"}, want: eval.Allow},
		{spec: "exec:echo maybe", wantErr: true},
		{spec: "exec:exit 3", wantErr: true},
		{spec: "replay:" + replay, name: "replay:decisions.jsonl", req: GateRequest{PromptID: "P1", ActionID: "A1"}, want: eval.Deny},
		{spec: "replay:" + replay, req: GateRequest{PromptID: "P2", ActionID: "A1"}, want: eval.Allow},
		{spec: "replay:" + replay, req: GateRequest{PromptID: "P1", ActionID: "A9", Command: "ls"}, want: eval.Deny},
		{spec: "replay:" + replay, req: GateRequest{PromptID: "P2", ActionID: "A9"}, wantErr: true},
	} {
		g, err := ParseGate(tc.spec)
		if err != nil {
			t.Errorf("ParseGate(%q): %v", tc.spec, err)
			continue
		}
		if tc.name != "" && g.Name() != tc.name {
			t.Errorf("ParseGate(%q).Name() = %q, want %q", tc.spec, g.Name(), tc.name)
		}
		got, err := g.Decide(ctx, tc.req)
		if tc.wantErr {
			if err == nil {
				t.Errorf("%s: Decide = %q, want an error", tc.spec, got)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s: Decide = %q, %v; want %q", tc.spec, got, err, tc.want)
		}
	}
	for _, bad := range []string{"", "allow", "rules:", "exec:", "replay:/nonexistent", "rules:/nonexistent", "llm:gpt"} {
		if _, err := ParseGate(bad); err == nil {
			t.Errorf("ParseGate(%q) succeeded", bad)
		}
	}
	os.WriteFile(replay, []byte(`{"action_id":"A1","decision":"perhaps"}`), 0o644)
	if _, err := ParseGate("replay:" + replay); err == nil {
		t.Error("a replay file with a bad decision was accepted")
	}
}
