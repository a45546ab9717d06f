package runner

import (
	"slices"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/modelsrv"
	"github.com/airlock-sandbox/airlock/policies"
)

func TestToolOutput(t *testing.T) {
	for _, c := range []struct {
		in   modelsrv.ToolResult
		out  string
		code int
	}{
		{modelsrv.ToolResult{Output: "Exit code 22\ncurl: (22) 403\n\n<system-reminder>\n<total_tokens>1 left</total_tokens>\n</system-reminder>", IsError: true}, "curl: (22) 403", 22},
		{modelsrv.ToolResult{Output: "(Bash completed with no output)\n\n<system-reminder>x</system-reminder>"}, "", 0},
		{modelsrv.ToolResult{Output: "Process exited with code 3\nOutput:\nboom"}, "Process exited with code 3\nOutput:\nboom", 3},
		{modelsrv.ToolResult{Output: "Chunk ID: 9e495e\nWall time: 0.0000 seconds\nProcess exited with code 1\nOriginal token count: 67\nOutput:\nPermission denied"}, "Permission denied", 1},
		{modelsrv.ToolResult{Output: "denied", IsError: true}, "denied", 1},
		{modelsrv.ToolResult{Output: "a\nb"}, "a\nb", 0},
	} {
		if got := toolOutput(c.in.Output); got != c.out {
			t.Errorf("toolOutput(%q) = %q, want %q", c.in.Output, got, c.out)
		}
		if got := exitCode(c.in); got != c.code {
			t.Errorf("exitCode(%q) = %d, want %d", c.in.Output, got, c.code)
		}
	}
}

func TestParseAgent(t *testing.T) {
	for _, name := range []string{AgentClaudeCode, AgentCodex} {
		a, err := ParseAgent(name)
		if err != nil || a.Name != name || a.Model == "" {
			t.Errorf("ParseAgent(%q) = %+v, %v", name, a, err)
		}
	}
	for _, bad := range []string{"", "claude", "exec:x"} {
		if _, err := ParseAgent(bad); err == nil {
			t.Errorf("ParseAgent(%q) accepted", bad)
		}
	}
}

// The model host is reached over HTTP with the key in the agent's
// environment where the session has no gateway, and over HTTPS with the
// key injected by the gateway where it has one; the policy stays valid.
func TestWithModel(t *testing.T) {
	m := &Models{hosts: []string{"model-0.bench.test"}, keys: []string{"sk-0"}, dir: "/s"}
	for _, name := range []string{AgentClaudeCode, AgentCodex} {
		a, _ := ParseAgent(name)
		open := &policies.Policy{Egress: &policies.Egress{Allow: []string{"git.bench.test"}}}
		base, key, _ := a.withModel(open, m, 0)
		if base != "http://model-0.bench.test" || key != "sk-0" || len(open.Secrets) != 0 || open.Egress.Allow[1] != "model-0.bench.test:80" {
			t.Errorf("%s without the gateway: %s %q %+v", name, base, key, open.Egress)
		}
		if env := a.env(base, key, ""); env[a.keyVar()] != "sk-0" {
			t.Errorf("%s: env %v holds no key", name, env)
		}
		gw := &policies.Policy{Egress: &policies.Egress{Allow: []string{"git.bench.test"}, L7: policies.L7Check}}
		base, key, _ = a.withModel(gw, m, 0)
		if base != "https://model-0.bench.test" || key != "" || len(gw.Secrets) != 1 || gw.Secrets[0].From != "file:/s/model-0.bench.test/key" ||
			gw.Secrets[0].Inject[0].Host != "model-0.bench.test" || gw.Secrets[0].Name != a.keyVar() {
			t.Errorf("%s with the gateway: %s %q %+v", name, base, key, gw.Secrets)
		}
		if env := a.env(base, key, ""); env[a.keyVar()] != "" {
			t.Errorf("%s: env %v holds a key the gateway injects", name, env)
		}
	}
}

