package policy

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
)

var authgateFamilies = []string{"scope-escalation", "credential-exploration", "inferred-parameters", "external-sharing", "guardrail-bypass"}

func TestLoadAuthGate(t *testing.T) {
	for _, fam := range authgateFamilies {
		a, err := LoadAuthGate(fam)
		if err != nil {
			t.Fatalf("%s: %v", fam, err)
		}
		if a.Family != fam || a.Caller != "alex" || len(a.Words["negation"]) == 0 || a.Workspace.Target != "/workspace" {
			t.Errorf("%s: %+v", fam, a)
		}
		// The shared notes come first, then the family's.
		if len(a.Notes) < 4 {
			t.Errorf("%s: notes %q", fam, a.Notes)
		}
	}
	if _, err := LoadAuthGate("cancel-jobs"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("an AmPermBench family: %v, want not found", err)
	}
	all, err := LoadAll()
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := all["authgate"]; ok {
		t.Error("LoadAll returns authgate.json as an AmPermBench policy")
	}
}

// TestAuthGateInvalid checks that the loader refuses a policy the
// generator could not use, naming what is wrong.
func TestAuthGateInvalid(t *testing.T) {
	edit := func(f func(m map[string]any)) []byte {
		var m map[string]any
		if err := json.Unmarshal(authgateJSON, &m); err != nil {
			t.Fatal(err)
		}
		f(m)
		b, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	fam := func(m map[string]any, name string) map[string]any {
		return m["families"].(map[string]any)[name].(map[string]any)
	}
	for _, tc := range []struct {
		name, family, want string
		f                  func(m map[string]any)
	}{
		{"unknown field", "scope-escalation", "unknown field", func(m map[string]any) { m["callers"] = "x" }},
		{"no caller", "scope-escalation", "caller is empty", func(m map[string]any) { m["caller"] = "" }},
		{"words missing", "inferred-parameters", `words "close" are missing`, func(m map[string]any) {
			delete(fam(m, "inferred-parameters")["words"].(map[string]any), "close")
		}},
		{"bad read scope", "guardrail-bypass", `read scope "models.lst"`, func(m map[string]any) {
			fam(m, "guardrail-bypass")["read_scopes"] = []string{"models.lst"}
		}},
		{"route placeholder", "inferred-parameters", "{number} is not a placeholder", func(m map[string]any) {
			act := fam(m, "inferred-parameters")["acts"].(map[string]any)["close"].(map[string]any)
			act["routes"].([]any)[0].(map[string]any)["path"] = "/v1/repos/{repo}/issues/{number}/close"
		}},
		{"unknown action", "credential-exploration", `act "push"`, func(m map[string]any) {
			fam(m, "credential-exploration")["acts"].(map[string]any)["push"].(map[string]any)["scope"] = "packages.shove repo={repo}"
		}},
		{"no paste", "external-sharing", "needs the paste site", func(m map[string]any) { delete(fam(m, "external-sharing"), "paste") }},
		{"version", "scope-escalation", "version 2", func(m map[string]any) { m["version"] = 2 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseAuthGate("authgate.json", edit(tc.f), tc.family)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "authgate.json: ") {
				t.Errorf("got %v, want an error naming the file and %q", err, tc.want)
			}
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Errorf("%v is not invalid argument", err)
			}
		})
	}
}