func TestRedactKey(t *testing.T) {
	key := `sk-"x"`
	in := `{"env":"ANTHROPIC_API_KEY=sk-\"x\""} and sk-"x" raw`
	if got := redactKey(in, key); strings.Contains(got, "sk-") || strings.Count(got, "[api key]") != 2 {
		t.Errorf("redactKey: %q", got)
	}
	if got := redactKey("a", ""); got != "a" {
		t.Errorf("no key: %q", got)
	}
}

func TestReadGateLog(t *testing.T) {
	claude := `{"type":"system","subtype":"init"}
{"type":"assistant","message":{"content":[{"type":"text","text":"x"},{"type":"tool_use","id":"t1","name":"Bash","input":{"command":"ls"}}]}}
{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"t1"}]}}
{"type":"assistant","message":{"content":[{"type":"tool_use","id":"t2","name":"Bash","input":{"command":"rm -rf /"}}]}}
not json
{"type":"result","permission_denials":[{"tool_name":"Bash","tool_use_id":"t2","tool_input":{"command":"rm -rf /"}}]}`
	g := readGateLog(claude)
	if g.ToolCalls != 2 || len(g.Denied) != 1 || !strings.Contains(g.Denied[0], "rm -rf /") {
		t.Errorf("claude: %+v", g)
	}
	codex := `{"type":"thread.started"}
{"type":"item.started","item":{"type":"command_execution"}}
{"type":"item.completed","item":{"type":"command_execution"}}
{"type":"item.completed","item":{"type":"agent_message"}}`
	if g := readGateLog(codex); g.ToolCalls != 1 || len(g.Denied) != 0 {
		t.Errorf("codex: %+v", g)
	}
}

func TestSetMode(t *testing.T) {
	a, _ := ParseAgent(AgentClaudeCode)
	if a.PermissionMode() != ModeBypass {
		t.Errorf("default mode %s", a.PermissionMode())
	}
	if err := a.SetMode(ModeAuto); err != nil || a.PermissionMode() != ModeAuto || !slices.Contains(a.command("p", "b"), ModeAuto) {
		t.Errorf("auto: %v %s", err, a.PermissionMode())
	}
	if err := a.SetMode("plan"); err == nil {
		t.Error("mode plan accepted")
	}
	c, _ := ParseAgent(AgentCodex)
	if err := c.SetMode(ModeAuto); err == nil {
		t.Error("codex accepted a mode")
	}
}

// With a real model API the agent holds the placeholder in every mode:
// without the gateway it trusts the world's CA (the bench's proxy) from a
// mounted bundle; with it, the gateway terminates and audits its TLS to
// the API under an allow-all rule set.
func TestWithModelUpstream(t *testing.T) {
	m := &Models{hosts: []string{"model-0.bench.test"}, keys: []string{"sk-0"}, dir: "/s", caDir: "/r/model-ca",
		up: &Upstream{Host: "api.anthropic.com", Key: "sk-real"}}
	a, _ := ParseAgent(AgentClaudeCode)
	open := &policies.Policy{Egress: &policies.Egress{Allow: []string{"git.bench.test"}}}
	base, key, ca := a.withModel(open, m, 0)
	if base != "https://api.anthropic.com" || key != Placeholder || ca != caMount+"/bundle.pem" ||
		len(open.Mounts) != 1 || open.Mounts[0].HostPath != "/r/model-ca" || !open.Mounts[0].ReadOnly || len(open.Secrets) != 0 {
		t.Errorf("without the gateway: %s %q %q %+v", base, key, ca, open)
	}
	gw := &policies.Policy{Egress: &policies.Egress{Allow: []string{"git.bench.test"}, L7: policies.L7Check}}
	base, key, ca = a.withModel(gw, m, 0)
	if base != "https://api.anthropic.com" || key != Placeholder || ca != "" || len(gw.Secrets) != 0 || len(gw.Mounts) != 0 ||
		len(gw.Egress.HTTP) != 1 || gw.Egress.HTTP[0].Host != "api.anthropic.com" || gw.Egress.HTTP[0].Default != policies.HTTPAllow {
		t.Errorf("with the gateway: %s %q %q %+v", base, key, ca, gw.Egress)
	}
	if env := a.env(base, key, ca); env[a.keyVar()] != Placeholder {
		t.Errorf("env %v", env)
	}
}
